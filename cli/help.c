/* help.c: what `remat --help` and `remat COMMAND --help` print: the
 * commands and each one's flags. A leaf of cli/: the subcommands call
 * cli_help, main.c calls cli_usage, and this file calls none of them. */
#include "args.h"
#include <stdio.h>
#include <string.h>

static const char MODEL_FLAGS[] =
    "model flags:\n"
    "  --model gpt|mlp|llama|uvit|encdec  --layers L --dim C --heads H --context T --vocab V --batch B\n"
    "  --widths 256,1024,256 (mlp hidden widths)  --batchnorm (mlp)  --dropout P\n"
    "  --ffn-dim F (llama; default 8/3 x dim rounded up to 64)  --kv-heads K (llama: grouped-query\n"
    "    attention, K dividing --heads; default --heads)  --rope-theta X (10000)  --norm-eps X (1e-6)\n"
    "  --tie-embeddings (llama: the head reuses model.embed_tokens.weight)\n"
    "  --enc-layers N --dec-layers N (encdec, instead of --layers; --context is both lengths)\n"
    "  (docs/MODELS.md: the models, their tensor names and flags)\n";
static const char FINETUNE_FLAGS[] =
    "fine-tuning flags (docs/MODELS.md, \"Fine-tuning\"):\n"
    "  --freeze PATTERN[,PATTERN] (freeze the parameters these globs name, or their modules:\n"
    "    no gradient, no optimizer state, no backward work for them; e.g. model.embed_tokens,lm_head)\n"
    "  --train-only PATTERN[,PATTERN] (freeze every parameter these globs do not name)\n"
    "  --lora R (LoRA adapters of rank R on --lora-targets; every other parameter frozen)\n"
    "  --lora-alpha A (scale A/R; default 8, PEFT's)  --lora-dropout P (on the adapters' input)\n"
    "  --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (llama; default all seven;\n"
    "    gpt: c_attn,c_proj,c_fc)  --save-adapters DIR (train: the adapters alone, a PEFT folder)\n"
    "  --frozen-dtype auto|f32|bf16|f16 (how frozen weights are kept: auto, the dtype of the folder or file\n"
    "    they are loaded from when BF16/F16 (a bf16 base: 2 bytes a parameter, widened inside the products);\n"
    "    bf16|f16 rounds fp32 weights to it; f32: 4 bytes)\n";
static const char RECOMPUTE_FLAGS[] =
    "recompute flags:\n"
    "  --checkpoint none|blocks|segments:K|sqrt|selective|revolve:S (default none)\n"
    "  --memory-budget SIZE (64MiB, 1.5GiB, 500MB, bytes, or 50% of store-all: plan to fit)\n"
    "  --print-plan (list kept and recomputed values per stage)\n"
    "  --verify-recompute (check every recomputed value equals its first computation)\n"
    "  --precision fp32|bf16 (default fp32; bf16: matrix products take bf16 inputs and sum in fp32, as\n"
    "    PyTorch's CPU autocast, and the activations next to them are kept in bf16: half the bytes;\n"
    "    weights, gradients and the optimizer stay fp32; a resumed run keeps its file's)\n"
    "  --threads N (OpenMP and OpenBLAS threads; default all cores; idle threads spin\n"
    "    GOMP_SPINCOUNT=10000 pauses, then sleep, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set)\n";
static const char TRAIN_FLAGS[] =
    "data flags:\n"
    "  --data FILE (text as bytes, or llm.c token file; default: built-in corpus;\n"
    "    --token-bytes 2|4: token ids of that width, after an llm.c header or without one;\n"
    "    encdec: source<TAB>target lines; default: reverse random lowercase strings)\n"
    "  --val-fraction F (0.1)  --sampler random|sequential\n"
    "training flags:\n"
    "  --steps N --seed S --optimizer adamw|sgd --lr X --warmup N\n"
    "  --lr-schedule constant|cosine --weight-decay X --grad-clip X (0 disables)\n"
    "  --adam-betas B1,B2 (0.9,0.95)  --adam-eps X (1e-8)\n"
    "  --fuse-optimizer (update each parameter in the backward pass as soon as its gradient is final:\n"
    "    no gradient buffer for the whole model; needs --grad-clip 0, no --micro-batches or --shard-optimizer;\n"
    "    under mpirun each gradient is summed over the ranks right before its update)\n"
    "  --eval-every N  --init FILE (.safetensors)  --report FILE (.json)  --quiet\n"
    "  --init DIR (a Hugging Face LlamaForCausalLM folder: config.json and model.safetensors or its\n"
    "    shards; the model flags come from config.json; F32/F16/BF16 weights; docs/MODELS.md)\n"
    "  --allow-output-in-model-folder (an output may be a new file inside the --init folder; by default\n"
    "    no output goes there, and a file that is there already is never replaced)\n"
    "  --trace FILE.json (one step for Perfetto / chrome://tracing)  --trace-step N (default 2)\n"
    "  --memory-limit SIZE (peak RSS of the whole process, e.g. 2GiB: plans recomputation to fit;\n"
    "    with --memory-budget the smaller applies; a --checkpoint strategy that does not fit is refused)\n"
    "  --scratch DIR (page activations and training state to an anonymous file in DIR, on a disk,\n"
    "    not tmpfs: the plan chooses keep, recompute or page per value; the trainable state needs\n"
    "    --fuse-optimizer --grad-clip 0; docs/RECOMPUTE.md)\n"
    "  --scratch-bandwidth BW (e.g. 2GB/s: the plan's disk bandwidth; default: measured at start,\n"
    "    the median of several rounds, or on --resume the file's; 'measure': measure it again)\n"
    "  --page activations,moments,params|all (page these whatever the plan says; state needs --fuse-optimizer)\n"
    "checkpoint files (training state; docs/CHECKPOINT_FILES.md):\n"
    "  --save FILE --save-every N (also FILE.stepNNNNNN) --keep K (last K step files)\n"
    "  --resume FILE (continue to --steps; model flags come from the file)\n"
    "data parallel (mpirun -np P remat train ...; docs/SCALING.md):\n"
    "  --batch B is the global batch, B/P rows per rank; threads default to cores/ranks\n"
    "  --micro-batches K (each rank's B/P rows as K accumulated micro-batches; one process: as K ranks would)\n"
    "  --no-overlap (reduce gradients after the backward, not during it; same results)\n"
    "  --shard-optimizer (ZeRO-1: each rank keeps the AdamW moments of 1/P of the parameters)\n";
static const char SAMPLE_FLAGS[] =
    "sample flags:\n"
    "  --load FILE --prompt TEXT --tokens N --temperature X --top-k K --seed S --threads N\n"
    "  --source TEXT (encdec: decode a target for TEXT, greedy unless --temperature > 0)\n";
static const char EVAL_FLAGS[] =
    "eval flags:\n"
    "  --init DIR (a Hugging Face LlamaForCausalLM folder) or --load FILE (saved by remat train)\n"
    "  --data FILE (held-out tokens, read whole: llm.c token file, or raw ids with --token-bytes 2|4, or text)\n"
    "  --context T --batch B (sequential batches, every target once; --load: the file's by default)\n"
    "  --max-batches N (0: all)  --threads N  --report FILE (.json)  --quiet  --precision fp32|bf16\n"
    "  --frozen-dtype auto|f32|bf16|f16 (how the weights are kept; auto: a BF16/F16 folder's dtype)\n"
    "  --allow-output-in-model-folder (--report may be a new file inside the --init folder)\n";
static const char PLAN_FLAGS[] =
    "plan flags:\n"
    "  model and recompute flags as for train (default --memory-budget 50%; --checkpoint S: that strategy), or\n"
    "  --chain FILE.json --memory-budget BYTES: plan a chain profiled elsewhere\n"
    "  --sweep (budget -> overhead table)  --csv FILE (write it there)  --json (with --chain)\n"
    "  --svg FILE (with --sweep on a model: the chart of predicted overhead against memory)\n"
    "  --scratch DIR [--scratch-bandwidth BW] [--page ...] as for train: the plan may page (with\n"
    "  --sweep: the paged plan of every budget as its own row)\n"
    "chain files: {\"stages\": [{\"uf\",\"ub\",\"a\",\"ab\",\"ft\",\"bt\"}, ...]}, the loss last.\n"
    "  bt, the bytes a stage's backward needs beyond its kept values, must include the\n"
    "  gradient of the stage input: remat lets that gradient replace x during the stage's\n"
    "  backward. Rotor's bwd_tmp leaves it out: for a profile from Rotor use\n"
    "  bt = bwd_tmp + size of the stage input (x), or its schedules go over budget\n"
    "  (docs/RECOMPUTE.md).\n"
    "  --graph FILE.json [--memory-budget BYTES] [--json]: plan any graph profiled elsewhere\n"
    "graph files: {\"nodes\": [{\"forward_time\",\"backward_time\",\"output_bytes\",...}, ...],\n"
    "  \"edges\": [{\"producer\",\"consumer\",\"backward_reads\",\"gradient\"}, ...]}, topological order, the\n"
    "  loss last (docs/RECOMPUTE.md: every field).\n";

static const char EXPORT_FLAGS[] =
    "export flags:\n"
    "  --load FILE (a file of remat train --lora)\n"
    "  --merge-lora --out FILE (the model with the adapters merged into its weights: W + alpha/r B A)\n"
    "  --adapters DIR (the adapters alone: DIR/adapter_model.safetensors and adapter_config.json, PEFT's)\n"
    "  --base-model NAME (adapter_config.json's base_model_name_or_path; a folder: no output goes inside it\n"
    "    unless --allow-output-in-model-folder, and then only new files)  --threads N\n";

static const char BENCH_FLAGS[] =
    "bench flags (and the model, data and --threads flags of train):\n"
    "  --steps N (timed steps per point, 5)  --rounds R (runs of every point, alternating, 2)\n"
    "  --strategies none,selective,blocks,sqrt,segments:2,revolve:2 (the default)\n"
    "  --budgets N (--memory-budget sweep from the least feasible to store-all, 10; 0: none)\n"
    "  --scratch DIR [--scratch-bandwidth BW] (the budget sweep again with paging: points 'budget N% +page')\n"
    "  --csv FILE  --svg FILE (step time against memory)  --compare FILE.csv (other programs' points\n"
    "  in the same columns, e.g. from bench/torch_tradeoff.py)\n"
    "  --x rss|act (the chart's x: every point's peak RSS, the default with --compare, or remat's\n"
    "  activation bytes, the default without)\n"
    "  --allow-output-in-model-folder (--csv, --svg may be new files inside the --init folder)\n"
    "  SIGINT/SIGTERM stops the running child and writes the points measured so far (exit 130/143)\n";

void cli_usage(FILE *f) {
    fputs("usage: remat COMMAND [flags]   (remat COMMAND --help: that command's flags)\n"
          "\n"
          "Trains neural networks under a memory budget by recomputing activations.\n"
          "\n"
          "commands:\n"
          "  train    train a model (GPT by default) and optionally save it\n"
          "  sample   generate text from a saved model (--load FILE)\n"
          "  eval     mean loss and perplexity on held-out tokens (--init DIR or --load FILE, --data FILE)\n"
          "  inspect  list a .safetensors file's tensors and metadata; check its checksum\n"
          "  plan     show the recompute plan for --memory-budget (model flags, --chain or --graph FILE.json);\n"
          "           --sweep prints budget -> overhead (--csv FILE, --svg FILE), --json for --chain\n"
          "  bench    time each strategy and a --memory-budget sweep, one child process per point:\n"
          "           a table, --csv FILE, --svg FILE (step time against memory)\n"
          "  export   a LoRA run's model with the adapters merged (--merge-lora --out FILE), or the\n"
          "           adapters alone as a PEFT folder (--adapters DIR)\n"
          "\n",
          f);
    fputs(MODEL_FLAGS, f);
    fputs(FINETUNE_FLAGS, f);
    fputs(TRAIN_FLAGS, f);
    fputs(RECOMPUTE_FLAGS, f);
    fputs(SAMPLE_FLAGS, f);
}

/* `remat COMMAND --help`: 0, or 2 for an unknown command. */
int cli_help(const char *command) {
    FILE *f = stdout;
    if (!strcmp(command, "train")) {
        fputs("usage: remat train [flags]: train a model and optionally save it\n\n", f);
        fputs(MODEL_FLAGS, f);
        fputs(FINETUNE_FLAGS, f);
        fputs(TRAIN_FLAGS, f);
        fputs(RECOMPUTE_FLAGS, f);
    } else if (!strcmp(command, "sample")) {
        fputs("usage: remat sample --load FILE [flags]: generate text from a model saved by train\n\n", f);
        fputs(SAMPLE_FLAGS, f);
    } else if (!strcmp(command, "eval")) {
        fputs("usage: remat eval (--init DIR | --load FILE) --data FILE [flags]: mean loss and perplexity\n\n", f);
        fputs(EVAL_FLAGS, f);
    } else if (!strcmp(command, "plan")) {
        fputs("usage: remat plan [flags]: show the recompute plan for a memory budget, without training\n\n", f);
        fputs(PLAN_FLAGS, f);
        fputs(MODEL_FLAGS, f);
        fputs(FINETUNE_FLAGS, f);
        fputs(RECOMPUTE_FLAGS, f);
    } else if (!strcmp(command, "bench")) {
        fputs("usage: remat bench [flags]: measure step time and memory of each recompute strategy and\n"
              "of a sweep of memory budgets, each point in its own process\n\n", f);
        fputs(BENCH_FLAGS, f);
        fputs(MODEL_FLAGS, f);
        fputs(FINETUNE_FLAGS, f);
    } else if (!strcmp(command, "export")) {
        fputs("usage: remat export --load FILE [flags]: a LoRA fine-tune for other programs\n\n", f);
        fputs(EXPORT_FLAGS, f);
    } else if (!strcmp(command, "inspect")) {
        fputs("usage: remat inspect FILE.safetensors: list its tensors and metadata and check its\n"
              "checksum (exit 0: sound, 1: malformed or the checksum does not hold)\n", f);
    } else return 2;
    return 0;
}

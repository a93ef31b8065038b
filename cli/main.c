/* main.c: the remat command line. Subcommands: train, sample, inspect.
 * Exit status: 0 success, 1 runtime error, 2 usage error. */
#include "args.h"
#include <stdio.h>
#include <string.h>

int cli_train(const cli_args *a);
int cli_sample(const cli_args *a);
int cli_inspect(int argc, char **argv);
int cli_plan(int argc, char **argv);

static void usage(FILE *f) {
    fputs("usage: remat COMMAND [flags]\n"
          "\n"
          "Trains neural networks under a memory budget by recomputing activations.\n"
          "\n"
          "commands:\n"
          "  train    train a model (GPT by default) and optionally save it\n"
          "  sample   generate text from a saved model (--load FILE)\n"
          "  inspect  list a .safetensors file's tensors and metadata; check its checksum\n"
          "  plan     show the recompute plan for --memory-budget (model flags, or --chain FILE.json);\n"
          "           --sweep prints budget -> overhead (--csv FILE), --json for --chain\n"
          "\n"
          "model flags:\n"
          "  --model gpt|mlp  --layers L --dim C --heads H --context T --vocab V --batch B\n"
          "  --widths 256,1024,256 (mlp hidden widths)  --batchnorm (mlp)  --dropout P\n"
          "data flags:\n"
          "  --data FILE (text as bytes, or llm.c token file; default: built-in corpus)\n"
          "  --val-fraction F (0.1)  --sampler random|sequential\n"
          "training flags:\n"
          "  --steps N --seed S --threads N --optimizer adamw|sgd --lr X --warmup N\n"
          "  --lr-schedule constant|cosine --weight-decay X --grad-clip X (0 disables)\n"
          "  --eval-every N\n"
          "recompute flags:\n"
          "  --checkpoint none|blocks|segments:K|sqrt|selective|revolve:S (default none)\n"
          "  --memory-budget SIZE (64MiB, 1.5GiB, 500MB, bytes, or 50% of store-all: plan to fit)\n"
          "  --print-plan (list kept and recomputed values per stage)\n"
          "  --verify-recompute (check every recomputed value equals its first computation)\n"
          "  --init FILE --save FILE (.safetensors)  --report FILE (.json)  --quiet\n"
          "checkpoint files (training state; docs/CHECKPOINT_FILES.md):\n"
          "  --save FILE --save-every N (also FILE.stepNNNNNN) --keep K (last K step files)\n"
          "  --resume FILE (continue to --steps; model flags come from the file)\n"
          "sample flags:\n"
          "  --load FILE --prompt TEXT --tokens N --temperature X --top-k K --seed S\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("remat %s\n", RM_VERSION);
        return 0;
    }
    cli_args a;
    cli_args_default(&a);
    if (!strcmp(argv[1], "train")) {
        if (!cli_args_parse(&a, argc, argv, 2)) return 2;
        return cli_train(&a);
    }
    if (!strcmp(argv[1], "inspect")) return cli_inspect(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plan")) return cli_plan(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sample")) {
        if (!cli_args_parse(&a, argc, argv, 2)) return 2;
        return cli_sample(&a);
    }
    return cli_fail(2, "unknown command '%s' (commands: train, sample, inspect, plan; see remat --help)", argv[1]);
}

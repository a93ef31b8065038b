/* finetune.c: fine-tuning a pretrained language model with LoRA under a
 * memory limit, in the style of llm.c's train_gpt2.c, through remat.h alone.
 *
 *   finetune MODEL_DIR ADAPTER_DIR [STEPS [MEMORY_LIMIT [DATA]]]
 *
 * MODEL_DIR is a Hugging Face LlamaForCausalLM folder (config.json and
 * model.safetensors, or its shards and their index): SmolLM2, TinyLlama, a
 * Llama... The program
 *   1. opens the folder and builds its model from remat's op builders (ops
 *      only record nodes; nothing runs yet), each weight under the name
 *      transformers gives it, so the folder's tensors find their places;
 *   2. adds a LoRA adapter (Hu et al. 2021) to the seven projections of every
 *      layer and freezes everything else, the base: it keeps its pretrained
 *      values (in the file's 2-byte format when the file has one) and gets
 *      no gradient and no optimizer state;
 *   3. compiles the model under MEMORY_LIMIT (default 1GiB) of libremat's
 *      own memory (the process adds its code and libraries; `remat train
 *      --memory-limit` counts those too): remat plans which activations the
 *      forward pass keeps and which the backward pass recomputes, so that
 *      weights, adapter gradients, AdamW moments and activations fit, and
 *      allocates all of it once;
 *   4. trains STEPS steps (default 50) on DATA, a file read as `remat train
 *      --data` reads it: the ids of the model's own tokenizer as an llm.c
 *      token file (else its bytes, one token each). Without DATA, the text
 *      built into libremat as bytes: only a byte-level model (such as the
 *      test's, tests/hf_tiny.py) learns anything from that;
 *   5. writes the adapters to ADAPTER_DIR as a PEFT folder, which
 *      peft.PeftModel.from_pretrained(model, ADAPTER_DIR) loads.
 * `remat train --init MODEL_DIR --lora 8 --lora-alpha 16 --lora-dropout 0.05
 * --lr 1e-3 --lr-schedule cosine --warmup 5 --context 64 --batch 4` with the
 * same steps and data trains the same adapters, bit for bit, whatever
 * either recomputes. On a machine shared with other work, run it with
 * GOMP_SPINCOUNT=10000 in the environment (remat.h, "Threads").
 *
 * Notation: B batch rows, T tokens per row, C the model width, V the
 * vocabulary, H query heads and K key/value heads of D = C/H dims each, F the
 * MLP's hidden width, r the LoRA rank. */
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What this run does; the model's own shape comes from config.json. */
typedef struct settings {
    const char *model_dir, *adapter_dir, *memory_limit, *data;
    int steps, batch, context;
    int rank;           /* r: the adapters' rank */
    float alpha;        /* an adapter's output is scaled by alpha / r */
    float lora_dropout; /* dropout on an adapter's input */
    float lr;           /* AdamW's peak learning rate */
    int warmup;         /* steps of linear warmup, then cosine decay to lr/10 */
    uint64_t seed;      /* adapter init, dropout masks, the batches */
} settings;

/* ---- the model ---------------------------------------------------------------
 * LLaMA (Touvron et al. 2023) as transformers' LlamaForCausalLM computes it:
 *   x = embed_tokens[tokens]                               (B,T,C)
 *   for each layer:
 *     h = RMSNorm(x)                                       (B,T,C)
 *     q, k, v = h Wq^T, h Wk^T, h Wv^T                     (B,T,C), (B,T,K*D), (B,T,K*D)
 *     q, k = RoPE(q), RoPE(k)         positions enter by rotating pairs of dims
 *     x = x + attention(q, k, v) Wo^T                      causal; K heads of k and v serve H of q
 *     h = RMSNorm(x)
 *     x = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T        SwiGLU, hidden (B,T,F)
 *   loss = cross_entropy(RMSNorm(x) Whead^T, targets)      logits (B,T,V), never stored
 * Every projection W (OUT,IN) gets an adapter: y = x W^T + (alpha/r) x A^T B^T
 * with A (r,IN), B (OUT,r). B starts at zero, so training starts from the
 * pretrained model exactly, and the update B A has rank r: a layer of
 * 2048x2048 trains 2 * 2048 * r numbers instead of 4 million. */

/* A frozen weight (rows,cols) of the base, named as in the folder; its
 * values come from there (rm_hf_load): the init given here is never used. */
static rm_val base_weight(rm_graph *g, const char *name, int64_t rows, int64_t cols) {
    const int64_t shape[2] = {rows, cols};
    return rm_param(g, name, 2, shape, RM_INIT_NORMAL, 0.02f, 0);
}

/* x (..,IN) through the frozen projection "<layer>.<name>.weight" (OUT,IN)
 * and its adapter, whose two matrices rm_lora_linear creates with PEFT's
 * names: "<layer>.<name>.lora_A.weight" (r,IN), "...lora_B.weight" (OUT,r).
 * -> (..,OUT) */
static rm_val lora_proj(rm_graph *g, rm_val x, const char *layer, const char *name, int64_t out, int64_t in,
                        const settings *s) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s.weight", layer, name);
    rm_val w = base_weight(g, full, out, in);
    return rm_lora_linear(g, x, w, -1, s->rank, s->alpha, s->lora_dropout);
}

/* RMSNorm over the last dim with the frozen weight `name` (C):
 * x / sqrt(mean(x^2) + eps) * w. */
static rm_val rmsnorm(rm_graph *g, rm_val x, const char *name, const rm_llama_config *c) {
    const int64_t shape[1] = {c->dim};
    return rm_rmsnorm(g, x, rm_param(g, name, 1, shape, RM_INIT_ONES, 0, 0), c->norm_eps);
}

/* One decoder layer on the residual stream x (B,T,C). Each layer is a
 * stage: the unit the planner keeps or recomputes as a whole, or inside. */
static rm_val layer(rm_graph *g, rm_val x, int l, const rm_llama_config *c, const settings *s) {
    const int64_t C = c->dim, KD = (int64_t)c->dim / c->heads * c->kv_heads, F = c->ffn_dim;
    char p[32], norm[80];
    snprintf(p, sizeof p, "layers.%d", l);
    rm_stage_begin(g, p);
    snprintf(p, sizeof p, "model.layers.%d", l);
    // attention
    snprintf(norm, sizeof norm, "%s.input_layernorm.weight", p);
    rm_val h = rmsnorm(g, x, norm, c);                             // (B,T,C)
    rm_val q = lora_proj(g, h, p, "self_attn.q_proj", C, C, s);    // (B,T,C)
    rm_val k = lora_proj(g, h, p, "self_attn.k_proj", KD, C, s);   // (B,T,K*D)
    rm_val v = lora_proj(g, h, p, "self_attn.v_proj", KD, C, s);   // (B,T,K*D)
    q = rm_rope(g, q, c->heads, c->rope_theta);                    // (B,T,C)
    k = rm_rope(g, k, c->kv_heads, c->rope_theta);                 // (B,T,K*D)
    rm_val a = rm_attention_gqa(g, q, k, v, -1, c->heads, c->kv_heads, 1); // (B,T,C): softmax(q k^T / sqrt(D)) v
    x = rm_add(g, x, lora_proj(g, a, p, "self_attn.o_proj", C, C, s));     // (B,T,C)
    // MLP
    snprintf(norm, sizeof norm, "%s.post_attention_layernorm.weight", p);
    h = rmsnorm(g, x, norm, c);                                    // (B,T,C)
    rm_val gate = lora_proj(g, h, p, "mlp.gate_proj", F, C, s);    // (B,T,F)
    rm_val up = lora_proj(g, h, p, "mlp.up_proj", F, C, s);        // (B,T,F)
    rm_val m = rm_swiglu(g, gate, up);                             // (B,T,F): silu(gate) * up
    return rm_add(g, x, lora_proj(g, m, p, "mlp.down_proj", C, F, s)); // (B,T,C)
}

/* Records the model into g: tokens and targets (B,T) int32 are its inputs,
 * the mean cross-entropy its loss. Then freezes every parameter that is not
 * an adapter (rm_lora_linear froze the projections already; the embedding
 * and the norms are frozen here). A builder's error sticks in g: checked once. */
static rm_status build(rm_graph *g, const rm_llama_config *c, const settings *s, rm_model_io *io) {
    const int64_t bt[2] = {s->batch, s->context};
    memset(io, -1, sizeof *io);
    io->tokens = rm_input(g, "tokens", RM_DTYPE_I32, 2, bt);       // (B,T)
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 2, bt);     // (B,T): tokens shifted by one
    rm_stage_begin(g, "embed");
    rm_val wte = base_weight(g, "model.embed_tokens.weight", c->vocab, c->dim); // (V,C)
    rm_val x = rm_embedding(g, io->tokens, wte);                   // (B,T,C)
    for (int l = 0; l < c->layers; l++) x = layer(g, x, l, c, s);  // (B,T,C)
    rm_stage_begin(g, "head");
    x = rmsnorm(g, x, "model.norm.weight", c);                     // (B,T,C)
    rm_val head = c->tie_embeddings ? wte : base_weight(g, "lm_head.weight", c->vocab, c->dim); // (V,C)
    /* x Whead^T (B,T,V) and its cross-entropy in one op, over chunks of rows:
     * a (B,T,V) tensor of logits is never stored (V is 49,152 for SmolLM2) */
    io->loss = rm_linear_ce(g, x, head, io->targets);              // scalar
    rm_status st = rm_set_loss(g, io->loss);
    for (int i = 0; st == RM_OK && i < rm_param_count(g); i++)
        if (!rm_param_adapter(g, rm_param_at(g, i))) st = rm_param_freeze(g, rm_param_at(g, i));
    return st;
}

/* ---- opening the folder, compiling under the limit -------------------------- */

/* The folder's model with our LoRA on it, compiled under the limit. The
 * folder stays open until its weights are loaded (rm_hf_load). */
static int open_model(const settings *s, rm_hf **hf, rm_llama_config *c, rm_graph **g, rm_model_io *io,
                      rm_session **sess) {
    char err[512];
    if (rm_hf_open(s->model_dir, hf, err, sizeof err) != RM_OK) {
        fprintf(stderr, "finetune: %s\n", err);
        return 1;
    }
    memset(c, 0, sizeof *c);
    rm_hf_llama_config(*hf, c); /* layers, dim, heads, kv_heads, ffn_dim, vocab, rope_theta, norm_eps, tying */
    const int max_t = rm_hf_max_positions(*hf);
    if (max_t > 0 && s->context > max_t) {
        fprintf(stderr, "finetune: context %d is longer than the model's %d positions\n", s->context, max_t);
        return 1;
    }
    printf("model: %s, %d layers, dim %d, %d heads (%d key/value), MLP %d, vocab %d\n", s->model_dir, c->layers,
           c->dim, c->heads, c->kv_heads, c->ffn_dim, c->vocab);
    *g = rm_graph_new();
    rm_status st = *g ? build(*g, c, s, io) : RM_ERR_NOMEM;
    /* The frozen weights kept as the folder stores them: a BF16 file's base
     * costs 2 bytes a weight, widened to fp32 inside each product. */
    if (st == RM_OK) st = rm_hf_store_frozen(*hf, *g, NULL);
    /* rm_hf_load fills the base: rm_compile need not draw its first values */
    if (st == RM_OK) st = rm_hf_mark_loaded(*hf, *g, NULL);
    /* The plan, the arena and every buffer, sized to fit the limit. */
    rm_options o;
    rm_options_default(&o);
    o.seed = s->seed;
    o.memory_limit = s->memory_limit;
    if (st == RM_OK) st = rm_compile(*g, &o, sess);
    if (st != RM_OK) fprintf(stderr, "finetune: %s\n", *g ? rm_graph_errmsg(*g) : "out of memory");
    return st != RM_OK;
}

/* Where the limit went: the weights, the adapters' gradients and AdamW
 * moments, the batch, and what is left for the activations, which the plan
 * fits by recomputing some of them in the backward pass. */
static void print_plan(rm_session *sess) {
    rm_limit_info l;
    rm_plan_info p;
    rm_memory_info m;
    rm_limit(sess, &l);
    rm_plan(sess, &p);
    rm_memory(sess, &m);
    const double MiB = 1048576.0;
    printf("memory limit %.1f MiB: weights %.2f (trainable %.2f), gradients %.2f, AdamW %.2f, inputs %.2f, "
           "margin %.2f, activations %.2f of %.2f MiB left\n", l.limit_bytes / MiB, l.param_bytes / MiB,
           m.trainable_bytes / MiB, l.grad_bytes / MiB, l.optimizer_bytes / MiB, l.input_bytes / MiB,
           l.margin_bytes / MiB, l.arena_bytes / MiB, l.activation_bytes / MiB);
    printf("plan: %s, keeping everything would take %.1f MiB of activations; recomputing costs %.0f%% more FLOPs\n",
           p.strategy, p.store_all_bytes / MiB, 100.0 * p.predicted_overhead);
}

/* ---- training ------------------------------------------------------------------ */

/* The text to fine-tune on, its last 10% held out for validation. */
static int load_data(const settings *s, int vocab, rm_dataset *d) {
    char err[512];
    rm_status st = s->data ? rm_data_load_file(d, s->data, err, sizeof err) : rm_data_load_corpus(d, err, sizeof err);
    if (st == RM_OK) st = rm_data_check_vocab(d, vocab, err, sizeof err); /* every id has a row of embed_tokens */
    if (st == RM_OK) st = rm_data_split(d, 0.1, s->batch, s->context, err, sizeof err);
    if (st != RM_OK) fprintf(stderr, "finetune: %s\n", err);
    return st != RM_OK;
}

/* The mean loss over 8 batches of the held-out part (forward only). */
static int validate(rm_session *sess, const rm_model_io *io, const rm_dataset *d, const char *when) {
    float loss;
    if (rm_evaluate(sess, io, d, 8, &loss) != RM_OK) return 1;
    printf("%s: validation loss %.4f\n", when, loss);
    return 0;
}

/* A step is the instruction list the plan made at rm_compile, run on the
 * arena allocated there (no allocation per step):
 *   forward   every node once; a value the plan drops is freed after its
 *             last forward reader (only the stages' starting points stay);
 *   backward  from the loss back, each node's backward; before a stage's
 *             backward, what it reads and was dropped is recomputed from the
 *             stage's starting point (the same bits: dropout masks are keyed
 *             by step and position, not drawn in order).
 * Only the adapters get gradients. For y = x W^T + s x A^T B^T (s = alpha/r)
 * with dy = dL/dy:  dB = s dy^T (x A^T),  dA = s (dy B)^T x,  dx = dy W + s
 * (dy B) A. W is frozen, so dW = dy^T x is never computed, and where no
 * trainable weight lies upstream (below the first adapter) not even dx.
 * Then AdamW updates A and B from those gradients and its two moments. */
static int train(const settings *s, rm_session *sess, const rm_model_io *io, const rm_dataset *d) {
    rm_optim *opt = NULL;
    if (rm_optim_new(sess, NULL, &opt) != RM_OK) return 1; /* moments of the adapters only */
    const rm_lr_schedule lr = {RM_LR_COSINE, s->lr, s->warmup, s->steps};
    rm_status st = RM_OK;
    for (int step = 0; step < s->steps && st == RM_OK; step++) {
        float loss, norm;
        /* batch `step`: B rows of T+1 tokens at offsets drawn from (seed, step, row) */
        st = rm_data_fill(sess, io, d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, s->seed, (uint64_t)step);
        if (st == RM_OK) st = rm_step(sess, (uint64_t)step, &loss);              /* forward + backward */
        if (st == RM_OK) st = rm_optim_step(opt, rm_lr_at(&lr, (uint64_t)step), &norm); /* adapters -= ... */
        if (st == RM_OK && (step % 10 == 0 || step == s->steps - 1))
            printf("step %d: loss %.4f, gradient norm %.3f, lr %.2e\n", step + 1, loss, norm,
                   rm_lr_at(&lr, (uint64_t)step));
    }
    rm_optim_free(opt);
    return st != RM_OK;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR ADAPTER_DIR [STEPS [MEMORY_LIMIT [DATA]]]\n", argv[0]);
        return 2;
    }
    settings s = {.model_dir = argv[1], .adapter_dir = argv[2], .steps = argc > 3 ? atoi(argv[3]) : 50,
                  .memory_limit = argc > 4 ? argv[4] : "1GiB", .data = argc > 5 ? argv[5] : NULL,
                  .batch = 4, .context = 64, .rank = 8, .alpha = 16.0f, .lora_dropout = 0.05f,
                  .lr = 1e-3f, .warmup = 5, .seed = 1337};
    if (s.steps < 1) {
        fprintf(stderr, "finetune: STEPS must be a positive number, got '%s'\n", argv[3]);
        return 2;
    }
    rm_hf *hf = NULL;
    rm_llama_config c;
    rm_graph *g = NULL;
    rm_session *sess = NULL;
    rm_model_io io;
    rm_dataset data = {0};
    char err[512] = "";
    int rc = open_model(&s, &hf, &c, &g, &io, &sess);
    if (!rc) print_plan(sess);
    /* The pretrained weights into the frozen base; the adapters keep their init. */
    if (!rc && rm_hf_load(hf, sess, NULL, err, sizeof err) != RM_OK) rc = 1;
    rm_hf_close(hf); /* closes the weight files: the session holds its own copy */
    if (!rc) rc = load_data(&s, c.vocab, &data);
    if (!rc) rc = validate(sess, &io, &data, "before");
    if (!rc) rc = train(&s, sess, &io, &data);
    if (!rc) rc = validate(sess, &io, &data, "after");
    if (!rc && rm_save_adapters(sess, s.adapter_dir, s.model_dir, 0, err, sizeof err) != RM_OK) rc = 1;
    if (!rc) {
        rm_memory_info m;
        rm_memory(sess, &m);
        printf("activations: %.2f MiB planned, %.2f MiB measured at the peak\n",
               m.activation_bytes_planned / 1048576.0, m.activation_bytes_measured / 1048576.0);
        printf("saved the adapters to '%s' (adapter_model.safetensors, adapter_config.json)\n", s.adapter_dir);
    } else if (*err) {
        fprintf(stderr, "finetune: %s\n", err);
    } else if (sess && *rm_session_errmsg(sess)) {
        fprintf(stderr, "finetune: %s\n", rm_session_errmsg(sess));
    }
    rm_session_free(sess);
    rm_graph_free(g);
    rm_data_free(&data);
    return rc;
}

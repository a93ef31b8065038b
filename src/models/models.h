/* models.h: parameter and layer helpers shared by the model builders of
 * src/models/ (gpt.c, llama.c, uvit.c, encdec.c). Not installed. Each
 * helper records its parameters in one statement per parameter: argument
 * evaluation order is unspecified in C, and the order of creation is the
 * order of parameters in files. */
#ifndef REMAT_MODELS_H
#define REMAT_MODELS_H
#include "graph/graph.h"

/* A 2-D weight (weight decay on) and a 1-D gain or bias (no decay). */
rm_val rm_model_param2(rm_graph *g, const char *name, int64_t a, int64_t b, rm_init init, float std);
rm_val rm_model_param1(rm_graph *g, const char *name, int64_t a, rm_init init);
/* x -> dropout(x, p), or x itself when p == 0 (no node). */
rm_val rm_model_dropout(rm_graph *g, rm_val x, float p);
/* LayerNorm with "<prefix>.weight" (ones) and "<prefix>.bias" (zeros). */
rm_val rm_model_layernorm(rm_graph *g, rm_val x, const char *prefix, int64_t C);
/* Linear with "<prefix>.weight" (out,in) ~ N(0, std) and, if bias, "<prefix>.bias" (zeros). */
rm_val rm_model_linear(rm_graph *g, rm_val x, const char *prefix, int64_t out, int64_t in, float std, int bias);
/* rm_model_linear, or an rm_lora_linear when the module
 * (the last part of prefix, e.g. "q_proj") is one of lora's targets. */
rm_val rm_model_proj(rm_graph *g, rm_val x, const char *prefix, int64_t out, int64_t in, float std, int bias,
                     const rm_lora_config *lora);
/* models/lora.c: after the model is built, with LoRA (rank > 0): every target must be one
 * of `modules` (else RM_ERR_ARG naming `model`), and every parameter that
 * is not an adapter is frozen. Returns the graph's status. */
rm_status rm_model_lora_finish(rm_graph *g, const rm_lora_config *lora, const char *model,
                               const char *const *modules, int n_modules);
/* GPT-2's pre-norm block at "<prefix>." (nanoGPT names: ln_1, attn.c_attn,
 * attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj) on x (B,T,C): returns the new
 * residual. lora (NULL-able): adapters on c_attn, c_proj, c_fc. */
rm_val rm_model_gpt_block(rm_graph *g, rm_val x, const char *prefix, int64_t C, int heads, float dropout,
                          float std, float proj_std, const rm_lora_config *lora);
/* GPT's inputs (tokens, targets), checks of c (errors name `model`) and stage
 * "embed": token + position embeddings (+ dropout); *wte gets the token table.
 * Returns x (B,T,C), or -1 with the error set. */
rm_val rm_model_gpt_embed(rm_graph *g, const rm_gpt_config *c, const char *model, rm_model_io *io, rm_val *wte);
/* GPT's stage "head": ln_f, logits tied to wte, cross-entropy as the loss. */
rm_status rm_model_gpt_head(rm_graph *g, const rm_gpt_config *c, rm_model_io *io, rm_val x, rm_val wte);
#endif

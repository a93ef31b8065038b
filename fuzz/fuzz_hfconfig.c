/* fuzz_hfconfig.c: a libFuzzer target for a Hugging Face config.json
 * (rm_hf_parse_config, read by remat train/eval --init DIR): whatever the
 * text, the reader either refuses it with a message or returns a llama it
 * can build (every size in range, heads = kv_heads x group, an even head
 * size, positive eps and theta), and never reads past the buffer. Built and
 * run by tests/test_fuzz.sh; by hand: build/fuzz/fuzz_hfconfig fuzz/corpus_hfconfig */
#include "train/hf.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size ? size : 1); /* no terminator: the reader takes the length */
    if (!s) return 0;
    memcpy(s, data, size);
    rm_hf_config c;
    char notes[1024], err[512];
    err[0] = 0;
    rm_status st = rm_hf_parse_config(s, size, "fuzz", &c, notes, sizeof notes, err, sizeof err);
    if (st != RM_OK) {
        if (!memchr(err, 0, sizeof err) || !err[0]) abort(); /* an error says why */
    } else {
        if (c.layers < 1 || c.layers > 4096 || c.dim < 2 || c.dim > 65536 || c.heads < 1 || c.kv_heads < 1 ||
            c.heads % c.kv_heads || c.dim % c.heads || (c.dim / c.heads) % 2 || c.ffn_dim < 1 ||
            c.ffn_dim > (1 << 20) || c.vocab < 2 || c.vocab > (1 << 24) || !(c.norm_eps > 0.0f) ||
            !(c.rope_theta > 0.0f) || !memchr(notes, 0, sizeof notes))
            abort();
    }
    free(s);
    return 0;
}

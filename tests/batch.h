/* batch.h: a deterministic batch for the C tests that train a model: token
 * ids and targets for GPT, features and class targets for the MLP, a pure
 * function of the step (so two runs see the same data). */
#ifndef REMAT_TEST_BATCH_H
#define REMAT_TEST_BATCH_H
#include "remat.h"

static void fill(rm_session *s, const rm_model_io *io, int B, int T, int V, int step) {
    if (io->tokens >= 0) {
        int32_t *tok = rm_value_data(s, io->tokens), *tgt = rm_value_data(s, io->targets);
        for (int i = 0; i < B * T; i++) {
            tok[i] = (i * 7 + step * 3) % V;
            tgt[i] = (i * 5 + step + 1) % V;
        }
        return;
    }
    float *x = rm_value_data(s, io->features);
    int32_t *y = rm_value_data(s, io->targets);
    for (int i = 0; i < B * T; i++) x[i] = (float)((i * 7 + step * 3) % V) / (float)(V - 1);
    for (int b = 0; b < B; b++) y[b] = (b * 5 + step) % V;
}
#endif

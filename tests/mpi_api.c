/* mpi_api.c: the data-parallel calls of remat.h as an MPI program would
 * make them (remat_mpi.h), run by tests/test_mpi.sh under mpirun -np 2:
 *  - rm_step_accumulate with 2 micro-batches per rank: the summed gradients
 *    are those of one process running the 4 micro-batches (up to order);
 *  - a fused session (fuse_optimizer) through rm_step_accumulate (k = 1)
 *    and rm_step: the weights of the unfused session, bit for bit;
 *  - a fill that fails, or a bad token id, on rank 1 only: every rank
 *    returns the error naming rank 1, and none waits forever;
 *  - ranks that pass different k to rm_step_accumulate: refused on both;
 *  - rank 1 alone diverging (a weight made NaN there): rm_step and
 *    rm_step_accumulate fail on both ranks, naming rank 1, not rank 0;
 *  - rank 1 alone paging to a scratch file: the losses of a run that does
 *    not page, bit for bit.
 * Each rank prints its own "mpi_api rank R: N passed, N failed". */
#include "remat_mpi.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, T = 8, K = 2, P = 2 };

typedef struct net {
    rm_graph *g;
    rm_model_io io;
    rm_session *s;
    rm_optim *o;
} net;

/* A small GPT of batch B (dropout on), optionally fused, attached to the
 * ranks when `dist`, paging `page` (RM_PAGE_*) to `scratch` when given. */
static rm_status open_paged_net(net *n, int accumulate, int fused, int dist, const char *scratch, int page) {
    rm_gpt_config c = {.layers = 2, .dim = 16, .heads = 2, .context = T, .vocab = 256, .batch = B, .dropout = 0.1f};
    rm_options o;
    rm_options_default(&o);
    o.threads = 1, o.seed = 7, o.accumulate = accumulate, o.fuse_optimizer = fused;
    o.optim.grad_clip = 0;
    o.scratch_dir = scratch, o.page = page, o.scratch_bandwidth = scratch ? 1e9 : 0;
    memset(n, 0, sizeof *n);
    n->g = rm_graph_new();
    rm_status st = rm_gpt_build(n->g, &c, &n->io);
    if (st == RM_OK) st = rm_compile(n->g, &o, &n->s);
    if (st == RM_OK && dist) st = rm_session_set_comm(n->s, MPI_COMM_WORLD, 0);
    if (st == RM_OK) st = rm_optim_new(n->s, NULL, &n->o);
    if (st == RM_OK && fused) st = rm_optim_set_lr(n->o, 1e-2f);
    return st;
}

static rm_status open_net(net *n, int accumulate, int fused, int dist) {
    return open_paged_net(n, accumulate, fused, dist, NULL, 0);
}

static void close_net(net *n) {
    rm_optim_free(n->o);
    rm_session_free(n->s);
    rm_graph_free(n->g);
}

/* The global batch of P K B rows, row r token t: the same on every rank. */
static int32_t token(int64_t row, int t) { return (int32_t)((row * 37 + t * 11 + 5) % 256); }

typedef struct feed { net *n; int fail_rank, rank; } feed;

static rm_status fill(void *user, rm_session *s, int j, int64_t row0) {
    const feed *f = user;
    (void)j;
    if (f->rank == f->fail_rank) return RM_ERR_IO;
    int32_t *tok = rm_value_data(s, f->n->io.tokens), *tgt = rm_value_data(s, f->n->io.targets);
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) tok[r * T + t] = token(row0 + r, t), tgt[r * T + t] = token(row0 + r, t + 1);
    return RM_OK;
}

/* The largest |a - b| over all gradients, and the largest |a|. */
static void grad_diff(const net *a, const net *b, double *worst, double *big) {
    *worst = 0, *big = 0;
    for (int i = 0; i < rm_param_count(a->g); i++) {
        const float *x = rm_grad(a->s, rm_param_at(a->g, i)), *y = rm_grad(b->s, rm_param_at(b->g, i));
        for (int64_t e = 0; e < rm_numel(a->g, rm_param_at(a->g, i)); e++) {
            *worst = fmax(*worst, fabs((double)x[e] - (double)y[e]));
            *big = fmax(*big, fabs((double)x[e]));
        }
    }
}

static int same_params(const net *a, const net *b) {
    int same = 1;
    for (int i = 0; i < rm_param_count(a->g); i++)
        same &= memcmp(rm_value_data(a->s, rm_param_at(a->g, i)), rm_value_data(b->s, rm_param_at(b->g, i)),
                       (size_t)rm_numel(a->g, rm_param_at(a->g, i)) * sizeof(float)) == 0;
    return same;
}

static void test_accumulate(int rank) {
    net d, one;
    CHECK(open_net(&d, 1, 0, 1) == RM_OK, "rank %d: a session on the ranks: %s", rank, rm_session_errmsg(d.s));
    CHECK(open_net(&one, 1, 0, 0) == RM_OK, "rank %d: a session of its own", rank);
    feed fd = {&d, -1, rank}, fo = {&one, -1, rank};
    float ld, lo;
    CHECK(rm_step_accumulate(d.s, 1, K, fill, &fd, &ld) == RM_OK, "rank %d: P=2 x 2: %s", rank,
          rm_session_errmsg(d.s));
    /* alone, as rank 0 of 1: the P K micro-batches of the global batch */
    CHECK(rm_step_accumulate(one.s, 1, P * K, fill, &fo, &lo) == RM_OK, "rank %d: 1 x 4: %s", rank,
          rm_session_errmsg(one.s));
    double worst, big;
    grad_diff(&d, &one, &worst, &big);
    CHECK(big > 0 && worst <= 1e-6 * big, "rank %d: P=2 x 2 gradients differ from 1 x 4 by %g (largest %g)", rank,
          worst, big);
    CHECK(fabsf(ld - lo) <= 1e-6f * fabsf(lo), "rank %d: mean loss %g vs %g", rank, (double)ld, (double)lo);
    /* rank 1's fill fails: both ranks return it, naming rank 1 */
    fd.fail_rank = 1;
    rm_status st = rm_step_accumulate(d.s, 2, K, fill, &fd, &ld);
    CHECK(st == RM_ERR_IO && strstr(rm_session_errmsg(d.s), "rank 1 of 2") &&
              strstr(rm_session_errmsg(d.s), "micro-batch 0"), "rank %d: rank 1's fill failing: %d %s", rank, st,
          rm_session_errmsg(d.s));
    /* another k on rank 1: its rows would overlap rank 0's or leave some out; refused on both */
    fd.fail_rank = -1;
    st = rm_step_accumulate(d.s, 3, rank ? 1 : K, fill, &fd, &ld);
    CHECK(st == RM_ERR_ARG && strstr(rm_session_errmsg(d.s), "different k"), "rank %d: k %d and %d on the ranks: %d %s",
          rank, K, 1, st, rm_session_errmsg(d.s));
    close_net(&d);
    close_net(&one);
}

static void test_fused(int rank) {
    net f, u;
    CHECK(open_net(&f, 0, 1, 1) == RM_OK, "rank %d: a fused session on the ranks: %s", rank, rm_session_errmsg(f.s));
    CHECK(open_net(&u, 0, 0, 1) == RM_OK, "rank %d: an unfused one", rank);
    rm_optim_set_lr(f.o, 1e-2f);
    feed ff = {&f, -1, rank}, fu = {&u, -1, rank};
    float l;
    for (int step = 0; step < 2; step++) {
        /* step 0 through rm_step_accumulate (k = 1), step 1 through rm_step */
        if (step == 0) {
            CHECK(rm_step_accumulate(f.s, 0, 1, fill, &ff, &l) == RM_OK, "rank %d: fused, k = 1: %s", rank,
                  rm_session_errmsg(f.s));
        } else {
            fill(&ff, f.s, 0, rank * B);
            CHECK(rm_step(f.s, 1, &l) == RM_OK, "rank %d: fused rm_step: %s", rank, rm_session_errmsg(f.s));
        }
        CHECK(rm_step_accumulate(u.s, (uint64_t)step, 1, fill, &fu, &l) == RM_OK &&
                  rm_optim_step(u.o, 1e-2f, NULL) == RM_OK, "rank %d: unfused: %s", rank, rm_session_errmsg(u.s));
    }
    CHECK(same_params(&f, &u), "rank %d: fused on 2 ranks differs from unfused", rank);
    /* a bad token id on rank 1 only: refused on both before the backward */
    fill(&ff, f.s, 0, rank * B);
    if (rank == 1) ((int32_t *)rm_value_data(f.s, f.io.tokens))[3] = 999;
    rm_status st = rm_step(f.s, 2, &l);
    CHECK(st == RM_ERR_ARG && strstr(rm_session_errmsg(f.s), "rank 1 of 2") &&
              strstr(rm_session_errmsg(f.s), "999"), "rank %d: a bad id on rank 1: %d %s", rank, st,
          rm_session_errmsg(f.s));
    ff.fail_rank = 1;
    st = rm_step_accumulate(f.s, 2, 1, fill, &ff, &l);
    CHECK(st == RM_ERR_IO && strstr(rm_session_errmsg(f.s), "rank 1 of 2"), "rank %d: fused, rank 1's fill failing: "
          "%d %s", rank, st, rm_session_errmsg(f.s));
    close_net(&f);
    close_net(&u);
}

/* Rank 1 alone pages its parameters and moments (ranks plan paging from
 * their own disks, so they may differ): the start-up broadcasts still pair
 * up (none hangs), and each step's loss is the unpaged run's, bit for bit.
 * The scratch folder comes from REMAT_TEST_SCRATCH (tests/test_mpi.sh: not
 * tmpfs, which the library refuses). */
static void test_paged_ranks(int rank) {
    const char *dir = getenv("REMAT_TEST_SCRATCH");
    if (!dir) {
        printf("mpi_api rank %d: REMAT_TEST_SCRATCH unset: ranks paging differently not tried\n", rank);
        return;
    }
    net p, u;
    const int page = rank == 1 ? RM_PAGE_PARAMS | RM_PAGE_MOMENTS | RM_PAGE_ACTIVATIONS : 0;
    CHECK(open_paged_net(&p, 0, 1, 1, dir, page) == RM_OK, "rank %d: a session paging %d: %s", rank, page,
          rm_session_errmsg(p.s));
    CHECK(open_net(&u, 0, 1, 1) == RM_OK, "rank %d: an unpaged one: %s", rank, rm_session_errmsg(u.s));
    feed fp = {&p, -1, rank}, fu = {&u, -1, rank};
    for (int step = 0; step < 3; step++) {
        float lp = NAN, lu = NAN;
        fill(&fp, p.s, 0, rank * B), fill(&fu, u.s, 0, rank * B);
        CHECK(rm_step(p.s, (uint64_t)step, &lp) == RM_OK && rm_step(u.s, (uint64_t)step, &lu) == RM_OK,
              "rank %d: step %d: %s %s", rank, step, rm_session_errmsg(p.s), rm_session_errmsg(u.s));
        CHECK(memcmp(&lp, &lu, sizeof lp) == 0, "rank %d: step %d: loss %.9g paging rank 1, %.9g not", rank, step,
              (double)lp, (double)lu);
    }
    close_net(&p);
    close_net(&u);
}

static void test_diverging_rank(int rank) {
    net d;
    CHECK(open_net(&d, 1, 0, 1) == RM_OK, "rank %d: a session on the ranks: %s", rank, rm_session_errmsg(d.s));
    if (rank == 1) ((float *)rm_value_data(d.s, rm_param_at(d.g, 0)))[0] = NAN; /* after set_comm's broadcast */
    feed fd = {&d, -1, rank};
    float l;
    for (int k = 1; k <= K; k++) { /* k 1: rm_step; k 2: rm_step_accumulate */
        rm_status st;
        if (k == 1) fill(&fd, d.s, 0, rank * B), st = rm_step(d.s, 5, &l);
        else st = rm_step_accumulate(d.s, 5, k, fill, &fd, &l);
        const char *m = rm_session_errmsg(d.s);
        CHECK(st != RM_OK && strstr(m, "rank 1 of 2") && strstr(m, "not finite") && !strstr(m, "rank 0 of"),
              "rank %d: rank 1 diverging alone (k %d): %d %s", rank, k, st, m);
    }
    close_net(&d);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != P) {
        if (rank == 0) fprintf(stderr, "mpi_api: run it with mpirun -np %d\n", P);
        MPI_Finalize();
        return 2;
    }
    test_accumulate(rank);
    test_fused(rank);
    test_diverging_rank(rank);
    test_paged_ranks(rank);
    char name[32];
    snprintf(name, sizeof name, "mpi_api rank %d", rank);
    int rc = check_done(name);
    MPI_Finalize();
    return rc;
}

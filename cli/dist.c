/* dist.c: the command line under mpirun (docs/SCALING.md). MPI starts only
 * when the process was launched by mpirun (Open MPI sets
 * OMPI_COMM_WORLD_SIZE; PMI_SIZE and PMIX_RANK for other launchers), so a
 * plain `remat train` never touches MPI. A command that fails on one rank
 * alone ends the whole job (MPI_Abort) with its exit status: no rank waits
 * for one that has gone. An exit the ranks agreed on (a stop by a signal, a
 * save's outcome, a configuration mismatch: cli_dist_agreed) ends with
 * MPI_Finalize on every rank instead, so that no rank ends the job while
 * another still writes. */
#include "args.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef REMAT_MPI
#include "remat_mpi.h"
#endif

static int world_rank, world_size = 1, agreed;
#ifdef REMAT_MPI
static int mpi_on;
#endif

void cli_dist_init(int *argc, char ***argv) {
#ifdef REMAT_MPI
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK")) return;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return;
    mpi_on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size > 1) cli_fail_rank = world_rank;
#else
    (void)argc, (void)argv;
#endif
}

int cli_dist_rank(void) { return world_rank; }
int cli_dist_size(void) { return world_size; }

/* Threads per rank when --threads is not given: the cores divided among
 * the ranks on this node, so ranks never oversubscribe them. */
int cli_dist_threads(void) {
    int local = 1;
#ifdef REMAT_MPI
    if (mpi_on) {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
#endif
    int t = rm_default_threads() / local;
    return t > 0 ? t : 1;
}

rm_status cli_dist_attach(rm_session *s, int flags) {
#ifdef REMAT_MPI
    if (mpi_on) return rm_session_set_comm(s, MPI_COMM_WORLD, flags);
#endif
    (void)s, (void)flags;
    return RM_OK;
}

void cli_dist_agreed(void) { agreed = 1; }

int cli_dist_any(int value) {
#ifdef REMAT_MPI
    if (mpi_on && world_size > 1) {
        int most = value;
        MPI_Allreduce(&value, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        return most;
    }
#endif
    return value;
}

int cli_dist_from_rank0(int value) {
#ifdef REMAT_MPI
    if (mpi_on && world_size > 1) MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
    return value;
}

void cli_dist_allgather(const double *mine, int n, double *all) {
    memcpy(all, mine, sizeof *mine * (size_t)n);
#ifdef REMAT_MPI
    if (mpi_on && world_size > 1) MPI_Allgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD);
#endif
}

#ifdef REMAT_MPI
/* FNV-1a: a 64-bit digest of a string (equal strings, equal digests). */
static uint64_t digest(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The message for item i, which differs: each value once, with the ranks
 * that have it; rank 0 says it, every rank returns 2. Values are told apart
 * by their digests; one longer than the message shows is cut, with its
 * digest, so two values alike in their first characters read apart. */
static int config_mismatch(const cli_config_item *items, int i) {
    enum { W = 96 };
    char mine[W], msg[1000];
    uint64_t my_digest = digest(items[i].value), *digests = malloc(sizeof *digests * (size_t)world_size);
    char *all = malloc((size_t)world_size * W);
    if (strlen(items[i].value) < W) snprintf(mine, sizeof mine, "%.95s", items[i].value); /* all of it */
    else snprintf(mine, sizeof mine, "%.60s... (digest %016llx)", items[i].value, (unsigned long long)my_digest);
    if (!all || !digests) {
        free(all), free(digests);
        return cli_fail(2, "the ranks run different configurations (%s differs)", items[i].name);
    }
    MPI_Allgather(mine, W, MPI_CHAR, all, W, MPI_CHAR, MPI_COMM_WORLD);
    MPI_Allgather(&my_digest, 1, MPI_UINT64_T, digests, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    size_t k = (size_t)snprintf(msg, sizeof msg, "the ranks' configurations differ: %s is", items[i].name);
    for (int r = 0; r < world_size && k < sizeof msg; r++) {
        int first = 1, count = 0;
        for (int q = 0; q < world_size; q++)
            if (digests[q] == digests[r]) first &= q >= r, count++;
        if (!first) continue;
        k += (size_t)snprintf(msg + k, sizeof msg - k, "%s '%s' on rank%s", r ? ";" : "", all + (size_t)r * W,
                              count > 1 ? "s" : "");
        for (int q = r, n = 0; q < world_size && k < sizeof msg; q++)
            if (digests[q] == digests[r]) k += (size_t)snprintf(msg + k, sizeof msg - k, "%s%d", n++ ? "," : " ", q);
    }
    free(all);
    free(digests);
    if (world_rank == 0) {
        int saved = cli_fail_rank;
        cli_fail_rank = -1; /* about every rank, not rank 0's own */
        cli_fail(2, "%s: every rank must run the same command line (mpirun -np P remat train ...)", msg);
        cli_fail_rank = saved;
    }
    return 2;
}
#endif

int cli_dist_check_config(const cli_config_item *items, int n) {
#ifdef REMAT_MPI
    if (!mpi_on || world_size < 2) return 0;
    uint64_t *h = malloc(sizeof *h * 2 * (size_t)(n ? n : 1)), *lo;
    if (!h) return cli_fail(1, "out of memory");
    for (int i = 0; i < n; i++) h[i] = digest(items[i].value);
    lo = h + n;
    MPI_Allreduce(h, lo, n, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, h, n, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    int differs = -1;
    for (int i = 0; i < n && differs < 0; i++)
        if (lo[i] != h[i]) differs = i;
    free(h);
    if (differs < 0) return 0;
    cli_dist_agreed();
    return config_mismatch(items, differs);
#else
    (void)items, (void)n;
    return 0;
#endif
}

int cli_dist_finish(int rc) {
#ifdef REMAT_MPI
    if (mpi_on) {
        fflush(stdout);
        fflush(stderr);
        if (rc != 0 && world_size > 1 && !agreed) MPI_Abort(MPI_COMM_WORLD, rc); /* ends every rank */
        MPI_Finalize();
    }
#endif
    return rc;
}

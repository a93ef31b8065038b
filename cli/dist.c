/* dist.c: the command line under mpirun (docs/SCALING.md). MPI starts only
 * when the process was launched by mpirun (Open MPI sets
 * OMPI_COMM_WORLD_SIZE; PMI_SIZE and PMIX_RANK for other launchers), so a
 * plain `remat train` never touches MPI. A command that fails on any rank
 * ends the whole job (MPI_Abort) with its exit status: no rank waits for
 * one that has gone. */
#include "args.h"
#include <stdlib.h>
#ifdef REMAT_MPI
#include "remat_mpi.h"
#endif

static int world_rank, world_size = 1;
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

int cli_dist_finish(int rc) {
#ifdef REMAT_MPI
    if (mpi_on) {
        fflush(stdout);
        fflush(stderr);
        if (rc != 0 && world_size > 1) MPI_Abort(MPI_COMM_WORLD, rc); /* ends every rank */
        MPI_Finalize();
    }
#endif
    return rc;
}

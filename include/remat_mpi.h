/* remat_mpi.h: the data-parallel calls of remat.h with MPI's own types.
 * Include it (after mpi.h is on the include path: build with mpicc) to
 * pass a communicator directly; remat.h itself never includes mpi.h. */
#ifndef REMAT_MPI_H
#define REMAT_MPI_H

#include <mpi.h>
#include "remat.h"

/* rm_session_set_comm_f (remat.h) with an MPI_Comm (flags: RM_DIST_SHARD,
 * RM_DIST_BLOCKING): collective over comm. */
static inline rm_status rm_session_set_comm(rm_session *s, MPI_Comm comm, int flags) {
    return rm_session_set_comm_f(s, (int)MPI_Comm_c2f(comm), flags);
}

#endif

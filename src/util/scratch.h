/* util/scratch.h: the scratch tier (issue 20). An anonymous file in a
 * directory the user names, where remat pages activations and training
 * state, and the I/O queue that moves buffers to and from it on a thread of
 * its own while the step computes. The plan decides what is paged and
 * where; this layer only moves bytes (and checks them). */
#ifndef REMAT_SCRATCH_H
#define REMAT_SCRATCH_H

#include "util/util.h"
#include <pthread.h>

/* Offsets, lengths and buffer addresses of every transfer are multiples of
 * this, as O_DIRECT asks on the usual file systems (4 KiB blocks). */
#define RM_PAGE_ALIGN 4096
static inline size_t rm_page_round(size_t n) { return (n + RM_PAGE_ALIGN - 1) / RM_PAGE_ALIGN * RM_PAGE_ALIGN; }

typedef struct rm_scratch {
    int fd;             /* -1: closed */
    int direct;         /* O_DIRECT in effect (else the page cache stands between) */
    int tmpfile;        /* O_TMPFILE (else a named file unlinked at once) */
    char dir[512];
    uint64_t reserved;  /* bytes allocated in the file (rm_scratch_reserve) */
    /* REMAT_SCRATCH_FAULT (tests): "enospc:N" fails the Nth write with
     * ENOSPC, "eio:N" the Nth read with EIO, "corrupt:N" changes a byte of
     * the file right after the Nth write */
    int fault, fault_at;
    int n_writes, n_reads;
} rm_scratch;

/* Opens an anonymous file in dir: O_TMPFILE, or a file unlinked at once, so
 * nothing is left in dir whatever happens to the process; O_DIRECT where
 * the file system takes it. A dir on tmpfs or ramfs is refused (its pages
 * are memory: paging there would break a memory limit). RM_ERR_ARG for a
 * dir that is not one, RM_ERR_IO otherwise, with the message in err. */
rm_status rm_scratch_open(rm_scratch *sc, const char *dir, char *err, size_t errlen);
/* Allocates `bytes` in the file up front (fallocate), so the disk's space
 * is claimed before training: RM_ERR_IO naming dir and the bytes when it
 * does not fit. */
rm_status rm_scratch_reserve(rm_scratch *sc, uint64_t bytes, char *err, size_t errlen);
/* One whole transfer (aligned as above): 0, or the errno that stopped it. */
int rm_scratch_write(rm_scratch *sc, const void *buf, size_t n, uint64_t off);
int rm_scratch_read(rm_scratch *sc, void *buf, size_t n, uint64_t off);
/* The injected fault of the next write (or read), counted as rm_scratch_write
 * and rm_scratch_read count them (0: none); and the injected change of a
 * block after a write that `corrupt_at` says is the one. */
int rm_scratch_fault(rm_scratch *sc, int write, int *corrupt_at);
void rm_scratch_corrupt(rm_scratch *sc, uint64_t off);
/* Measures the file's bandwidth (bytes/s): `bytes` written, then read back,
 * through buf (aligned, at least 4 MiB). */
rm_status rm_scratch_probe(rm_scratch *sc, void *buf, size_t buf_bytes, size_t bytes, double *write_bps,
                           double *read_bps, char *err, size_t errlen);
void rm_scratch_close(rm_scratch *sc);

/* One transfer the queue runs: a buffer, a place in the file (its region
 * keys the checksum), and what the I/O thread reports back. */
typedef struct rm_io_req {
    unsigned char *buf;
    size_t bytes;
    uint64_t off;
    int write;
    int region;      /* the file region (checksums are kept per region) */
    int done, err;   /* err: an errno, or RM_IO_CHANGED: the bytes read are not the bytes written */
    double t0, t1;   /* when the transfer ran, ms (CLOCK_MONOTONIC) */
    /* io_uring: the transfer in up to 4 pieces in flight at once (a disk
     * behind virtio moves two 8 MiB requests at once twice as fast as one),
     * each piece's bytes done so far (a short one is resumed), the pieces
     * not yet done and the first error */
    size_t moved[4];
    int pieces, pieces_left, first_err;
    int corrupt;     /* the injected fault: change the block once written */
    uint64_t hash;   /* a write's checksum, taken when it is submitted */
} rm_io_req;
#define RM_IO_CHANGED (-1)

/* The I/O queue. With io_uring (liburing, where the kernel allows it) the
 * step's own thread submits each transfer to the kernel and reaps
 * completions, several transfers in flight at once (what an NVMe disk needs
 * to reach its bandwidth), no thread of ours between; else a thread runs the
 * submitted requests one after another, in order. Requests are slots of a
 * table sized once (rm_ioq_start), so a step allocates nothing. With check
 * set, every region written is hashed and every read compared with it. */
typedef struct rm_ioq {
    void *uring;           /* struct io_uring (NULL: the thread) */
    int inflight;          /* io_uring: transfers submitted and not yet reaped */
    double busy_t0;        /* io_uring: when the queue last went from idle to busy */
    rm_scratch *sc;
    rm_io_req *req;
    int n_req;
    int *ring, head, tail; /* submitted slots, n_req + 1 of them */
    uint64_t *hash;        /* per region (check) */
    unsigned char *hashed; /* region written at least once */
    int n_regions, check;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int running, stop;
    double busy_ms;        /* time spent in transfers since rm_ioq_clear_stats */
    uint64_t bytes_out, bytes_in;
} rm_ioq;

/* Starts the thread with n_req request slots and n_regions regions. */
rm_status rm_ioq_start(rm_ioq *q, rm_scratch *sc, int n_req, int n_regions, int check);
/* Queues slot i (its fields set by the caller; done and err are cleared). */
void rm_ioq_submit(rm_ioq *q, int i);
/* Waits for slot i; returns its err (0: done). */
int rm_ioq_wait(rm_ioq *q, int i);
/* Waits for every submitted slot (after an error, before the buffers go). */
void rm_ioq_drain(rm_ioq *q);
/* Notes the transfers done by now without waiting (io_uring: their times). */
void rm_ioq_poll(rm_ioq *q);
void rm_ioq_clear_stats(rm_ioq *q);
/* Stops the thread and frees the tables (safe on a zeroed or stopped q). */
void rm_ioq_stop(rm_ioq *q);

#endif

/* scratch.c: the scratch file (issue 20). remat pages activations and
 * training state to one anonymous file in a directory the user names:
 *
 *   - anonymous: O_TMPFILE (the file has no name at all), or, where the file
 *     system lacks it, a file unlinked right after it is made. Either way a
 *     crash, a kill -9 or a power cut leaves nothing in the directory.
 *   - O_DIRECT where the file system takes it: transfers bypass the page
 *     cache (which the kernel would fill with gigabytes the user did not ask
 *     for) and run at the disk's speed with no copy. Every transfer is then
 *     4 KiB aligned in address, length and offset (RM_PAGE_ALIGN); the
 *     memory layout places paged buffers so.
 *   - not tmpfs or ramfs: statfs tells, and their pages are memory, so a
 *     memory limit would count them (or, worse, not count them).
 *   - the space is allocated up front (fallocate), so a full disk is found
 *     before training, with a message naming the directory and the bytes.
 *
 * REMAT_SCRATCH_FAULT injects the faults the tests need (a full disk, an
 * I/O error, a file changed underneath) without a special file system. */
#define _GNU_SOURCE
#include "util/scratch.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef RAMFS_MAGIC
#define RAMFS_MAGIC 0x858458f6
#endif

enum { FAULT_NONE = 0, FAULT_ENOSPC, FAULT_EIO, FAULT_CORRUPT };

static void read_fault(rm_scratch *sc) {
    const char *f = getenv("REMAT_SCRATCH_FAULT");
    int at = 0;
    char kind[16] = {0};
    if (!f || sscanf(f, "%15[a-z]:%d", kind, &at) != 2 || at < 1) return;
    sc->fault = !strcmp(kind, "enospc") ? FAULT_ENOSPC : !strcmp(kind, "eio") ? FAULT_EIO
              : !strcmp(kind, "corrupt") ? FAULT_CORRUPT : FAULT_NONE;
    sc->fault_at = at;
}

/* dir must be a directory on a file system whose pages are not memory. */
static rm_status check_dir(const char *dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "scratch directory '%s': %s", dir, strerror(errno));
        return errno == ENOENT || errno == ENOTDIR ? RM_ERR_ARG : RM_ERR_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "scratch directory '%s' is not a directory", dir);
        return RM_ERR_ARG;
    }
    struct statfs fs;
    if (statfs(dir, &fs) != 0) {
        snprintf(err, errlen, "scratch directory '%s': statfs: %s", dir, strerror(errno));
        return RM_ERR_IO;
    }
    if ((unsigned long)fs.f_type == (unsigned long)TMPFS_MAGIC || (unsigned long)fs.f_type == (unsigned long)RAMFS_MAGIC) {
        snprintf(err, errlen, "scratch directory '%s' is on %s, whose pages are memory: paging there would count "
                 "against the memory it is meant to save; name a directory on a disk", dir,
                 (unsigned long)fs.f_type == (unsigned long)TMPFS_MAGIC ? "tmpfs" : "ramfs");
        return RM_ERR_ARG;
    }
    return RM_OK;
}

/* An anonymous file in dir: O_TMPFILE, else a unique name unlinked at once. */
static int open_anonymous(rm_scratch *sc, const char *dir, int direct) {
    int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | flags, 0600);
    if (fd >= 0) {
        sc->tmpfile = 1;
        return fd;
    }
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT) return -1;
#endif
    char path[600];
    for (int attempt = 0; attempt < 100; attempt++) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        snprintf(path, sizeof path, "%s/.remat-scratch-%ld-%ld-%d", dir, (long)getpid(), (long)t.tv_nsec, attempt);
        int fd = open(path, O_CREAT | O_EXCL | flags, 0600);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd >= 0) unlink(path); /* from here the file has no name */
        sc->tmpfile = 0;
        return fd;
    }
    errno = EEXIST;
    return -1;
}

/* O_DIRECT is in effect only if an aligned transfer goes through. */
static int direct_works(int fd) {
    void *b = NULL;
    if (posix_memalign(&b, RM_PAGE_ALIGN, RM_PAGE_ALIGN) != 0) return 0;
    memset(b, 0, RM_PAGE_ALIGN);
    ssize_t w = pwrite(fd, b, RM_PAGE_ALIGN, 0);
    ssize_t r = w == RM_PAGE_ALIGN ? pread(fd, b, RM_PAGE_ALIGN, 0) : -1;
    free(b);
    return r == RM_PAGE_ALIGN && ftruncate(fd, 0) == 0;
}

rm_status rm_scratch_open(rm_scratch *sc, const char *dir, char *err, size_t errlen) {
    memset(sc, 0, sizeof *sc);
    sc->fd = -1;
    if (!dir || !*dir) {
        snprintf(err, errlen, "no scratch directory given");
        return RM_ERR_ARG;
    }
    if (strlen(dir) >= sizeof sc->dir) {
        snprintf(err, errlen, "scratch directory name too long (%zu bytes)", strlen(dir));
        return RM_ERR_ARG;
    }
    rm_status rc = check_dir(dir, err, errlen);
    if (rc != RM_OK) return rc;
    rm_strlcpy(sc->dir, dir, sizeof sc->dir);
    int fd = open_anonymous(sc, dir, 1);
    if (fd >= 0 && !direct_works(fd)) { /* the file system refuses O_DIRECT transfers: buffered */
        int fl = fcntl(fd, F_GETFL);
        if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) == -1) close(fd), fd = -1;
    } else if (fd >= 0) {
        sc->direct = 1;
    }
    if (fd < 0 && errno == EINVAL) fd = open_anonymous(sc, dir, 0); /* O_DIRECT refused at open */
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a scratch file in '%s': %s", dir, strerror(errno));
        return RM_ERR_IO;
    }
    sc->fd = fd;
    read_fault(sc);
    return RM_OK;
}

/* The injected fault "corrupt": one byte of the block at off changed, as
 * another process writing the file would. */
static void corrupt_block(rm_scratch *sc, uint64_t off) {
    void *b = NULL;
    if (posix_memalign(&b, RM_PAGE_ALIGN, RM_PAGE_ALIGN) != 0) return;
    if (pread(sc->fd, b, RM_PAGE_ALIGN, (off_t)off) == RM_PAGE_ALIGN) {
        ((unsigned char *)b)[7] ^= 0x40;
        if (pwrite(sc->fd, b, RM_PAGE_ALIGN, (off_t)off) != RM_PAGE_ALIGN) { /* the fault is best effort */ }
    }
    free(b);
}

rm_status rm_scratch_reserve(rm_scratch *sc, uint64_t bytes, char *err, size_t errlen) {
    if (bytes <= sc->reserved) return RM_OK;
    int e = posix_fallocate(sc->fd, 0, (off_t)bytes);
    if (e == EINVAL || e == EOPNOTSUPP) e = ftruncate(sc->fd, (off_t)bytes) == 0 ? 0 : errno; /* no fallocate: sparse */
    if (e) {
        snprintf(err, errlen, "scratch directory '%s': cannot allocate %.1f MiB (%llu bytes) for paging: %s", sc->dir,
                 (double)bytes / 1048576.0, (unsigned long long)bytes, strerror(e));
        return RM_ERR_IO;
    }
    sc->reserved = bytes;
    return RM_OK;
}

int rm_scratch_fault(rm_scratch *sc, int write, int *corrupt_at) {
    *corrupt_at = 0;
    if (write) {
        sc->n_writes++;
        *corrupt_at = sc->fault == FAULT_CORRUPT && sc->n_writes == sc->fault_at;
        return sc->fault == FAULT_ENOSPC && sc->n_writes == sc->fault_at ? ENOSPC : 0;
    }
    sc->n_reads++;
    return sc->fault == FAULT_EIO && sc->n_reads == sc->fault_at ? EIO : 0;
}

void rm_scratch_corrupt(rm_scratch *sc, uint64_t off) { corrupt_block(sc, off); }

int rm_scratch_write(rm_scratch *sc, const void *buf, size_t n, uint64_t off) {
    sc->n_writes++;
    if (sc->fault == FAULT_ENOSPC && sc->n_writes == sc->fault_at) return ENOSPC;
    const unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(sc->fd, p + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return ENOSPC;
        done += (size_t)w;
    }
    if (sc->fault == FAULT_CORRUPT && sc->n_writes == sc->fault_at) corrupt_block(sc, off);
    return 0;
}

int rm_scratch_read(rm_scratch *sc, void *buf, size_t n, uint64_t off) {
    sc->n_reads++;
    if (sc->fault == FAULT_EIO && sc->n_reads == sc->fault_at) return EIO;
    unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(sc->fd, p + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) return EIO; /* the file is shorter than what was written to it */
        done += (size_t)r;
    }
    return 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

rm_status rm_scratch_probe(rm_scratch *sc, void *buf, size_t buf_bytes, size_t bytes, double *write_bps,
                           double *read_bps, char *err, size_t errlen) {
    size_t chunk = buf_bytes / RM_PAGE_ALIGN * RM_PAGE_ALIGN;
    struct statfs fs; /* on a nearly full disk, a smaller probe (an eighth of what is free) */
    if (fstatfs(sc->fd, &fs) == 0 && (uint64_t)fs.f_bavail * (uint64_t)fs.f_bsize / 8 < bytes)
        bytes = (size_t)((uint64_t)fs.f_bavail * (uint64_t)fs.f_bsize / 8);
    while (chunk > RM_PAGE_ALIGN && chunk > bytes) chunk /= 2;
    chunk = chunk / RM_PAGE_ALIGN * RM_PAGE_ALIGN;
    if (chunk == 0 || bytes < chunk) bytes = chunk;
    bytes = bytes / chunk * chunk;
    memset(buf, 0x5a, chunk);
    int e = 0;
    double t0 = now_s();
    for (size_t off = 0; off < bytes && !e; off += chunk) e = rm_scratch_write(sc, buf, chunk, off);
    if (!e && !sc->direct) { /* buffered: to the disk, and read back from it, not from memory */
        e = fdatasync(sc->fd) == 0 ? 0 : errno;
        posix_fadvise(sc->fd, 0, (off_t)bytes, POSIX_FADV_DONTNEED);
    }
    double t1 = now_s();
    for (size_t off = 0; off < bytes && !e; off += chunk) e = rm_scratch_read(sc, buf, chunk, off);
    double t2 = now_s();
    sc->n_writes = sc->n_reads = 0; /* the probe does not count for injected faults */
    if (e) {
        snprintf(err, errlen, "scratch directory '%s': measuring its bandwidth (writing and reading %.1f MiB, %zu "
                 "bytes): %s", sc->dir, (double)bytes / 1048576.0, bytes, strerror(e));
        return RM_ERR_IO;
    }
    *write_bps = (double)bytes / (t1 - t0 > 1e-6 ? t1 - t0 : 1e-6);
    *read_bps = (double)bytes / (t2 - t1 > 1e-6 ? t2 - t1 : 1e-6);
    return RM_OK;
}

rm_status rm_scratch_check(const char *dir, char *err, size_t errlen) {
    char msg[700];
    rm_scratch sc;
    if (!dir) {
        if (err && errlen) snprintf(err, errlen, "rm_scratch_check: dir is NULL");
        return RM_ERR_ARG;
    }
    rm_status rc = rm_scratch_open(&sc, dir, msg, sizeof msg); /* the checks rm_compile makes, and a file */
    if (rc == RM_OK) rm_scratch_close(&sc);                     /* (anonymous: nothing is left in dir) */
    else if (err && errlen) snprintf(err, errlen, "%s", msg);
    return rc;
}

void rm_scratch_close(rm_scratch *sc) {
    if (sc->fd >= 0) close(sc->fd);
    sc->fd = -1;
    sc->reserved = 0;
}

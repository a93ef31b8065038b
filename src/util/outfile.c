/* outfile.c: rm_out, the one way remat writes a file that is not a
 * checkpoint file (charts, traces, the CLI's reports and CSV tables), as
 * rm_read_file is the one way it reads one (docs/RELIABILITY.md).
 *
 * The target must be a regular file or not exist: it is lstat'ed, never
 * opened, so a FIFO cannot block the writer and a device (/dev/full,
 * /dev/null) or a directory is refused at once. The bytes go to a
 * temporary file in the target's folder, ".<name>.tmp.<pid>" (the name a
 * checkpoint file's save uses), created with O_EXCL, and rm_out_close
 * renames it over the target only when every byte was written and synced:
 * the target then holds its old contents or the new ones, never a part,
 * and a write that fails (a full disk) leaves it as it was. */
#include "util/util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct rm_out {
    FILE *f;
    char *path, *tmp;
};

static void seterr(char *err, size_t errlen, const char *fmt, const char *path, const char *why) {
    if (err && errlen) snprintf(err, errlen, fmt, path, why);
}

/* What is wrong with writing path, or NULL: the target is a regular file
 * or absent, its folder exists. why_buf holds a formatted reason. */
static const char *target_problem(const char *path, char *why_buf, size_t cap) {
    struct stat st;
    if (!*path) return "the name is empty";
    if (path[strlen(path) - 1] == '/') return "it names a folder, not a file";
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) return NULL; /* a dangling link: replaced */
        if (S_ISDIR(st.st_mode)) return "it is a directory: give a file name inside it";
        if (S_ISFIFO(st.st_mode)) return "it is a FIFO (a pipe), not a regular file: remat never writes one";
        if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
            return "it is a device, not a regular file: remat never writes one";
        if (!S_ISREG(st.st_mode)) return "it is not a regular file (a socket?): remat never replaces it";
        return NULL;
    }
    if (errno != ENOENT) return strerror(errno);
    const char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    char *dir = malloc((size_t)(slash - path) + 2);
    if (!dir) return "out of memory";
    snprintf(dir, (size_t)(slash - path) + 2, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    const char *why = NULL;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why_buf, cap, "the folder '%.200s' does not exist (create it first)", dir);
        why = why_buf;
    }
    free(dir);
    return why;
}

/* "<dir>/.<name>.tmp.<pid>" for path, malloc'ed (NULL: out of memory). */
static char *temp_name(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0, cap = strlen(path) + 32;
    char *tmp = malloc(cap);
    if (tmp) snprintf(tmp, cap, "%.*s.%s.tmp.%ld", (int)dlen, path, path + dlen, (long)getpid());
    return tmp;
}

/* Creates the temporary file (O_EXCL: never someone else's); fd or -1. */
static int create_temp(const char *tmp) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0) /* our own pid's: a writer of ours that did not finish */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    return fd;
}

/* The message for a temporary file that cannot be created. */
static void create_error(const char *path, int e, char *err, size_t errlen) {
    if (e == ENAMETOOLONG)
        seterr(err, errlen, "cannot write '%s': %s", path, "the name is too long (with the temporary file's "
               "'.tmp.PID' it passes the file system's limit, usually 255 bytes): give a shorter name");
    else if (e == EACCES || e == EROFS || e == EPERM)
        seterr(err, errlen, "cannot write '%s': its folder is not writable (%s)", path, strerror(e));
    else if (e == ENOENT) /* the folder is there (target_problem): it makes no files ("No such file" misled) */
        seterr(err, errlen, "cannot write '%s': %s", path, "its folder takes no new files (a file system such as "
               "/proc or /sys, or the folder was removed meanwhile): give a path on a disk");
    else seterr(err, errlen, "cannot write '%s': %s", path, strerror(e));
}

rm_status rm_out_check(const char *path, char *err, size_t errlen) {
    char buf[300];
    if (!path) return seterr(err, errlen, "%s%s", "rm_out_check: ", "path is NULL"), RM_ERR_ARG;
    const char *why = target_problem(path, buf, sizeof buf);
    if (why) return seterr(err, errlen, "cannot write '%s': %s", path, why), RM_ERR_IO;
    char *tmp = temp_name(path);
    if (!tmp) return seterr(err, errlen, "cannot write '%s': %s", path, "out of memory"), RM_ERR_NOMEM;
    int fd = create_temp(tmp), e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    if (fd < 0) return create_error(path, e, err, errlen), RM_ERR_IO;
    return RM_OK;
}

rm_status rm_out_open(const char *path, rm_out **out, char *err, size_t errlen) {
    char buf[300];
    if (!path || !out) return seterr(err, errlen, "%s%s", "rm_out_open: ", !out ? "out is NULL" : "path is NULL"), RM_ERR_ARG;
    *out = NULL;
    const char *why = target_problem(path, buf, sizeof buf);
    if (why) return seterr(err, errlen, "cannot write '%s': %s", path, why), RM_ERR_IO;
    rm_out *o = calloc(1, sizeof *o);
    if (o) o->path = strdup(path), o->tmp = temp_name(path);
    if (!o || !o->path || !o->tmp) {
        if (o) free(o->path), free(o->tmp), free(o);
        return seterr(err, errlen, "cannot write '%s': %s", path, "out of memory"), RM_ERR_NOMEM;
    }
    int fd = create_temp(o->tmp), e = errno;
    if (fd >= 0 && !(o->f = fdopen(fd, "w"))) e = errno, close(fd), unlink(o->tmp);
    if (!o->f) {
        free(o->path), free(o->tmp), free(o);
        return create_error(path, e, err, errlen), RM_ERR_IO;
    }
    *out = o;
    return RM_OK;
}

FILE *rm_out_file(rm_out *o) { return o ? o->f : NULL; }

rm_status rm_out_close(rm_out *o, int commit, char *err, size_t errlen) {
    if (!o) return seterr(err, errlen, "%s%s", "rm_out_close: ", "o is NULL"), RM_ERR_ARG;
    int e = 0;
    if (fflush(o->f) != 0 || ferror(o->f)) e = errno ? errno : EIO;
    if (!e && commit && fsync(fileno(o->f)) != 0 && errno != EINVAL) e = errno;
    if (fclose(o->f) != 0 && !e) e = errno ? errno : EIO;
    if (!e && commit && rename(o->tmp, o->path) != 0) e = errno;
    if (e || !commit) unlink(o->tmp);
    rm_status st = RM_OK;
    if (e) {
        seterr(err, errlen, "cannot write '%s': %s (the file is as it was)", o->path, strerror(e));
        st = RM_ERR_IO;
    }
    free(o->path);
    free(o->tmp);
    free(o);
    return st;
}

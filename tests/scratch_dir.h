/* scratch_dir.h: a folder for a test's scratch files (issue 20) on a file
 * system paging may use: under $BUILD (the repository's disk), else
 * /var/tmp, else /tmp, the first that is not tmpfs or ramfs (/tmp often is
 * tmpfs, which remat refuses). 0 on success; check_rmdir removes it. */
#ifndef REMAT_SCRATCH_DIR_H
#define REMAT_SCRATCH_DIR_H
#include <stdio.h>
#include <stdlib.h>
#include <sys/vfs.h>

static inline int scratch_dir_on_disk(const char *dir) {
    struct statfs fs;
    return statfs(dir, &fs) == 0 && (unsigned long)fs.f_type != 0x01021994ul && (unsigned long)fs.f_type != 0x858458f6ul;
}

static inline int scratch_tmpdir(char *dir, size_t cap, const char *name) {
    const char *build = getenv("BUILD");
    const char *bases[3] = {build && *build ? build : "build", "/var/tmp", "/tmp"};
    for (int i = 0; i < 3; i++) {
        if (!scratch_dir_on_disk(bases[i])) continue;
        snprintf(dir, cap, "%s/remat_%s.XXXXXX", bases[i], name);
        if (mkdtemp(dir)) return 0;
    }
    fprintf(stderr, "no folder on a disk (not tmpfs) for scratch files\n");
    return 1;
}

/* The number of entries in dir besides . and .. (-1: unreadable). */
#include <dirent.h>
#include <string.h>
static inline int scratch_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}
#endif

/* paths.c: path identity and the output checks every subcommand makes
 * before its work (paths.h; docs/RELIABILITY.md, "Files"). */
#define _DEFAULT_SOURCE /* realpath */
#include "paths.h"
#include "ckptfile.h"
#include "hf.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "/a/./b//c/../d" -> "/a/b/d" in place (an absolute path). */
static void normalize(char *p) {
    char *out = p, *in = p;
    while (*in) {
        while (*in == '/') in++;
        const char *seg = in;
        size_t len = strcspn(in, "/");
        in += len;
        if (len == 0 || (len == 1 && seg[0] == '.')) continue;
        if (len == 2 && seg[0] == '.' && seg[1] == '.') {
            while (out > p && *--out != '/') {}
            continue;
        }
        *out++ = '/';
        memmove(out, seg, len);
        out += len;
    }
    if (out == p) *out++ = '/';
    *out = 0;
}

int cli_canonical(const char *path, char *out, size_t cap) {
    if (!path || !*path) return 0;
    char *real = realpath(path, NULL);
    if (real) {
        int ok = snprintf(out, cap, "%s", real) < (int)cap;
        free(real);
        return ok;
    }
    /* not there (or a dangling link): the real folder and the last name */
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *slash = NULL;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/') slash = path + i;
    const char *base = slash ? slash + 1 : path;
    size_t blen = n - (size_t)(base - path);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1, slash ? path : ".");
    int special = (blen == 1 && base[0] == '.') || (blen == 2 && base[0] == '.' && base[1] == '.');
    if (!special && (real = realpath(dir, NULL)) != NULL) {
        int ok = snprintf(out, cap, "%s%s%.*s", real, strcmp(real, "/") ? "/" : "", (int)blen, base) < (int)cap;
        free(real);
        return ok;
    }
    /* no folder either: lexically, from the working directory */
    char cwd[PATH_MAX];
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd)) return 0;
    if (snprintf(out, cap, "%s/%.*s", path[0] == '/' ? "" : cwd, (int)n, path) >= (int)cap) return 0;
    normalize(out);
    return 1;
}

int cli_same_file(const char *a, const char *b) {
    if (!a || !b) return 0;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino) return 1;
    char ca[PATH_MAX], cb[PATH_MAX];
    return cli_canonical(a, ca, sizeof ca) && cli_canonical(b, cb, sizeof cb) && strcmp(ca, cb) == 0;
}

/* Whether `path` is one of the step files of output `save` (same folder,
 * "<stem>.stepNNNNNN<ext>"). */
static int is_step_file(const char *save, const char *path) {
    char cs[PATH_MAX], cp[PATH_MAX];
    uint64_t step;
    if (!cli_canonical(save, cs, sizeof cs) || !cli_canonical(path, cp, sizeof cp)) return 0;
    const char *bs = strrchr(cs, '/') + 1, *bp = strrchr(cp, '/') + 1;
    return bs - cs == bp - cp && strncmp(cs, cp, (size_t)(bs - cs)) == 0 && cli_step_of(bs, bp, &step);
}

/* Output f can be written, with its longest step file. */
static int check_writable(const cli_file *f) {
    char err[600];
    if (!*f->path) return cli_fail(2, "%s needs a file name, got ''", f->flag);
    if (strlen(f->path) > PATH_MAX - 64)
        return cli_fail(2, "%s: the path is %zu bytes long; the limit is %d", f->flag, strlen(f->path), PATH_MAX - 64);
    if (rm_out_check(f->path, err, sizeof err) != RM_OK) return cli_fail(1, "%s: %s", f->flag, err);
    char step[PATH_MAX + 32];
    if (f->steps > 0 && (!cli_step_path(f->path, (uint64_t)f->steps, step, sizeof step) ||
                         rm_out_check(step, err, sizeof err) != RM_OK))
        return cli_fail(1, "%s: its step files (--save-every) cannot be written: %s", f->flag, err);
    return 0;
}

/* Whether path is one of the files a Hugging Face folder dir reads
 * (config.json, model.safetensors, its index and shards model-*.safetensors). */
static int in_model_folder(const char *path, const char *dir) {
    struct stat st;
    char cp[PATH_MAX], cd[PATH_MAX];
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (!cli_canonical(path, cp, sizeof cp) || !cli_canonical(dir, cd, sizeof cd)) return 0;
    const char *base = strrchr(cp, '/') + 1;
    const size_t dlen = strlen(cd), n = strlen(base);
    if ((size_t)(base - cp) != (dlen == 1 ? 1 : dlen + 1) || strncmp(cp, cd, dlen) != 0) return 0;
    return !strcmp(base, "config.json") || !strcmp(base, "model.safetensors.index.json") ||
           (!strncmp(base, "model", 5) && n > 12 && !strcmp(base + n - 12, ".safetensors"));
}

/* A step file of output o (--save-every, up to step o->steps) that exists
 * already and is input x by another name (a hard or symbolic link; x NULL:
 * any that exists): its name in out. Writing the step would replace it. */
static int step_file_is(const cli_file *o, const char *x, char *out, size_t cap) {
    struct stat sx, ss;
    if (o->steps <= 0 || (x && stat(x, &sx) != 0)) return 0;
    const char *slash = strrchr(o->path, '/'), *base = slash ? slash + 1 : o->path;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o->path) + 1 : 1, slash ? o->path : ".");
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;
    while (d && !found && (de = readdir(d)) != NULL) {
        uint64_t step;
        found = cli_step_of(base, de->d_name, &step) && step <= (uint64_t)o->steps &&
                cli_step_path(o->path, step, out, cap) &&
                (x ? stat(out, &ss) == 0 && ss.st_dev == sx.st_dev && ss.st_ino == sx.st_ino : lstat(out, &ss) == 0);
    }
    if (d) closedir(d);
    return found;
}

/* How output o and file x collide: 1 the same file, 2 x is one of o's
 * step files, 3 o is a file of the model folder x, 4 one of o's step files
 * that exists already is x, 0 not at all (or o may replace x). */
static int is_input(const cli_file *f) {
    return f->kind == CLI_IN || f->kind == CLI_IN_ANY || f->kind == CLI_MODEL_DIR;
}

static int collision(const cli_file *o, const cli_file *x, char *step, size_t cap) {
    if (o->may_be && !strcmp(o->may_be, x->flag)) return 0;
    if (cli_same_file(o->path, x->path)) return 1;
    if ((x->kind == CLI_IN_ANY || x->kind == CLI_MODEL_DIR) && in_model_folder(o->path, x->path)) return 3;
    if (o->steps > 0 && is_step_file(o->path, x->path)) return 2;
    return is_input(x) && step_file_is(o, x->path, step, cap) ? 4 : 0;
}

/* Folder f can be made or written into. */
static int check_folder(const cli_file *f) {
    struct stat st;
    char err[600];
    if (!*f->path) return cli_fail(2, "%s needs a folder name, got ''", f->flag);
    if (stat(f->path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return cli_fail(1, "%s '%s' exists and is not a folder: give a folder", f->flag, f->path);
        if (access(f->path, W_OK | X_OK) != 0)
            return cli_fail(1, "%s: the folder '%s' is not writable: %s", f->flag, f->path, strerror(errno));
        return 0;
    }
    char probe[PATH_MAX + 8];
    snprintf(probe, sizeof probe, "%s", f->path);
    for (size_t n = strlen(probe); n > 1 && probe[n - 1] == '/'; n--) probe[n - 1] = 0;
    if (rm_out_check(probe, err, sizeof err) != RM_OK) return cli_fail(1, "%s: %s", f->flag, err); /* its parent */
    return 0;
}

void cli_adapter_files(const char *flag, const char *dir, char buf[2][PATH_MAX + 64], cli_file out[3]) {
    struct stat st;
    const int there = dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    static const char *const names[2] = {"adapter_model.safetensors", "adapter_config.json"};
    out[0] = (cli_file){flag, dir, CLI_OUT_DIR, NULL, 0};
    for (int i = 0; i < 2; i++) {
        if (dir) snprintf(buf[i], PATH_MAX + 64, "%s/%s", dir, names[i]);
        out[1 + i] = (cli_file){flag, dir ? buf[i] : NULL, there ? CLI_OUT : CLI_OUT_LATER, NULL, 0};
    }
}

/* Input f is there, a regular file and readable (read later by
 * rm_read_file, which never blocks either): before the work, so that bench
 * does not run every point into the same refusal. */
static int check_readable(const cli_file *f) {
    struct stat st;
    if (!*f->path) return cli_fail(2, "%s needs a file name, got ''", f->flag);
    if (stat(f->path, &st) != 0) return cli_fail(1, "%s: cannot open '%s': %s", f->flag, f->path, strerror(errno));
    if (S_ISDIR(st.st_mode) && f->kind == CLI_IN_ANY) return 0; /* a model folder: rm_hf_open checks its files */
    char hint[600];
    if (S_ISDIR(st.st_mode))
        return cli_fail(1, "%s: cannot read '%s': it is a directory%s", f->flag, f->path,
                        cli_hf_hint(f->path, hint, sizeof hint));
    if (S_ISFIFO(st.st_mode))
        return cli_fail(1, "%s: cannot read '%s': it is a FIFO (a pipe), not a regular file", f->flag, f->path);
    if (!S_ISREG(st.st_mode))
        return cli_fail(1, "%s: cannot read '%s': it is a device or socket, not a regular file", f->flag, f->path);
    int fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* may it be read (permissions, ACLs)? */
    if (fd < 0) return cli_fail(1, "%s: cannot read '%s': %s", f->flag, f->path, strerror(errno));
    close(fd);
    return 0;
}

/* The table, and every file its model folders (CLI_IN_ANY folders) read:
 * config.json, the index, each shard, as rm_hf_open names them, each an
 * input (CLI_IN) of its folder's flag. A folder rm_hf_open refuses adds the
 * names it would read (the open itself fails later, before any work). */
typedef struct file_set {
    cli_file *f;
    const char **folder; /* the model folder an added file belongs to, else NULL */
    int n, cap;
    char **owned;
    int n_owned;
} file_set;

static int set_add(file_set *s, cli_file f, const char *folder, const char *own) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 32;
        cli_file *nf = realloc(s->f, (size_t)cap * sizeof *nf);
        if (nf) s->f = nf;
        const char **nd = realloc(s->folder, (size_t)cap * sizeof *nd);
        if (nd) s->folder = nd;
        char **no = realloc(s->owned, (size_t)cap * sizeof *no);
        if (no) s->owned = no;
        if (!nf || !nd || !no) return 0;
        s->cap = cap;
    }
    char *copy = own ? strdup(own) : NULL;
    if (own && !copy) return 0;
    if (copy) s->owned[s->n_owned++] = copy, f.path = copy;
    s->folder[s->n] = folder;
    s->f[s->n++] = f;
    return 1;
}

static void set_free(file_set *s) {
    for (int i = 0; i < s->n_owned; i++) free(s->owned[i]);
    free(s->owned), free(s->f), free(s->folder);
}

/* Adds the files model folder f reads (f->path a folder). */
static int add_folder_files(file_set *s, const cli_file *f) {
    char err[1024], path[PATH_MAX + 64];
    rm_hf *m = NULL;
    int ok = 1;
    if (rm_hf_open(f->path, &m, err, sizeof err) == RM_OK) {
        for (int i = 0; ok && i < rm_hf_file_count(m); i++)
            ok = set_add(s, (cli_file){f->flag, NULL, CLI_IN, NULL, 0}, f->path, rm_hf_file(m, i));
        rm_hf_close(m);
        return ok;
    }
    static const char *const names[] = {"config.json", "model.safetensors", "model.safetensors.index.json"};
    for (int i = 0; ok && i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", f->path, names[i]);
        if (access(path, F_OK) == 0) ok = set_add(s, (cli_file){f->flag, NULL, CLI_IN, NULL, 0}, f->path, path);
    }
    return ok;
}

/* The Hugging Face folder that file input f is one of the files of (--init
 * m/model.safetensors: m, which holds config.json), canonical, in dir; 0 if
 * none. The folder it is named in: a cache's snapshots/<rev>/, not the
 * blobs/ its links point to. */
static int folder_of_file(const cli_file *f, char *dir, size_t cap) {
    struct stat st;
    char named[PATH_MAX];
    return stat(f->path, &st) == 0 && S_ISREG(st.st_mode) && cli_hf_folder_of(f->path, named, sizeof named) &&
           cli_canonical(named, dir, cap);
}

static int expand(const cli_file *files, int n, file_set *s) {
    struct stat st;
    char dir[PATH_MAX];
    for (int i = 0; i < n; i++)
        if (!set_add(s, files[i], NULL, NULL)) return 0;
    for (int i = 0; i < n; i++) {
        if (!files[i].path || (files[i].kind != CLI_IN_ANY && files[i].kind != CLI_MODEL_DIR)) continue;
        if (stat(files[i].path, &st) == 0 && S_ISDIR(st.st_mode) && !add_folder_files(s, &files[i])) return 0;
        /* a file of a Hugging Face folder (its weights given alone): that folder is guarded as if given */
        if (files[i].kind == CLI_IN_ANY && folder_of_file(&files[i], dir, sizeof dir)) {
            cli_file folder = {files[i].flag, NULL, CLI_MODEL_DIR, NULL, 0};
            if (!set_add(s, folder, NULL, dir)) return 0;
            folder.path = s->f[s->n - 1].path;
            if (!add_folder_files(s, &folder)) return 0;
        }
    }
    return 1;
}

/* The message for output o colliding with x (how: collision()'s answer). */
static int identity_error(const cli_file *o, const cli_file *x, const char *folder, int how, const char *step) {
    if (how == 2)
        return cli_fail(2, "%s '%s' is named like a step file of %s '%s' (--save-every): one would "
                        "overwrite the other; give another path", x->flag, x->path, o->flag, o->path);
    if (how == 3)
        return cli_fail(2, "%s '%s' is a file of the model folder %s '%s': writing it would replace the "
                        "model; give another path", o->flag, o->path, x->flag, x->path);
    if (how == 4)
        return cli_fail(2, "%s's step file '%s' (--save-every) is the same file as %s '%s': writing it would "
                        "replace that input; give another path", o->flag, step, x->flag, x->path);
    if (how == 1 && folder)
        return cli_fail(2, "%s '%s' is the same file as '%s', which the model folder %s '%s' reads: writing it "
                        "would replace the model; give another path", o->flag, o->path, x->path, x->flag, folder);
    if (how == 1 && is_input(x))
        return cli_fail(2, "%s '%s' is the same file as %s '%s': writing it would replace that input; give "
                        "another path", o->flag, o->path, x->flag, x->path);
    return cli_fail(2, "%s '%s' and %s '%s' are the same file: one would overwrite the other; give "
                    "another path", o->flag, o->path, x->flag, x->path);
}

/* Two files that are one (exit 2), first: what the user must change. */
static int check_identity(const file_set *s) {
    char step[PATH_MAX + 32];
    for (int i = 0; i < s->n; i++) {
        const cli_file *o = &s->f[i];
        if (!o->path || is_input(o)) continue;
        for (int j = 0; j < s->n; j++) {
            const cli_file *x = &s->f[j];
            const int how = j == i || !x->path || !strcmp(x->flag, o->flag) ? 0 : collision(o, x, step, sizeof step);
            if (how) return identity_error(o, x, s->folder[j], how, step);
        }
    }
    return 0;
}

/* Where model folder entry j keeps its files, canonical, in out: the
 * folder itself (a CLI_IN_ANY or CLI_MODEL_DIR folder), or the folder of a
 * file it reads (a Hugging Face cache's snapshots/<rev>/x links to
 * ../../blobs/<sha>: blobs/). 0 when entry j is not one. */
static int model_place(const file_set *s, int j, char *out, size_t cap) {
    struct stat st;
    const cli_file *f = &s->f[j];
    if (!f->path) return 0;
    if (!s->folder[j])
        return (f->kind == CLI_IN_ANY || f->kind == CLI_MODEL_DIR) && stat(f->path, &st) == 0 &&
               S_ISDIR(st.st_mode) && cli_canonical(f->path, out, cap);
    if (!cli_canonical(f->path, out, cap)) return 0;
    char *slash = strrchr(out, '/');
    if (slash) slash[slash == out] = 0; /* "/x" -> "/" */
    return 1;
}

/* Whether canonical path p is folder d or inside it. */
static int inside(const char *p, const char *d) {
    const size_t n = strlen(d);
    return n == 1 || (strncmp(p, d, n) == 0 && (p[n] == '/' || p[n] == 0));
}

/* Output o is inside model folder place, which model folder entry x (given
 * as dir) reads: refused unless allowed and new (issue 36). */
static int folder_error(const cli_file *o, const cli_file *x, const char *dir, const char *place, int allow) {
    struct stat st;
    char cdir[PATH_MAX], step[PATH_MAX + 32], where[PATH_MAX + 64] = "";
    const int exists = o->kind != CLI_OUT_DIR && lstat(o->path, &st) == 0;
    const int step_exists = !exists && step_file_is(o, NULL, step, sizeof step);
    if (allow && !exists && !step_exists) return 0;
    if (!cli_canonical(dir, cdir, sizeof cdir) || strcmp(cdir, place))
        snprintf(where, sizeof where, " (in '%s', where it keeps its files)", place);
    /* the interrupt file is named by no flag: --save names where the state goes instead */
    const char *fix = o->flag[0] == '-' ? "give a path outside the folder" : "give --save a path outside the folder";
    if (exists)
        return cli_fail(2, "%s '%s' is a file of the model folder %s '%s'%s: writing it would replace that file; %s",
                        o->flag, o->path, x->flag, dir, where, fix);
    if (step_exists)
        return cli_fail(2, "%s's step file '%s' (--save-every) is a file of the model folder %s '%s'%s: writing it "
                        "would replace that file; %s", o->flag, step, x->flag, dir, where, fix);
    return cli_fail(2, "%s '%s' is inside the model folder %s '%s'%s, which remat reads and does not write into; %s, "
                    "or add --allow-output-in-model-folder to write this new %s there", o->flag, o->path, x->flag,
                    dir, where, fix, o->kind == CLI_OUT_DIR ? "folder" : "file");
}

/* No output inside a model folder, or in a folder holding its files. */
static int check_model_folders(const file_set *s, int allow) {
    char place[PATH_MAX], co[PATH_MAX];
    for (int j = 0; j < s->n; j++) {
        if (!model_place(s, j, place, sizeof place)) continue;
        const char *dir = s->folder[j] ? s->folder[j] : s->f[j].path;
        for (int i = 0; i < s->n; i++) {
            const cli_file *o = &s->f[i];
            if (!o->path || is_input(o) || !cli_canonical(o->path, co, sizeof co) || !inside(co, place)) continue;
            int rc = folder_error(o, &s->f[j], dir, place, allow);
            if (rc) return rc;
        }
    }
    return 0;
}

int cli_check_files(const cli_file *files, int n, int new_in_model) {
    file_set set = {0};
    int rc = expand(files, n, &set) ? check_identity(&set) : cli_fail(1, "out of memory");
    if (!rc && set.n) rc = check_model_folders(&set, new_in_model);
    set_free(&set);
    for (int i = 0; !rc && i < n; i++)
        if (files[i].path && (files[i].kind == CLI_IN || files[i].kind == CLI_IN_ANY)) rc = check_readable(&files[i]);
    for (int i = 0; !rc && i < n; i++)
        if (files[i].path && files[i].kind == CLI_OUT_DIR) rc = check_folder(&files[i]);
    for (int i = 0; !rc && i < n; i++)
        if (files[i].path && files[i].kind == CLI_OUT) rc = check_writable(&files[i]);
    return rc;
}

int cli_check_outputs(const cli_args *a) {
    const int every = a->save && a->save_every ? a->steps : 0;
    char adapter_paths[2][PATH_MAX + 64];
    cli_file files[10] = {
        {"--data", a->data, CLI_IN, NULL, 0},
        {"--init", a->init, CLI_IN_ANY, NULL, 0}, /* a file, or a Hugging Face folder */
        {"--resume", a->resume, CLI_IN, NULL, 0},
        /* --resume FILE --save FILE continues in place (the write is atomic) */
        {"--save", a->save, CLI_OUT, "--resume", every},
        {"--report", a->report, CLI_OUT, NULL, 0},
        {"--trace", a->trace, CLI_OUT, NULL, 0},
        /* written on SIGINT/SIGTERM only; not checked writable (a run in a read-only folder still trains) */
        {"the interrupt file", a->save ? NULL : CLI_INTERRUPT_PATH, CLI_OUT_LATER, "--resume", 0},
    };
    cli_adapter_files("--save-adapters", a->save_adapters, adapter_paths, files + 7);
    return cli_check_files(files, 10, a->new_in_model_folder);
}

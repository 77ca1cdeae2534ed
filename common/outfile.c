/* outfile.c — outputs that never harm inputs (see outfile.h).
 *
 * The only things this file ever unlinks or rmdirs are the temporary file
 * and directory it made itself with mkstemp/mkdtemp (and the files inside
 * that directory): a failure leaves the user's files as they were. A crash
 * (SIGKILL) can leave a hidden ".NAME.XXXXXX" beside the output, never a
 * half-written file under the output's name.
 */
#include "outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poolscope/error.h"

struct psc_out {
    char *shown;                 /* the path as the user gave it (messages) */
    char *final;                 /* where the file ends up (a symlink's target) */
    char *tmp;                   /* the temporary file; NULL when in place */
    int fd;
    FILE *f;
    int in_place;
};

struct psc_outdir {
    char *dir;                   /* as given */
    char *tmp;                   /* the temporary directory */
    int existed;                 /* dir was there: its files are replaced one by one */
    const char *const *inputs;   /* the caller's, checked again at commit */
    size_t n_inputs;
};

static int stat_of(const char *path, struct stat *st)
{
    if (!strcmp(path, "-")) return fstat(STDIN_FILENO, st);
    return stat(path, st);
}

int psc_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!a || !b || stat_of(a, &sa) != 0 || stat_of(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int psc_out_check_inputs(const char *path, const char *const *inputs, size_t n,
                         char *msg, size_t msglen)
{
    for (size_t i = 0; i < n; i++) {
        if (!inputs[i] || !psc_same_file(path, inputs[i])) continue;
        if (!strcmp(path, inputs[i]))   /* callers name the input before the message: once is enough */
            snprintf(msg, msglen, "the output is the input; refusing to overwrite it");
        else
            snprintf(msg, msglen, "%s is the input file %s (same file); refusing to overwrite it",
                     path, inputs[i]);
        return PSC_EINVAL;
    }
    return 0;
}

/* "DIR/.BASE.XXXXXX" for a file whose final path is `final`. */
static char *tmp_name(const char *final)
{
    const char *slash = strrchr(final, '/');
    size_t dl = slash ? (size_t)(slash - final) + 1 : 0;
    const char *base = slash ? slash + 1 : final;
    size_t n = dl + 1 + strlen(base) + 8;
    char *t = malloc(n);
    if (t) snprintf(t, n, "%.*s.%s.XXXXXX", (int)dl, final, base);
    return t;
}

/* base (0666 for a file, 0777 for a directory) less the umask. */
static mode_t new_mode(mode_t base)
{
    mode_t m = umask(0);        /* the only way to read it; put back at once */
    umask(m);
    return base & ~m;
}

static void out_free(psc_out_t *o)
{
    if (!o) return;
    free(o->shown);
    free(o->final);
    free(o->tmp);
    free(o);
}

int psc_out_open(const char *path, const char *const *inputs, size_t n_inputs, int flags,
                 psc_out_t **out, char *msg, size_t msglen)
{
    *out = NULL;
    if (!path || !*path) { snprintf(msg, msglen, "no output file named"); return PSC_EINVAL; }
    int rc = psc_out_check_inputs(path, inputs, n_inputs, msg, msglen);
    if (rc) return rc;
    psc_out_t *o = calloc(1, sizeof *o);
    if (!o || !(o->shown = strdup(path))) { free(o); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
    o->fd = -1;
    struct stat lst, st;
    mode_t mode = 0;
    if (lstat(path, &lst) != 0) {
        if (errno != ENOENT) {
            snprintf(msg, msglen, "cannot write %s: %s", path, strerror(errno));
            out_free(o);
            return PSC_EIO;
        }
        o->final = strdup(path);               /* a new file */
        mode = new_mode(0666);
    } else {
        if (stat(path, &st) != 0) {
            snprintf(msg, msglen, "%s is a symlink to a missing file; refusing to replace it", path);
            out_free(o);
            return PSC_EINVAL;
        }
        if (S_ISDIR(st.st_mode)) {
            snprintf(msg, msglen, "%s is a directory", path);
            out_free(o);
            return PSC_EINVAL;
        }
        if (!S_ISREG(st.st_mode)) {
            if (!(flags & PSC_OUT_SPECIAL)) {
                snprintf(msg, msglen, "%s is not a regular file (a device or FIFO); refusing to replace it", path);
                out_free(o);
                return PSC_EUNSUP;
            }
            /* written in place, never created, truncated or removed */
            o->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
            if (o->fd < 0) {
                snprintf(msg, msglen, "cannot write %s: %s", path, strerror(errno));
                out_free(o);
                return PSC_EIO;
            }
            o->in_place = 1;
            *out = o;
            return 0;
        }
        /* a regular file, perhaps through symlinks: replace the target */
        o->final = S_ISLNK(lst.st_mode) ? realpath(path, NULL) : strdup(path);
        mode = st.st_mode & 07777;
    }
    if (!o->final || !(o->tmp = tmp_name(o->final))) {
        snprintf(msg, msglen, "out of memory");
        out_free(o);
        return PSC_ENOMEM;
    }
    o->fd = mkstemp(o->tmp);
    if (o->fd < 0) {
        snprintf(msg, msglen, "cannot write %s: %s", path, strerror(errno));
        out_free(o);
        return PSC_EIO;
    }
    if (fchmod(o->fd, mode) != 0) { /* keep mkstemp's 0600: safe, only less shared */ }
    *out = o;
    return 0;
}

FILE *psc_out_stream(psc_out_t *o)
{
    if (!o) return NULL;
    if (!o->f && o->fd >= 0) o->f = fdopen(o->fd, "w");
    return o->f;
}

const char *psc_out_path(const psc_out_t *o) { return o->tmp ? o->tmp : o->shown; }
int psc_out_in_place(const psc_out_t *o) { return o->in_place; }

/* Close what is open; 0 or the errno of the first failure. */
static int out_close(psc_out_t *o, int sync)
{
    int e = 0;
    if (o->f) {
        if (fflush(o->f) != 0 || ferror(o->f)) e = errno ? errno : EIO;
        if (!e && sync && fsync(o->fd) != 0) e = errno;
        if (fclose(o->f) != 0 && !e) e = errno ? errno : EIO;
        o->f = NULL;
        o->fd = -1;
    } else if (o->fd >= 0) {
        if (sync && fsync(o->fd) != 0) e = errno;
        if (close(o->fd) != 0 && !e) e = errno;
        o->fd = -1;
    }
    return e;
}

int psc_out_commit(psc_out_t *o, char *msg, size_t msglen)
{
    if (!o) return 0;
    errno = 0;
    int e = out_close(o, !o->in_place);
    if (!e && o->tmp && rename(o->tmp, o->final) != 0) e = errno;
    if (e) {
        snprintf(msg, msglen, "cannot write %s: %s", o->shown, strerror(e));
        if (o->tmp) unlink(o->tmp);
    }
    out_free(o);
    return e ? PSC_EIO : 0;
}

void psc_out_abort(psc_out_t *o)
{
    if (!o) return;
    out_close(o, 0);
    if (o->tmp) unlink(o->tmp);
    out_free(o);
}

/* ---- a directory of outputs ------------------------------------------------ */

static void outdir_free(psc_outdir_t *d)
{
    if (!d) return;
    free(d->dir);
    free(d->tmp);
    free(d);
}

int psc_outdir_open(const char *dir, const char *const *inputs, size_t n_inputs,
                    psc_outdir_t **out, char *msg, size_t msglen)
{
    *out = NULL;
    if (!dir || !*dir) { snprintf(msg, msglen, "no output directory named"); return PSC_EINVAL; }
    int rc = psc_out_check_inputs(dir, inputs, n_inputs, msg, msglen);
    if (rc) return rc;
    struct stat st;
    int existed = stat(dir, &st) == 0;
    if (existed && !S_ISDIR(st.st_mode)) {
        snprintf(msg, msglen, "%s exists and is not a directory", dir);
        return PSC_EINVAL;
    }
    psc_outdir_t *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) { free(d); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
    d->existed = existed;
    d->inputs = inputs;
    d->n_inputs = n_inputs;
    size_t n = strlen(dir) + 32;
    d->tmp = malloc(n);
    if (!d->tmp) { outdir_free(d); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
    if (existed) {
        snprintf(d->tmp, n, "%s/.poolscope.XXXXXX", dir);   /* same file system as its files */
    } else {
        size_t l = strlen(d->dir);
        while (l > 1 && d->dir[l - 1] == '/') d->dir[--l] = 0;   /* "out/" is "out" */
        char *t = tmp_name(d->dir);
        if (!t) { outdir_free(d); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
        free(d->tmp);
        d->tmp = t;
    }
    if (!mkdtemp(d->tmp)) {
        snprintf(msg, msglen, "cannot create directory %s: %s", dir, strerror(errno));
        outdir_free(d);
        return PSC_EIO;
    }
    if (!existed) chmod(d->tmp, new_mode(0777));   /* mkdtemp's 0700 becomes the usual */
    *out = d;
    return 0;
}

const char *psc_outdir_path(const psc_outdir_t *d) { return d->tmp; }

/* Remove the files we made in the temporary directory, then it. */
static void tmpdir_remove(const char *tmp)
{
    DIR *dp = opendir(tmp);
    if (dp) {
        struct dirent *e;
        while ((e = readdir(dp)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            unlinkat(dirfd(dp), e->d_name, 0);          /* files only: a directory is left */
        }
        closedir(dp);
    }
    rmdir(tmp);
}

void psc_outdir_abort(psc_outdir_t *d)
{
    if (!d) return;
    tmpdir_remove(d->tmp);
    outdir_free(d);
}

/* Every file of the temporary directory may replace its namesake in dir:
 * 0, or an error with msg. */
static int outdir_check(psc_outdir_t *d, DIR *dp, char *msg, size_t msglen)
{
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", d->dir, e->d_name) >= sizeof path) {
            snprintf(msg, msglen, "%s: path too long", d->dir);
            return PSC_EINVAL;
        }
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            snprintf(msg, msglen, "%s exists and is not a regular file; refusing to replace it", path);
            return PSC_EINVAL;
        }
        int rc = psc_out_check_inputs(path, d->inputs, d->n_inputs, msg, msglen);
        if (rc) return rc;
    }
    rewinddir(dp);
    return 0;
}

int psc_outdir_commit(psc_outdir_t *d, char *msg, size_t msglen)
{
    if (!d) return 0;
    int rc = 0;
    if (!d->existed) {
        if (rename(d->tmp, d->dir) != 0) {
            snprintf(msg, msglen, "cannot create directory %s: %s", d->dir, strerror(errno));
            rc = PSC_EIO;
        }
    } else {
        DIR *dp = opendir(d->tmp);
        if (!dp) {
            snprintf(msg, msglen, "cannot read %s: %s", d->tmp, strerror(errno));
            rc = PSC_EIO;
        } else {
            rc = outdir_check(d, dp, msg, msglen);
            struct dirent *e;
            char from[PATH_MAX], to[PATH_MAX];
            while (!rc && (e = readdir(dp)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                snprintf(from, sizeof from, "%s/%s", d->tmp, e->d_name);
                snprintf(to, sizeof to, "%s/%s", d->dir, e->d_name);
                if (rename(from, to) != 0) {
                    snprintf(msg, msglen, "cannot write %s: %s", to, strerror(errno));
                    rc = PSC_EIO;
                }
            }
            closedir(dp);
        }
    }
    if (rc || d->existed) tmpdir_remove(d->tmp);
    outdir_free(d);
    return rc;
}


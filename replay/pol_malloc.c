/* pol_malloc.c — the `malloc` policies: the request stream against real
 * allocators, side by side.
 *
 *   malloc           the allocator the helper inherits: glibc, or jemalloc /
 *                    mimalloc when preloaded into poolscope (LD_PRELOAD)
 *   malloc-jemalloc  the helper run with LD_PRELOAD=libjemalloc.so.2
 *   malloc-mimalloc  the helper run with LD_PRELOAD=libmimalloc.so.2
 *
 * Each runs in a helper process of its own, poolscope-malloc-helper
 * (replay/helper/main.c says why and how: a fresh heap, one byte written
 * per page, sampled figures), which tells the allocators apart by their
 * stats entry points (mallctl, mi_process_info) and says in its hello
 * which one it found. The held figure is the allocator's own: glibc's
 * mallinfo2() arena + hblkhd, jemalloc's stats.resident, mimalloc's
 * committed bytes from mi_process_info(); beside it, the helper's RSS.
 *
 * The libraries: $POOLSCOPE_JEMALLOC / $POOLSCOPE_MIMALLOC when set (a
 * path), else the soname (libjemalloc.so.2, libmimalloc.so.2, or the
 * unversioned name) in the directories of $LD_LIBRARY_PATH, /usr/local/lib,
 * the multiarch directories under /usr/lib and /lib (x86_64-linux-gnu, ...),
 * /usr/lib64, /usr/lib, /lib64, /lib — where Debian's libjemalloc2 and
 * libmimalloc2.0 put them. Not found: init fails with PSC_ENOENT and a
 * reason, so `--policy all` skips the row with it; a helper that comes up
 * on another allocator (the library did not override malloc) is skipped
 * the same way. The preload replaces any LD_PRELOAD we inherited.
 *
 * Where the helper is: $POOLSCOPE_MALLOC_HELPER if set (an override),
 * else next to the running executable (the directory of /proc/self/exe:
 * build/bin/ in the tree, $PREFIX/bin/ installed), else in ../bin/ from it
 * (the tree's test and bench programs live in build/tests/, build/bench/).
 * None: init fails with PSC_ENOENT before anything is forked.
 *
 * The parent sends each batch of requests down a socket (before it runs
 * the other policies on the batch, so the helpers' calls overlap them, on
 * another core when there is one); the helper makes the calls and sends back, per request, the address, the usable size and
 * (sampled) the bytes held above its figure at start. The parent feeds
 * those into the analyzer's accumulators, so every metric is computed as
 * for the other policies. Timing (ns_per_op) is the helper's time in the
 * allocator calls alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helper/helper.h"
#include "io.h"
#include "rp_internal.h"

typedef struct pol_malloc {
    rp_pol_t base;
    pid_t child;
    int to_child, from_child;
    rp_mres_t *res;
    size_t res_cap;
    const char *name;
    const char *library;       /* the preloaded path (lib[]), NULL inherited */
    char lib[PATH_MAX];
    rp_mreply_t last;
    int submitted;             /* the batch run gets is with the helper already */
} pol_malloc_t;

/* What a variant preloads. */
typedef struct mvariant {
    const char *env;           /* path override */
    const char *sonames[3];
    int want;                  /* RP_ALLOC_* the helper must report */
    const char *missing, *not_taken;   /* skip reasons */
} mvariant_t;

static const mvariant_t MV_JEMALLOC = {
    "POOLSCOPE_JEMALLOC", { "libjemalloc.so.2", "libjemalloc.so", NULL }, RP_ALLOC_JEMALLOC,
    "libjemalloc.so.2 not found (Debian: libjemalloc2; POOLSCOPE_JEMALLOC names another)",
    "the helper did not run on jemalloc with libjemalloc preloaded",
};
static const mvariant_t MV_MIMALLOC = {
    "POOLSCOPE_MIMALLOC", { "libmimalloc.so.2", "libmimalloc.so", NULL }, RP_ALLOC_MIMALLOC,
    "libmimalloc.so.2 not found (Debian: libmimalloc2.0; POOLSCOPE_MIMALLOC names another)",
    "the helper did not run on mimalloc with libmimalloc preloaded",
};


/* ---- finding the helper ------------------------------------------------------ */

static int is_exec_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* The helper's path into out (PATH_MAX). 0 or PSC_ENOENT. */
static int find_helper(char *out, size_t cap)
{
    const char *env = getenv(RP_HELPER_ENV);
    if (env && *env) {
        if (strlen(env) >= cap || !is_exec_file(env)) return PSC_ENOENT;
        memcpy(out, env, strlen(env) + 1);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return PSC_ENOENT;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return PSC_ENOENT;
    *slash = 0;
    int k = snprintf(out, cap, "%s/%s", exe, RP_HELPER_NAME);
    if (k > 0 && (size_t)k < cap && is_exec_file(out)) return 0;
    k = snprintf(out, cap, "%s/../bin/%s", exe, RP_HELPER_NAME);
    if (k < 0 || (size_t)k >= cap || !is_exec_file(out)) return PSC_ENOENT;
    return 0;
}

/* ---- finding a library -------------------------------------------------------- */

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

/* dir/name into out if it is a readable file. */
static int try_dir(const char *dir, size_t dlen, const char *name, char *out, size_t cap)
{
    int k = snprintf(out, cap, "%.*s/%s", (int)dlen, dir, name);
    return k > 0 && (size_t)k < cap && is_file(out);
}

/* The multiarch directories under base ("/usr/lib/x86_64-linux-gnu"). */
static int try_multiarch(const char *base, const char *name, char *out, size_t cap)
{
    DIR *d = opendir(base);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (!strstr(e->d_name, "-linux-")) continue;
        char dir[PATH_MAX];
        int k = snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
        found = k > 0 && (size_t)k < sizeof dir && try_dir(dir, (size_t)k, name, out, cap);
    }
    closedir(d);
    return found;
}

/* The variant's library into out (PATH_MAX). 0 or PSC_ENOENT. */
static int find_lib(const mvariant_t *v, char *out, size_t cap)
{
    const char *env = getenv(v->env);
    if (env && *env) {
        if (strlen(env) >= cap || !is_file(env)) return PSC_ENOENT;
        memcpy(out, env, strlen(env) + 1);
        return 0;
    }
    static const char *const dirs[] = { "/usr/lib64", "/usr/lib", "/lib64", "/lib" };
    for (int s = 0; s < 3 && v->sonames[s]; s++) {
        const char *name = v->sonames[s];
        const char *lp = getenv("LD_LIBRARY_PATH");
        for (const char *q = lp; q && *q;) {
            const char *e = strchr(q, ':');
            size_t len = e ? (size_t)(e - q) : strlen(q);
            if (len && try_dir(q, len, name, out, cap)) return 0;
            q = e ? e + 1 : NULL;
        }
        if (try_dir("/usr/local/lib", 14, name, out, cap) || try_multiarch("/usr/lib", name, out, cap) ||
            try_multiarch("/lib", name, out, cap))
            return 0;
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
            if (try_dir(dirs[i], strlen(dirs[i]), name, out, cap)) return 0;
    }
    return PSC_ENOENT;
}

/* Our environment with LD_PRELOAD=lib in place of any LD_PRELOAD, in one
 * malloc'ed block (pointers, then the new entry). NULL on no memory. */
static char **preload_env(const char *lib)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n]) n++;
    size_t entry = strlen("LD_PRELOAD=") + strlen(lib) + 1;
    char **env = malloc((n + 2) * sizeof *env + entry);
    if (!env) return NULL;
    char *pre = (char *)(env + n + 2);
    snprintf(pre, entry, "LD_PRELOAD=%s", lib);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11)) env[k++] = environ[i];
    env[k++] = pre;
    env[k] = NULL;
    return env;
}

/* ---- the parent ------------------------------------------------------------ */

static int start(rp_pol_t *pp, const rp_ctx_t *ctx, const mvariant_t *v)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    p->child = -1;
    p->to_child = p->from_child = -1;
    char helper[PATH_MAX];
    if (find_helper(helper, sizeof helper)) return PSC_ENOENT;   /* skip_reason NULL: no helper */
    if (v) {
        if (find_lib(v, p->lib, sizeof p->lib)) {
            pp->skip_reason = v->missing;
            return PSC_ENOENT;
        }
        p->library = p->lib;
    }
    /* one event's requests past a full batch, and replay.c's RQ_SCOPE */
    size_t max_batch = (ctx->cfg->batch ? ctx->cfg->batch : 4096) + RP_STREAM_MAX_OUT + 1;
    if (max_batch > RP_HELPER_MAX_BATCH) return PSC_EINVAL;
    /* argv and environment made before fork: the child only execs */
    char fd[24], nb[24];
    char **env = v ? preload_env(p->lib) : NULL;
    if (v && !env) return PSC_ENOMEM;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        free(env);
        return PSC_EIO;
    }
    snprintf(fd, sizeof fd, "%d", sv[1]);
    snprintf(nb, sizeof nb, "%zu", max_batch);
    char *const argv[] = { (char *)RP_HELPER_NAME, (char *)"--fd", fd, (char *)"--batch", nb, NULL };
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        free(env);
        return PSC_ENOMEM;
    }
    if (pid == 0) {
        fcntl(sv[1], F_SETFD, 0);                 /* survives the exec */
        if (env) execve(helper, argv, env);
        else execv(helper, argv);
        _exit(127);
    }
    free(env);
    close(sv[1]);
    p->child = pid;
    p->to_child = p->from_child = sv[0];
    /* The hello: the helper runs, speaks this protocol, says its allocator.
     * EOF here means the exec failed or it died at once. */
    rp_hello_t h;
    int rc = psc_read_all(p->from_child, &h, sizeof h);
    if (rc) return PSC_EIO;
    if (h.magic != RP_HELPER_MAGIC || h.proto != RP_HELPER_PROTO || h.req_size != sizeof(rp_req_t) ||
        h.res_size != sizeof(rp_mres_t) || h.reply_size != sizeof(rp_mreply_t))
        return PSC_EVERSION;
    p->name = h.allocator == RP_ALLOC_JEMALLOC ? "jemalloc"
            : h.allocator == RP_ALLOC_MIMALLOC ? "mimalloc" : "glibc";
    if (v && h.allocator != v->want) {
        pp->skip_reason = v->not_taken;
        return PSC_ENOENT;
    }
    return 0;
}

static int malloc_init(rp_pol_t *pp, const rp_ctx_t *ctx) { return start(pp, ctx, NULL); }
static int jemalloc_init(rp_pol_t *pp, const rp_ctx_t *ctx) { return start(pp, ctx, &MV_JEMALLOC); }
static int mimalloc_init(rp_pol_t *pp, const rp_ctx_t *ctx) { return start(pp, ctx, &MV_MIMALLOC); }

/* The batch to the helper, which starts on it while the parent runs the
 * other policies (replay.c calls every submit before any run). */
static int malloc_submit(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    uint64_t nn = n;
    int rc;
    if ((rc = rp_grow((void **)&p->res, &p->res_cap, n, sizeof *p->res))) return rc;
    if ((rc = psc_send_all(p->to_child, &nn, sizeof nn)) ||
        (rc = psc_send_all(p->to_child, rq, n * sizeof *rq)))
        return rc;
    p->submitted = 1;
    return 0;
}

static int malloc_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    int rc;
    if (!p->submitted && (rc = malloc_submit(pp, rq, n))) return rc;
    p->submitted = 0;
    if ((rc = psc_read_all(p->from_child, &p->last, sizeof p->last)))
        return rc;
    if (p->last.err) return p->last.err;
    if (p->last.n != n || (rc = psc_read_all(p->from_child, p->res, n * sizeof *p->res)))
        return rc ? rc : PSC_EIO;
    /* backing calls counted per batch: two counters, the same sums (replay
     * never turns counting off), without two calls per request */
    uint64_t n_allocs = 0, n_frees = 0;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        const rp_mres_t *o = &p->res[i];
        if ((r->flags & RQ_F_KV) || !o->addr) continue;
        if (r->op == RQ_ALLOC) {
            if ((rc = az_alloc_obj(pp->m, r->slot, r->t, o->addr, r->bytes, o->usable, r->bytes, r->stack)))
                return rc;
            n_allocs++;
            if (o->held != UINT64_MAX) az_reserved(pp->m, r->t, o->held, 0);
        } else if (r->op == RQ_FREE) {
            az_free_obj(pp->m, r->slot, r->t, o->addr);
            n_frees++;
        }
    }
    az_backing(pp->m, n_allocs, n_frees);
    if (n) az_reserved(pp->m, rq[n - 1].t, p->last.held_end, 0);
    return 0;
}

static int malloc_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    res->allocator = p->name;
    if (p->library && !(res->library = strdup(p->library))) return PSC_ENOMEM;   /* the report's */
    res->held_source = !strcmp(p->name, "jemalloc") ? "stats.resident"
                     : !strcmp(p->name, "mimalloc") ? "mi_process_info commit" : "mallinfo2 arena+hblkhd";
    res->peak_rss_bytes = p->last.peak_rss;
    res->ns_per_op = p->last.ops ? p->last.alloc_seconds * 1e9 / (double)p->last.ops : 0;
    az_finish(pp->m, t_end);
    return 0;
}

static void malloc_fini(rp_pol_t *pp)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    if (p->to_child >= 0) close(p->to_child);     /* EOF: the child exits */
    if (p->child > 0) {
        int status;
        while (waitpid(p->child, &status, 0) < 0 && errno == EINTR) {}
    }
    free(p->res);
}

const rp_pol_ops_t rp_pol_malloc = { RP_MALLOC, sizeof(pol_malloc_t), malloc_init, malloc_run,
                                     malloc_finish, malloc_fini, malloc_submit };
const rp_pol_ops_t rp_pol_malloc_jemalloc = { RP_MALLOC_JEMALLOC, sizeof(pol_malloc_t), jemalloc_init,
                                              malloc_run, malloc_finish, malloc_fini, malloc_submit };
const rp_pol_ops_t rp_pol_malloc_mimalloc = { RP_MALLOC_MIMALLOC, sizeof(pol_malloc_t), mimalloc_init,
                                              malloc_run, malloc_finish, malloc_fini, malloc_submit };

/* pol_malloc.c — the `malloc` policy: the request stream against the real
 * allocator.
 *
 * glibc by default; jemalloc or mimalloc when preloaded (LD_PRELOAD), told
 * apart by their stats entry points (mallctl, mi_process_info). The calls
 * run in a helper process, poolscope-malloc-helper (replay/helper/main.c
 * says why and how: a fresh heap, one byte written per page, sampled
 * figures). It inherits our environment, so a preloaded allocator is the
 * one measured, and it says in its hello which allocator it found.
 *
 * Where the helper is: $POOLSCOPE_MALLOC_HELPER if set (an override),
 * else next to the running executable (the directory of /proc/self/exe:
 * build/bin/ in the tree, $PREFIX/bin/ installed), else in ../bin/ from it
 * (the tree's test and bench programs live in build/tests/, build/bench/).
 * None: init fails with PSC_ENOENT before anything is forked.
 *
 * The parent sends each batch of requests down a socket; the helper makes
 * the calls and sends back, per request, the address, the usable size and
 * (sampled) the bytes held above its figure at start. The parent feeds
 * those into the analyzer's accumulators, so every metric is computed as
 * for the other policies. Timing (ns_per_op) is the helper's time in the
 * allocator calls alone.
 */
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
    rp_mreply_t last;
} pol_malloc_t;

/* ---- I/O helpers ---------------------------------------------------------- */


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

/* ---- the parent ------------------------------------------------------------ */

static int malloc_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    p->child = -1;
    p->to_child = p->from_child = -1;
    char helper[PATH_MAX];
    if (find_helper(helper, sizeof helper)) return PSC_ENOENT;
    size_t max_batch = (ctx->cfg->batch ? ctx->cfg->batch : 4096) + RP_STREAM_MAX_OUT;
    if (max_batch > RP_HELPER_MAX_BATCH) return PSC_EINVAL;
    /* argv made before fork: the child only execs */
    char fd[24], nb[24];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return PSC_EIO;
    snprintf(fd, sizeof fd, "%d", sv[1]);
    snprintf(nb, sizeof nb, "%zu", max_batch);
    char *const argv[] = { (char *)RP_HELPER_NAME, (char *)"--fd", fd, (char *)"--batch", nb, NULL };
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return PSC_ENOMEM;
    }
    if (pid == 0) {
        fcntl(sv[1], F_SETFD, 0);                 /* survives the exec */
        execv(helper, argv);
        _exit(127);
    }
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
    return 0;
}

static int malloc_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    uint64_t nn = n;
    int rc;
    if ((rc = rp_grow((void **)&p->res, &p->res_cap, n, sizeof *p->res))) return rc;
    if ((rc = psc_send_all(p->to_child, &nn, sizeof nn)) ||
        (rc = psc_send_all(p->to_child, rq, n * sizeof *rq)) ||
        (rc = psc_read_all(p->from_child, &p->last, sizeof p->last)))
        return rc;
    if (p->last.err) return p->last.err;
    if (p->last.n != n || (rc = psc_read_all(p->from_child, p->res, n * sizeof *p->res)))
        return rc ? rc : PSC_EIO;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        const rp_mres_t *o = &p->res[i];
        if ((r->flags & RQ_F_KV) || !o->addr) continue;
        if (r->op == RQ_ALLOC) {
            if ((rc = az_alloc(pp->m, r->t, o->addr, r->bytes, o->usable, r->bytes, r->stack)))
                return rc;
            az_backing(pp->m, 1, 0);
            if (o->held != UINT64_MAX) az_reserved(pp->m, r->t, o->held, 0);
        } else if (r->op == RQ_FREE) {
            az_free(pp->m, r->t, o->addr);
            az_backing(pp->m, 0, 1);
        }
    }
    if (n) az_reserved(pp->m, rq[n - 1].t, p->last.held_end, 0);
    return 0;
}

static int malloc_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    res->allocator = p->name;
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
                                     malloc_finish, malloc_fini };

/* pol_malloc.c — the `malloc` policy: the request stream against the real
 * allocator.
 *
 * glibc by default; jemalloc or mimalloc when preloaded (LD_PRELOAD), told
 * apart by their stats entry points (mallctl, mi_process_info). Every
 * allocation has one byte written per page (and its last byte), so the
 * pages are really committed and RSS is real.
 *
 * Where it runs. The allocator's own figures (glibc mallinfo2() arena +
 * hblkhd, jemalloc stats.mapped, mimalloc current commit) and RSS are
 * per process, and the replay process allocates plenty of its own (the
 * trace reader alone holds tens of MiB of buffers, and what it frees stays
 * in the heap as free space the policy's objects would quietly reuse). So
 * the allocator calls run in a helper: this same executable re-executed
 * (/proc/self/exe, so the same allocator and the same LD_PRELOAD) with a
 * fresh heap, entered through a constructor below before main() when the
 * environment names the socket to serve. The parent sends each batch of
 * requests down the socket; the helper makes the calls and sends back, per
 * request, the address, the usable size and (sampled) the bytes held above
 * its figure at start. The parent feeds those into the analyzer's
 * accumulators, so every metric is computed as for the other policies.
 *
 * Sampling: reading the allocator's figure costs a microsecond or two, so
 * it is read every 256 operations, after every allocation of 64 KiB or more,
 * and at the end of each batch (a peak between two samples made only of
 * small objects is missed by at most 256 of them). RSS is read every 16384
 * operations and at the end of each batch.
 *
 * Timing (ns_per_op) is the child's time in the allocator calls alone.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rp_internal.h"

#define SAMPLE_EVERY 256
#define SAMPLE_BIG   ((uint64_t)64 << 10)
#define RSS_EVERY    16384
#define RP_CHILD_FD_ENV    "POOLSCOPE_REPLAY_MALLOC_FD"
#define RP_CHILD_BATCH_ENV "POOLSCOPE_REPLAY_MALLOC_BATCH"

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef void (*mi_info_fn)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *,
                           size_t *);

typedef struct mres { uint64_t addr, usable, held; } mres_t;   /* held: UINT64_MAX = no sample */

typedef struct mreply {
    uint64_t n, ops, held_end, peak_rss;
    double alloc_seconds;
    int32_t err;
    int32_t pad_;
} mreply_t;

/* The child's state. */
typedef struct mchild {
    void **ptr;
    size_t cap;
    mallctl_fn mallctl;
    mi_info_fn mi_info;
    uint64_t held0, rss0, peak_rss, ops;
    uint64_t since_sample, since_rss;
    int statm;
    size_t page;
    double alloc_seconds;
} mchild_t;

typedef struct pol_malloc {
    rp_pol_t base;
    pid_t child;
    int to_child, from_child;
    mres_t *res;
    size_t res_cap;
    const char *name;
    mreply_t last;
} pol_malloc_t;

/* ---- I/O helpers ---------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);   /* a dead peer is an error, not SIGPIPE */
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return PSC_EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r == 0 ? PSC_ETRUNC : PSC_EIO;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* ---- the child ------------------------------------------------------------- */

static uint64_t held_now(mchild_t *c)
{
    if (c->mallctl) {
        uint64_t epoch = 1;
        size_t v = 0, len = sizeof v;
        c->mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
        return c->mallctl("stats.mapped", &v, &len, NULL, 0) == 0 ? v : 0;
    }
    if (c->mi_info) {
        size_t a = 0, b = 0, d = 0, rss = 0, prss = 0, commit = 0, pcommit = 0, pf = 0;
        c->mi_info(&a, &b, &d, &rss, &prss, &commit, &pcommit, &pf);
        return commit;
    }
    struct mallinfo2 mi = mallinfo2();
    return (uint64_t)mi.arena + (uint64_t)mi.hblkhd;
}

static uint64_t held_rel(mchild_t *c)
{
    uint64_t h = held_now(c);
    return h > c->held0 ? h - c->held0 : 0;
}

static uint64_t rss_now(mchild_t *c)
{
    char buf[128];
    if (c->statm < 0) return 0;
    ssize_t n = pread(c->statm, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *e;
    (void)strtoull(buf, &e, 10);                 /* size */
    return (uint64_t)strtoull(e, NULL, 10) * c->page;
}

static void rss_sample(mchild_t *c)
{
    uint64_t r = rss_now(c);
    r = r > c->rss0 ? r - c->rss0 : 0;
    if (r > c->peak_rss) c->peak_rss = r;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One batch: the allocator calls back to back. */
static int child_batch(mchild_t *c, const rp_req_t *rq, size_t n, mres_t *out)
{
    for (size_t i = 0; i < n; i++)         /* room first: no realloc while timing */
        if (rq[i].op == RQ_ALLOC &&
            rp_grow((void **)&c->ptr, &c->cap, rq[i].slot, sizeof *c->ptr))
            return PSC_ENOMEM;
    const size_t page = c->page;
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        mres_t *o = &out[i];
        o->addr = 0;
        o->held = UINT64_MAX;
        if (r->flags & RQ_F_KV) continue;
        if (r->op == RQ_ALLOC) {
            size_t bytes = (size_t)r->bytes;
            unsigned char *q = malloc(bytes ? bytes : 1);
            if (!q) return PSC_ENOMEM;
            for (size_t off = 0; off < bytes; off += page) ((volatile unsigned char *)q)[off] = 1;
            if (bytes) ((volatile unsigned char *)q)[bytes - 1] = 1;
            c->ptr[r->slot] = q;
            o->addr = (uint64_t)(uintptr_t)q;
            o->usable = malloc_usable_size(q);
            c->ops++;
            if (++c->since_sample >= SAMPLE_EVERY || r->bytes >= SAMPLE_BIG) {
                c->since_sample = 0;
                o->held = held_rel(c);
            }
            if (++c->since_rss >= RSS_EVERY) {
                c->since_rss = 0;
                rss_sample(c);
            }
        } else if (r->op == RQ_FREE) {
            if (r->slot >= c->cap || !c->ptr[r->slot]) continue;
            o->addr = (uint64_t)(uintptr_t)c->ptr[r->slot];
            free(c->ptr[r->slot]);
            c->ptr[r->slot] = NULL;
            c->ops++;
            c->since_sample++;
            c->since_rss++;
        }
    }
    c->alloc_seconds += now_s() - t0;
    return 0;
}

static void child_main(int in, int out, size_t max_batch)
{
    mchild_t c;
    memset(&c, 0, sizeof c);
    c.mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    c.mi_info = c.mallctl ? NULL : (mi_info_fn)dlsym(RTLD_DEFAULT, "mi_process_info");
    long pg = sysconf(_SC_PAGESIZE);
    c.page = pg > 0 ? (size_t)pg : 4096;
    c.statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    rp_req_t *rq = malloc(max_batch * sizeof *rq);
    mres_t *res = malloc(max_batch * sizeof *res);
    if (!rq || !res) _exit(3);
    memset(rq, 0, max_batch * sizeof *rq);       /* committed before the baseline */
    memset(res, 0, max_batch * sizeof *res);
    c.held0 = held_now(&c);
    c.rss0 = rss_now(&c);
    for (;;) {
        uint64_t n;
        if (read_all(in, &n, sizeof n)) break;   /* the parent is gone: done */
        mreply_t rep;
        memset(&rep, 0, sizeof rep);
        if (n > max_batch || read_all(in, rq, n * sizeof *rq)) _exit(4);
        rep.err = child_batch(&c, rq, n, res);
        rep.n = rep.err ? 0 : n;
        rep.held_end = held_rel(&c);
        rss_sample(&c);
        rep.ops = c.ops;
        rep.peak_rss = c.peak_rss;
        rep.alloc_seconds = c.alloc_seconds;
        if (write_all(out, &rep, sizeof rep) || write_all(out, res, rep.n * sizeof *res)) _exit(5);
    }
    _exit(0);
}

/* The helper's entry: runs before main() in a process started by
 * malloc_init, and never returns. Does nothing otherwise (one getenv). */
__attribute__((constructor)) static void rp_malloc_helper_entry(void)
{
    const char *fd = getenv(RP_CHILD_FD_ENV), *nb = getenv(RP_CHILD_BATCH_ENV);
    if (!fd || !nb) return;
    int s = atoi(fd);
    size_t max_batch = (size_t)strtoull(nb, NULL, 10);
    unsetenv(RP_CHILD_FD_ENV);
    unsetenv(RP_CHILD_BATCH_ENV);
    if (s < 0 || max_batch == 0 || max_batch > ((size_t)1 << 24)) _exit(2);
    child_main(s, s, max_batch);
}

/* ---- the parent ------------------------------------------------------------ */

static int malloc_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    p->child = -1;
    p->to_child = p->from_child = -1;
    p->name = dlsym(RTLD_DEFAULT, "mallctl") ? "jemalloc"
            : dlsym(RTLD_DEFAULT, "mi_process_info") ? "mimalloc" : "glibc";
    size_t max_batch = (ctx->cfg->batch ? ctx->cfg->batch : 4096) + RP_STREAM_MAX_OUT;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return PSC_EIO;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return PSC_ENOMEM;
    }
    if (pid == 0) {
        char fd[24], nb[24];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        snprintf(nb, sizeof nb, "%zu", max_batch);
        fcntl(sv[1], F_SETFD, 0);                 /* survives the exec */
        setenv(RP_CHILD_FD_ENV, fd, 1);
        setenv(RP_CHILD_BATCH_ENV, nb, 1);
        char *const argv[] = { (char *)"poolscope-replay-malloc", NULL };
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(sv[1]);
    p->child = pid;
    p->to_child = p->from_child = sv[0];
    return 0;
}

static int malloc_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_malloc_t *p = (pol_malloc_t *)pp;
    uint64_t nn = n;
    int rc;
    if ((rc = rp_grow((void **)&p->res, &p->res_cap, n, sizeof *p->res))) return rc;
    if ((rc = write_all(p->to_child, &nn, sizeof nn)) ||
        (rc = write_all(p->to_child, rq, n * sizeof *rq)) ||
        (rc = read_all(p->from_child, &p->last, sizeof p->last)))
        return rc;
    if (p->last.err) return p->last.err;
    if (p->last.n != n || (rc = read_all(p->from_child, p->res, n * sizeof *p->res)))
        return rc ? rc : PSC_EIO;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        const mres_t *o = &p->res[i];
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

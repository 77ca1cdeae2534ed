/* main.c — poolscope-malloc-helper: the process in which the `malloc`
 * replay policy (replay/pol_malloc.c) makes its allocator calls.
 *
 * Why a process of its own: the allocator's figures (glibc mallinfo2()
 * arena + hblkhd, jemalloc stats.resident, mimalloc current commit) and RSS
 * are per process, and the replaying process allocates plenty of its own
 * (the trace reader alone holds tens of MiB of buffers; what it frees stays
 * in the heap as free space the policy's objects would quietly reuse). This
 * executable starts with a fresh heap and does nothing but the calls. It
 * inherits the environment, so an allocator preloaded into the replay
 * (LD_PRELOAD=libjemalloc.so) is the one measured here too, and the
 * malloc-jemalloc / malloc-mimalloc policies start it with that preload;
 * the hello message says which one it found.
 *
 *   poolscope-malloc-helper --fd N --batch MAX
 *
 * N is a connected socket (the parent's end of a socketpair); MAX the most
 * requests in one batch. The wire is replay/helper/helper.h. Each batch:
 * the calls back to back (room for the slot table first, so no realloc of
 * ours is timed), one byte written per page of each allocation and its last
 * byte (the pages are really committed, RSS is real), then the per-request
 * results.
 *
 * The figure is the allocator's own above what it held at start (our
 * buffers): glibc and jemalloc count in pages, so that is the bytes the
 * replayed calls made it hold; mimalloc counts whole regions, so its
 * figure is taken whole less the bytes of our own buffers.
 *
 * Sampling: reading the allocator's figure costs a microsecond or two, so
 * it is read every 256 operations, after every allocation of 64 KiB or
 * more, and at the end of each batch (a peak between two samples made only
 * of small objects is missed by at most 256 of them). RSS is read every
 * 16384 operations, after every allocation of 64 KiB or more (a big block
 * freed within the batch would otherwise never be seen) and at the end of
 * each batch.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "io.h"
#include "../rp_internal.h"
#include "helper.h"

#define SAMPLE_EVERY 256
#define SAMPLE_BIG   ((uint64_t)64 << 10)
#define RSS_EVERY    16384

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef void (*mi_info_fn)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *,
                           size_t *);

typedef struct helper {
    void **ptr;            /* live objects by slot */
    size_t cap;
    mallctl_fn mallctl;
    mi_info_fn mi_info;
    uint64_t held0, rss0, peak_rss, ops;
    uint64_t since_sample, since_rss;
    int statm;
    size_t page;
    double alloc_seconds;
} helper_t;


static uint64_t held_now(helper_t *h)
{
    if (h->mallctl) {
        uint64_t epoch = 1;
        size_t v = 0, len = sizeof v;
        h->mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
        /* resident: pages of active allocations, metadata and unused
         * dirty pages — what jemalloc holds in memory, as RSS counts it */
        return h->mallctl("stats.resident", &v, &len, NULL, 0) == 0 ? v : 0;
    }
    if (h->mi_info) {
        size_t a = 0, b = 0, d = 0, rss = 0, prss = 0, commit = 0, pcommit = 0, pf = 0;
        h->mi_info(&a, &b, &d, &rss, &prss, &commit, &pcommit, &pf);
        return commit;
    }
    struct mallinfo2 mi = mallinfo2();
    return (uint64_t)mi.arena + (uint64_t)mi.hblkhd;
}

static uint64_t held_rel(helper_t *h)
{
    uint64_t v = held_now(h);
    return v > h->held0 ? v - h->held0 : 0;
}

static uint64_t rss_now(helper_t *h)
{
    char buf[128];
    if (h->statm < 0) return 0;
    ssize_t n = pread(h->statm, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *e;
    (void)strtoull(buf, &e, 10);                 /* size */
    return (uint64_t)strtoull(e, NULL, 10) * h->page;
}

static void rss_sample(helper_t *h)
{
    uint64_t r = rss_now(h);
    r = r > h->rss0 ? r - h->rss0 : 0;
    if (r > h->peak_rss) h->peak_rss = r;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The slot table holds index `need` (new entries zeroed). The helper links
 * no library of the tree, so it has its own. */
static int grow_slots(helper_t *h, size_t need)
{
    if (need < h->cap) return 0;
    size_t n = h->cap ? h->cap : 256;
    while (n <= need) n *= 2;
    void **p = realloc(h->ptr, n * sizeof *p);
    if (!p) return PSC_ENOMEM;
    memset(p + h->cap, 0, (n - h->cap) * sizeof *p);
    h->ptr = p;
    h->cap = n;
    return 0;
}

/* One batch: the allocator calls back to back. */
static int batch(helper_t *h, const rp_req_t *rq, size_t n, rp_mres_t *out)
{
    for (size_t i = 0; i < n; i++)         /* room first: no realloc while timing */
        if (rq[i].op == RQ_ALLOC && grow_slots(h, rq[i].slot)) return PSC_ENOMEM;
    const size_t page = h->page;
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        rp_mres_t *o = &out[i];
        o->addr = 0;
        o->held = UINT64_MAX;
        if (r->flags & RQ_F_KV) continue;
        if (r->op == RQ_ALLOC) {
            size_t bytes = (size_t)r->bytes;
            unsigned char *q = malloc(bytes ? bytes : 1);
            if (!q) return PSC_ENOMEM;
            for (size_t off = 0; off < bytes; off += page) ((volatile unsigned char *)q)[off] = 1;
            if (bytes) ((volatile unsigned char *)q)[bytes - 1] = 1;
            h->ptr[r->slot] = q;
            o->addr = (uint64_t)(uintptr_t)q;
            o->usable = malloc_usable_size(q);
            h->ops++;
            if (++h->since_sample >= SAMPLE_EVERY || r->bytes >= SAMPLE_BIG) {
                h->since_sample = 0;
                o->held = held_rel(h);
            }
            if (++h->since_rss >= RSS_EVERY || r->bytes >= SAMPLE_BIG) {
                h->since_rss = 0;
                rss_sample(h);
            }
        } else if (r->op == RQ_FREE) {
            if (r->slot >= h->cap || !h->ptr[r->slot]) continue;
            o->addr = (uint64_t)(uintptr_t)h->ptr[r->slot];
            free(h->ptr[r->slot]);
            h->ptr[r->slot] = NULL;
            h->ops++;
            h->since_sample++;
            h->since_rss++;
        }
    }
    h->alloc_seconds += now_s() - t0;
    return 0;
}

/* Serve batches until the parent closes the socket. Returns the exit code. */
static int serve(int fd, size_t max_batch)
{
    helper_t h;
    memset(&h, 0, sizeof h);
    h.mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    h.mi_info = h.mallctl ? NULL : (mi_info_fn)dlsym(RTLD_DEFAULT, "mi_process_info");
    long pg = sysconf(_SC_PAGESIZE);
    h.page = pg > 0 ? (size_t)pg : 4096;
    h.statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    rp_req_t *rq = malloc(max_batch * sizeof *rq);
    rp_mres_t *res = malloc(max_batch * sizeof *res);
    if (!rq || !res) return 3;
    memset(rq, 0, max_batch * sizeof *rq);       /* committed before the baseline */
    memset(res, 0, max_batch * sizeof *res);
    /* The baseline. mimalloc commits its memory a whole region at a time
     * (32 MiB on Linux), and the first region is committed by our own
     * buffers above, so a baseline taken now would hide the objects that
     * region then holds: its figure is taken whole, less our buffers. */
    h.held0 = h.mi_info ? (uint64_t)max_batch * (sizeof *rq + sizeof *res) : held_now(&h);
    h.rss0 = rss_now(&h);
    rp_hello_t hello = {
        .magic = RP_HELPER_MAGIC, .proto = RP_HELPER_PROTO,
        .req_size = sizeof(rp_req_t), .res_size = sizeof(rp_mres_t), .reply_size = sizeof(rp_mreply_t),
        .allocator = h.mallctl ? RP_ALLOC_JEMALLOC : h.mi_info ? RP_ALLOC_MIMALLOC : RP_ALLOC_GLIBC,
    };
    if (psc_send_all(fd, &hello, sizeof hello)) return 5;
    for (;;) {
        uint64_t n;
        if (psc_read_all(fd, &n, sizeof n)) break;   /* the parent is gone: done */
        rp_mreply_t rep;
        memset(&rep, 0, sizeof rep);
        if (n > max_batch || psc_read_all(fd, rq, n * sizeof *rq)) return 4;
        rep.err = batch(&h, rq, n, res);
        rep.n = rep.err ? 0 : n;
        rep.held_end = held_rel(&h);
        rss_sample(&h);
        rep.ops = h.ops;
        rep.peak_rss = h.peak_rss;
        rep.alloc_seconds = h.alloc_seconds;
        if (psc_send_all(fd, &rep, sizeof rep) || psc_send_all(fd, res, rep.n * sizeof *res)) return 5;
    }
    return 0;
}

static int parse_num(const char *s, unsigned long long max, unsigned long long *v)
{
    char *e;
    errno = 0;
    unsigned long long x = strtoull(s, &e, 10);
    if (errno || !*s || *e || x > max) return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long fd = 0, max_batch = 0;
    int have_fd = 0, have_batch = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fd") && !parse_num(argv[i + 1], 1u << 20, &fd)) have_fd = 1;
        else if (!strcmp(argv[i], "--batch") && !parse_num(argv[i + 1], RP_HELPER_MAX_BATCH, &max_batch))
            have_batch = 1;
        else have_fd = have_batch = -1;
    }
    if ((argc - 1) % 2 || have_fd != 1 || have_batch != 1 || max_batch == 0) {
        fprintf(stderr, "usage: %s --fd N --batch MAX\n"
                "The malloc replay policy's helper: `poolscope replay --policy malloc` starts it\n"
                "with one end of a socket; it is not meant to be run by hand.\n", RP_HELPER_NAME);
        return 2;
    }
    return serve((int)fd, (size_t)max_batch);
}

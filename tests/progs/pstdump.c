/* pstdump.c — a small reader-based dump of a trace for the integration
 * tests: key=value lines, one per count.
 *
 *   pstdump [--scope NAME] [--size N] FILE
 *
 * Printed keys:
 *   header:  pid ppid parent_pid exec_gen exe stacks depth
 *   status:  events lost streams truncated corrupt end_seen complete
 *            (= end_seen, not truncated, not corrupt) reader_complete
 *   per type: every heap call name (malloc ... sbrk, always, 0 if none),
 *            mmap_anon, mmap_file, alloc_calls (the malloc family's
 *            allocating calls together), and every other event type seen by
 *            its format.c name (mark_point, pool_acquire, ...)
 *   stacks:  stack_events (events carrying a stack), max_stack_depth
 *   markers: mark.<name> (points and scope begins), thread_name.<name>
 *   pools:   pool.<id>.<stat>, rebuilt from the pool events alone in the
 *            pool's order: buffer pools acquires hits misses backing_allocs
 *            backing_frees reclaims_cached destroyed_over_cap
 *            peak_outstanding_bytes peak_cached_bytes; block pools
 *            n_allocations n_frees n_reused n_exhausted n_grown n_retired
 *            peak_blocks_in_use blocks_in_use; both seq_disorder (events
 *            whose pool_seq did not increase: must be 0)
 *
 * --size N: also sized_malloc, the malloc calls of exactly N bytes (a test
 * program's marked allocations, compared with its own count).
 * --scope NAME: the per-type counts only include events of a stream
 * between a MARK_BEGIN and the matching MARK_END named NAME in that same
 * stream (the markers themselves excluded).
 * Exit 0, or 2 if the file cannot be opened.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "poolscope/format.h"
#include "poolscope/error.h"
#include "poolscope/reader.h"

#define MAX_NAMES 512

typedef struct named { char *name; uint64_t n; } named_t;
typedef struct names { named_t v[MAX_NAMES]; int n; } names_t;

static void bump(names_t *t, const char *name)
{
    if (!name) name = "?";
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->v[i].name, name)) { t->v[i].n++; return; }
    if (t->n < MAX_NAMES) { t->v[t->n].name = strdup(name); t->v[t->n++].n = 1; }
}

typedef struct pool {
    uint64_t id;
    int kvb;                      /* 0 buffer pool, 1 block pool */
    uint64_t last_seq;
    int any_seq;
    uint64_t seq_disorder;
    /* buffer pool */
    uint64_t acquires, hits, misses, backing_allocs, backing_frees, reclaims_cached, destroyed;
    int64_t outstanding, peak_outstanding, cached, peak_cached;
    /* block pool */
    int64_t n_alloc, n_free, n_reused, n_exhausted, n_grown, n_retired, in_use, peak_in_use;
    uint8_t *ever;                /* ever[id]: block id handed out before */
    size_t ever_cap;
} pool_t;

#define MAX_POOLS 256
static pool_t pools[MAX_POOLS];
static int n_pools;

static pool_t *pool_get(uint64_t id, int kvb)
{
    for (int i = 0; i < n_pools; i++)
        if (pools[i].id == id) return &pools[i];
    if (n_pools == MAX_POOLS) return NULL;
    pool_t *p = &pools[n_pools++];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->kvb = kvb;
    return p;
}

static void pool_seq(pool_t *p, uint64_t seq)
{
    if (p->any_seq && seq <= p->last_seq) p->seq_disorder++;
    p->last_seq = seq;
    p->any_seq = 1;
}

static void pool_event(const pst_event_t *ev)
{
    unsigned t = ev->type;
    int kvb = t >= PST_EV_KVB_CREATE && t <= PST_EV_KVB_DESTROY;
    pool_t *p = pool_get(ev->f[0], kvb);
    if (!p) return;
    if (t != PST_EV_POOL_CREATE && t != PST_EV_POOL_DESTROY && t != PST_EV_KVB_CREATE &&
        t != PST_EV_KVB_DESTROY)
        pool_seq(p, ev->f[1]);
    switch (t) {
    case PST_EV_POOL_ACQUIRE:
        p->acquires++;
        if (ev->f[8]) { p->hits++; p->cached -= (int64_t)ev->f[7]; }
        else p->misses++;
        p->outstanding += (int64_t)ev->f[7];
        if (p->outstanding > p->peak_outstanding) p->peak_outstanding = p->outstanding;
        break;
    case PST_EV_POOL_RECLAIM:
        p->outstanding -= (int64_t)ev->f[4];
        if (ev->f[5]) {
            p->reclaims_cached++;
            p->cached += (int64_t)ev->f[4];
            if (p->cached > p->peak_cached) p->peak_cached = p->cached;
        } else {
            p->destroyed++;
        }
        break;
    case PST_EV_POOL_BACKING_ALLOC: p->backing_allocs++; break;
    case PST_EV_POOL_BACKING_FREE: p->backing_frees++; break;
    case PST_EV_KVB_ALLOC:
        for (uint32_t i = 0; i < ev->n_ids; i++) {
            uint32_t b = ev->ids[i];
            if (b >= p->ever_cap) {
                size_t cap = (size_t)b * 2 + 64;
                uint8_t *n = realloc(p->ever, cap);
                if (!n) { perror("pstdump"); exit(2); }
                memset(n + p->ever_cap, 0, cap - p->ever_cap);
                p->ever = n;
                p->ever_cap = cap;
            }
            if (p->ever[b]) p->n_reused++;
            p->ever[b] = 1;
        }
        p->n_alloc += ev->n_ids;
        p->in_use += ev->n_ids;
        if (p->in_use > p->peak_in_use) p->peak_in_use = p->in_use;
        break;
    case PST_EV_KVB_FREE:
        p->n_free += ev->n_ids;
        p->in_use -= ev->n_ids;
        break;
    case PST_EV_KVB_GROW: p->n_grown += (int64_t)ev->f[3]; break;
    case PST_EV_KVB_SHRINK: p->n_retired += ev->n_ids; break;
    case PST_EV_KVB_EXHAUSTED: p->n_exhausted++; break;
    default: break;
    }
}

static int is_pool_type(unsigned t)
{
    return (t >= PST_EV_POOL_CREATE && t <= PST_EV_POOL_DESTROY) ||
           (t >= PST_EV_KVB_CREATE && t <= PST_EV_KVB_DESTROY);
}

int main(int argc, char **argv)
{
    const char *scope = NULL, *path = NULL;
    long long size = -1;
    uint64_t sized = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scope") && i + 1 < argc) scope = argv[++i];
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = atoll(argv[++i]);
        else if (!path) path = argv[i];
        else { fprintf(stderr, "usage: pstdump [--scope NAME] [--size N] FILE\n"); return 2; }
    }
    if (!path) { fprintf(stderr, "usage: pstdump [--scope NAME] [--size N] FILE\n"); return 2; }

    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) { fprintf(stderr, "pstdump: %s: %s\n", path, psc_strerror(err)); return 2; }

    uint64_t by_type[PST_EV_MAX] = { 0 }, mmap_anon = 0, mmap_file = 0;
    uint64_t stack_events = 0, max_depth = 0;
    names_t marks = { .n = 0 }, tnames = { .n = 0 };
    int *inside = NULL;           /* per stream: open scopes named `scope` */
    size_t inside_cap = 0;
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        unsigned t = ev.type;
        if (t >= PST_EV_MAX) continue;
        if (ev.stack) {
            stack_events++;
            uint32_t d = 0;
            if (pst_stack(r, ev.stack, &d) && d > max_depth) max_depth = d;
        }
        if (t == PST_EV_MARK_POINT || t == PST_EV_MARK_BEGIN) bump(&marks, ev.str);
        if (t == PST_EV_THREAD_NAME) bump(&tnames, ev.str);
        if (is_pool_type(t)) pool_event(&ev);

        int counted = 1;
        if (scope) {
            if (ev.stream >= inside_cap) {
                size_t cap = ev.stream * 2 + 16;
                int *n = realloc(inside, cap * sizeof *n);
                if (!n) { perror("pstdump"); return 2; }
                memset(n + inside_cap, 0, (cap - inside_cap) * sizeof *n);
                inside = n;
                inside_cap = cap;
            }
            int is_scope_mark = (t == PST_EV_MARK_BEGIN || t == PST_EV_MARK_END) && ev.str &&
                                !strcmp(ev.str, scope);
            if (is_scope_mark && t == PST_EV_MARK_BEGIN) inside[ev.stream]++;
            if (is_scope_mark && t == PST_EV_MARK_END && inside[ev.stream] > 0) inside[ev.stream]--;
            counted = !is_scope_mark && inside[ev.stream] > 0;
        }
        if (!counted) continue;
        by_type[t]++;
        if (t == PST_EV_MALLOC && size >= 0 && ev.f[1] == (uint64_t)size) sized++;
        if (t == PST_EV_MMAP) {
            if (ev.f[3] & MAP_ANONYMOUS) mmap_anon++;
            else mmap_file++;
        }
    }
    if (rc < 0) fprintf(stderr, "pstdump: %s: %s\n", path, psc_strerror(rc));

    const pst_header_t *h = pst_header(r);
    const pst_status_t *st = pst_status(r);
    printf("pid=%llu\nppid=%llu\nparent_pid=%llu\nexec_gen=%llu\nexe=%s\nstacks=%u\ndepth=%u\n",
           (unsigned long long)h->pid, (unsigned long long)h->ppid,
           (unsigned long long)h->parent_pid, (unsigned long long)h->exec_gen,
           h->exe ? h->exe : "", h->stacks, h->depth);
    /* complete: computed here from the parts (end_seen, not truncated, not
     * corrupt); reader_complete is the reader's own flag, printed apart. */
    printf("events=%llu\nlost=%llu\nstreams=%llu\ntruncated=%d\ncorrupt=%d\nend_seen=%d\n"
           "complete=%d\nreader_complete=%d\n",
           (unsigned long long)st->events, (unsigned long long)st->lost,
           (unsigned long long)st->streams, st->truncated, st->corrupt, st->end_seen,
           st->end_seen && !st->truncated && !st->corrupt, st->complete);

    static const unsigned heap[] = {
        PST_EV_MALLOC, PST_EV_CALLOC, PST_EV_REALLOC, PST_EV_REALLOCARRAY, PST_EV_FREE,
        PST_EV_POSIX_MEMALIGN, PST_EV_ALIGNED_ALLOC, PST_EV_MEMALIGN, PST_EV_VALLOC,
        PST_EV_PVALLOC, PST_EV_MMAP, PST_EV_MUNMAP, PST_EV_MREMAP, PST_EV_MADVISE,
        PST_EV_BRK, PST_EV_SBRK,
    };
    uint64_t alloc_calls = 0;
    for (size_t i = 0; i < sizeof heap / sizeof heap[0]; i++) {
        printf("%s=%llu\n", pst_event_name(heap[i]), (unsigned long long)by_type[heap[i]]);
        if (heap[i] != PST_EV_FREE && heap[i] <= PST_EV_PVALLOC) alloc_calls += by_type[heap[i]];
    }
    if (size >= 0) printf("sized_malloc=%llu\n", (unsigned long long)sized);
    printf("mmap_anon=%llu\nmmap_file=%llu\nalloc_calls=%llu\n", (unsigned long long)mmap_anon,
           (unsigned long long)mmap_file, (unsigned long long)alloc_calls);
    for (unsigned t = PST_EV_SBRK + 1; t < PST_EV_MAX; t++)
        if (by_type[t] && pst_event_name(t))
            printf("%s=%llu\n", pst_event_name(t), (unsigned long long)by_type[t]);
    printf("stack_events=%llu\nmax_stack_depth=%llu\n", (unsigned long long)stack_events,
           (unsigned long long)max_depth);
    for (int i = 0; i < marks.n; i++) printf("mark.%s=%llu\n", marks.v[i].name, (unsigned long long)marks.v[i].n);
    for (int i = 0; i < tnames.n; i++)
        printf("thread_name.%s=%llu\n", tnames.v[i].name, (unsigned long long)tnames.v[i].n);
    for (int i = 0; i < n_pools; i++) {
        pool_t *p = &pools[i];
        unsigned long long id = (unsigned long long)p->id;
        if (!p->kvb) {
            printf("pool.%llu.acquires=%llu\npool.%llu.hits=%llu\npool.%llu.misses=%llu\n", id,
                   (unsigned long long)p->acquires, id, (unsigned long long)p->hits, id,
                   (unsigned long long)p->misses);
            printf("pool.%llu.backing_allocs=%llu\npool.%llu.backing_frees=%llu\n", id,
                   (unsigned long long)p->backing_allocs, id, (unsigned long long)p->backing_frees);
            printf("pool.%llu.reclaims_cached=%llu\npool.%llu.destroyed_over_cap=%llu\n", id,
                   (unsigned long long)p->reclaims_cached, id, (unsigned long long)p->destroyed);
            printf("pool.%llu.peak_outstanding_bytes=%lld\npool.%llu.peak_cached_bytes=%lld\n", id,
                   (long long)p->peak_outstanding, id, (long long)p->peak_cached);
        } else {
            printf("pool.%llu.n_allocations=%lld\npool.%llu.n_frees=%lld\npool.%llu.n_reused=%lld\n", id,
                   (long long)p->n_alloc, id, (long long)p->n_free, id, (long long)p->n_reused);
            printf("pool.%llu.n_exhausted=%lld\npool.%llu.n_grown=%lld\npool.%llu.n_retired=%lld\n", id,
                   (long long)p->n_exhausted, id, (long long)p->n_grown, id, (long long)p->n_retired);
            printf("pool.%llu.peak_blocks_in_use=%lld\npool.%llu.blocks_in_use=%lld\n", id,
                   (long long)p->peak_in_use, id, (long long)p->in_use);
        }
        printf("pool.%llu.seq_disorder=%llu\n", id, (unsigned long long)p->seq_disorder);
    }
    pst_close(r);
    return rc < 0 ? 2 : 0;
}

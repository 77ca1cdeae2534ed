/* scan.c — one pass over a trace into the metrics library (see scan.h).
 *
 * Per event: a switch on the type, O(1) table work, and a timeline update
 * for the events that move a gauge. Tables here are bounded by live
 * mappings, pools and KV block ids; the accumulators bound the rest.
 */
#include "scan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checked.h"
#include "hashmap.h"
#include "poolscope/error.h"

#define MAP_ANON_FLAG 0x20       /* Linux MAP_ANONYMOUS */

const char *const az_func_names[AZ_F_COUNT] = {
    "malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign",
    "aligned_alloc", "memalign", "valloc", "pvalloc", "mmap", "munmap", "mremap",
};

/* mapping table (the common map, grown beyond 1/2 full): start -> len, anon */
typedef struct mapent { uint64_t len; uint8_t anon; } mapent_t;

typedef struct kvpool {
    uint64_t id, block_size;
    uint32_t *n_used;            /* per block id */
    uint8_t  *held;
    size_t    cap;
    uint64_t  tokens, blocks;
    uint64_t  carry;             /* tokens of a split ALLOC not yet given to a block */
} kvpool_t;

typedef struct priv {
    psc_map_t maps;              /* start -> mapent_t */
    kvpool_t *kv;
    size_t n_kv;
    uint64_t phase_open;         /* open scopes of opts.phase */
    int phase_point;             /* the phase marker came as a point: on from there */
    int phase_seen;              /* a scope or point of opts.phase was read */
    uint32_t phase_id;           /* string id of opts.phase, once seen */
    int counting;
    az_scan_opts_t opts;
    az_tl_bucket_t last;         /* gauges after the latest timeline update */
} priv_t;

static inline mapent_t *map_find(priv_t *p, uint64_t a) { return psc_map_get_sz(&p->maps, a, sizeof(mapent_t)); }

static int map_put(priv_t *p, uint64_t a, uint64_t len, int anon)
{
    mapent_t *e = psc_map_put_sz(&p->maps, a, NULL, sizeof(mapent_t));
    if (!e) return PSC_ENOMEM;
    e->len = len;
    e->anon = (uint8_t)anon;
    return 0;
}

/* ---- timeline ------------------------------------------------------------------ */

static void tl_merge(az_tl_bucket_t *a, const az_tl_bucket_t *b)
{
#define MX(f) if (b->f > a->f) a->f = b->f
    MX(heap); MX(mmap_anon); MX(mmap_file); MX(rss); MX(pool_out); MX(pool_cached);
    if (b->kv_blocks >= a->kv_blocks && b->set) {
        a->kv_blocks = b->kv_blocks; a->kv_tokens = b->kv_tokens; a->kv_capacity = b->kv_capacity;
    }
#undef MX
    a->set |= b->set;
}

static void tl_update(az_scan_t *s, uint64_t t)
{
    if (!s->tl_n) return;
    if (t < s->tl_t0) t = s->tl_t0;
    size_t i;
    while ((i = (size_t)((t - s->tl_t0) >> s->tl_shift)) >= s->tl_n) {
        /* halve: merge pairs, double the width */
        for (size_t k = 0; k < s->tl_n / 2; k++) {
            az_tl_bucket_t b = s->tl[2 * k];
            tl_merge(&b, &s->tl[2 * k + 1]);
            s->tl[k] = b;
        }
        memset(&s->tl[s->tl_n / 2], 0, (s->tl_n - s->tl_n / 2) * sizeof *s->tl);
        s->tl_shift++;
        s->tl_used = (s->tl_used + 1) / 2;
    }
    const az_state_t *hs = az_state(s->heap);
    az_tl_bucket_t now = {
        .heap = hs->live_bytes, .mmap_anon = s->mmap_anon, .mmap_file = s->mmap_file,
        .rss = s->rss, .pool_out = s->pool_out, .pool_cached = s->pool_cached,
        .kv_blocks = hs->kv_blocks, .kv_tokens = hs->kv_tokens,
        .kv_capacity = hs->kv_capacity, .set = 1 };
    priv_t *p = s->priv;
    if (i >= s->tl_used) {
        /* buckets with no event since the last update hold the state of then */
        for (size_t k = s->tl_used; k <= i; k++)
            if (p->last.set) tl_merge(&s->tl[k], &p->last);
        s->tl_used = i + 1;
    }
    tl_merge(&s->tl[i], &now);
    p->last = now;
}

/* After a heap event only the heap gauge moved: within the bucket of the
 * previous update, merging the other gauges again changes nothing, so only
 * the heap maximum is kept up (the common case: buckets span many events). */
static inline void tl_heap(az_scan_t *s, uint64_t t)
{
    priv_t *p = s->priv;
    if (t >= s->tl_t0 && s->tl_used && p->last.set &&
        (t - s->tl_t0) >> s->tl_shift == s->tl_used - 1) {
        uint64_t h = az_state(s->heap)->live_bytes;
        az_tl_bucket_t *b = &s->tl[s->tl_used - 1];
        p->last.heap = h;
        if (h > b->heap) b->heap = h;
        return;
    }
    tl_update(s, t);
}

/* ---- KV ---------------------------------------------------------------------- */

static kvpool_t *kv_get(az_scan_t *s, uint64_t id)
{
    priv_t *p = s->priv;
    for (size_t i = 0; i < p->n_kv; i++) if (p->kv[i].id == id) return &p->kv[i];
    kvpool_t *k = realloc(p->kv, (p->n_kv + 1) * sizeof *k);
    if (!k) return NULL;
    p->kv = k;
    k = &p->kv[p->n_kv++];
    memset(k, 0, sizeof *k);
    k->id = id;
    k->block_size = 16;
    return k;
}

static int kv_reserve(kvpool_t *k, uint64_t id)
{
    if (id < k->cap) return 0;
    if (id > (1u << 26)) return PSC_ERANGE;           /* absurd block id: ignore */
    size_t n = k->cap ? k->cap : 256;
    while (n <= id) n *= 2;
    uint32_t *u = realloc(k->n_used, n * sizeof *u);
    if (!u) return PSC_ENOMEM;
    k->n_used = u;
    uint8_t *h = realloc(k->held, n);
    if (!h) return PSC_ENOMEM;
    k->held = h;
    memset(u + k->cap, 0, (n - k->cap) * sizeof *u);
    memset(h + k->cap, 0, n - k->cap);
    k->cap = n;
    return 0;
}

static void kv_publish(az_scan_t *s, uint64_t t)
{
    priv_t *p = s->priv;
    uint64_t tokens = 0, blocks = 0, capacity = 0;
    for (size_t i = 0; i < p->n_kv; i++) {
        tokens += p->kv[i].tokens;
        blocks += p->kv[i].blocks;
        capacity += p->kv[i].blocks * p->kv[i].block_size;
    }
    /* az_kv takes a block size: with pools of different sizes pass the mean */
    uint64_t bs = blocks ? capacity / blocks : (p->n_kv ? p->kv[0].block_size : 0);
    az_kv(s->heap, t, tokens, blocks, bs);
}

static az_pool_info_t *pool_get(az_scan_t *s, uint64_t id, int kv)
{
    for (size_t i = 0; i < s->n_pools; i++)
        if (s->pools[i].id == id && s->pools[i].kv == kv) return &s->pools[i];
    az_pool_info_t *a = realloc(s->pools, (s->n_pools + 1) * sizeof *a);
    if (!a) return NULL;
    s->pools = a;
    a = &s->pools[s->n_pools++];
    memset(a, 0, sizeof *a);
    a->id = id;
    a->kv = kv;
    snprintf(a->name, sizeof a->name, "%s%llu", kv ? "kv" : "pool", (unsigned long long)id);
    return a;
}

/* ---- events ------------------------------------------------------------------ */

static void heap_alloc(az_scan_t *s, const pst_event_t *ev, uint64_t addr, uint64_t req)
{
    if (!addr) { s->failed_allocs++; return; }
    az_alloc(s->heap, ev->ts, addr, req, az_glibc_usable(req), req, ev->stack);
}

static void mmap_peaks(az_scan_t *s)
{
    priv_t *p = s->priv;
    if (!p->counting) return;                        /* peaks are of the window */
    if (s->mmap_anon > s->peak_mmap_anon) s->peak_mmap_anon = s->mmap_anon;
    if (s->mmap_file > s->peak_mmap_file) s->peak_mmap_file = s->mmap_file;
    if (s->mmap_anon + s->mmap_file > s->peak_mmap_total) s->peak_mmap_total = s->mmap_anon + s->mmap_file;
}

/* The window (--phase, --from/--to) opens or closes at time t. On opening,
 * what is held then counts toward the window's peaks: mappings, each pool's
 * buffers, the latest RSS sample (RSS is only known at samples). */
static void set_counting(az_scan_t *s, int on, uint64_t t)
{
    priv_t *p = s->priv;
    if (on == p->counting) return;
    p->counting = on;
    az_set_counting_at(s->heap, t, on);
    az_set_counting_at(s->pool, t, on);
    if (!on) return;
    mmap_peaks(s);
    if (s->rss_samples && s->rss > s->peak_rss) { s->peak_rss = s->rss; s->peak_rss_t = t; }
    for (size_t i = 0; i < s->n_pools; i++) {
        az_pool_info_t *pi = &s->pools[i];
        if (pi->outstanding > pi->peak_out) pi->peak_out = pi->outstanding;
        if (pi->cached > pi->peak_cached) pi->peak_cached = pi->cached;
    }
}

static void unmap(az_scan_t *s, uint64_t addr, uint64_t len)
{
    priv_t *p = s->priv;
    mapent_t *e = map_find(p, addr);
    if (!e) return;                                  /* not a mapping we saw start here */
    uint64_t cut = len < e->len ? len : e->len;
    uint64_t *g = e->anon ? &s->mmap_anon : &s->mmap_file;
    *g -= cut < *g ? cut : *g;
    if (cut < e->len) {
        uint64_t rest = e->len - cut;
        int anon = e->anon;
        psc_map_erase_sz(&p->maps, e, sizeof(mapent_t));
        map_put(p, addr + cut, rest, anon);
    } else {
        psc_map_erase_sz(&p->maps, e, sizeof(mapent_t));
    }
}

static void on_event(az_scan_t *s, const pst_event_t *ev)
{
    priv_t *p = s->priv;
    const uint64_t *f = ev->f;
    uint64_t t = ev->ts;
    int gauge = 0;               /* 1: a gauge moved; 2: only the heap gauge */

    if (ev->type < PST_EV_MAX) s->by_type[ev->type]++;
    if (s->events == 0) s->t_first = t;
    s->events++;
    if (t > s->t_last) s->t_last = t;

    /* the window and the phase decide whether this event is counted */
    int on = 1;
    if (p->opts.window) on = t >= p->opts.from && t <= p->opts.to;
    if (p->opts.phase && (ev->type == PST_EV_MARK_BEGIN || ev->type == PST_EV_MARK_POINT) &&
        ev->str && !strcmp(ev->str, p->opts.phase)) {
        if (ev->type == PST_EV_MARK_BEGIN) p->phase_open++; else p->phase_point = 1;
        p->phase_seen = 1;
    }
    if (p->opts.phase) on = on && (p->phase_open > 0 || p->phase_point);
    set_counting(s, on, t);
    if (on) s->events_counted++;

    /* one hooked call: the JSON `calls` count (when counted) and the phases */
#define CALL(k, bytes) do {                                                        \
        if (on) s->calls[k]++;                                                     \
        az_calls(s->heap, 1, (bytes));                                             \
        if ((k) != AZ_F_FREE && (k) < AZ_F_MMAP) az_alloc_calls(s->heap, 1);       \
    } while (0)
    switch (ev->type) {
    case PST_EV_MALLOC:
        CALL(AZ_F_MALLOC, f[1]);
        heap_alloc(s, ev, f[0], f[1]); gauge = 2; break;
    case PST_EV_VALLOC:
        CALL(AZ_F_VALLOC, f[1]);
        heap_alloc(s, ev, f[0], f[1]); gauge = 2; break;
    case PST_EV_PVALLOC:
        CALL(AZ_F_PVALLOC, f[1]);
        heap_alloc(s, ev, f[0], f[1]); gauge = 2; break;
    case PST_EV_CALLOC: {
        uint64_t size;
        if (psc_mul_u64(f[1], f[2], &size)) {     /* nmemb * size overflows: calloc fails */
            CALL(AZ_F_CALLOC, 0);
            s->failed_allocs++;
        } else {
            CALL(AZ_F_CALLOC, size);
            heap_alloc(s, ev, f[0], size);
        }
        gauge = 2;
        break;
    }
    case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN: {
        int k = ev->type == PST_EV_POSIX_MEMALIGN ? AZ_F_POSIX_MEMALIGN :
                ev->type == PST_EV_ALIGNED_ALLOC ? AZ_F_ALIGNED_ALLOC : AZ_F_MEMALIGN;
        CALL(k, f[2]);
        heap_alloc(s, ev, f[0], f[2]); gauge = 2; break;
    }
    case PST_EV_REALLOC: case PST_EV_REALLOCARRAY: {
        int arr = ev->type == PST_EV_REALLOCARRAY;
        uint64_t old = f[0], ret = f[1], size = f[2];
        /* nmemb * size overflows: reallocarray fails, the old block stays */
        int ovf = arr && psc_mul_u64(f[2], f[3], &size);
        CALL(arr ? AZ_F_REALLOCARRAY : AZ_F_REALLOC, ovf ? 0 : size);
        if (ovf) s->failed_allocs++;
        else if (old == 0) heap_alloc(s, ev, ret, size);
        else if (ret == 0 && size == 0) az_free(s->heap, t, old);
        else if (ret == 0) s->failed_allocs++;       /* failed: the old block stays */
        else { az_free(s->heap, t, old); heap_alloc(s, ev, ret, size); }
        gauge = 2;
        break;
    }
    case PST_EV_FREE:
        CALL(AZ_F_FREE, 0);
        az_free(s->heap, t, f[0]); gauge = 2; break;
    case PST_EV_MMAP:
        CALL(AZ_F_MMAP, 0);
        if (f[0] && f[0] != UINT64_MAX) {
            int anon = (f[3] & MAP_ANON_FLAG) != 0;
            mapent_t *e = map_find(p, f[0]);
            if (e) unmap(s, f[0], e->len);           /* MAP_FIXED over our own mapping */
            if (map_put(p, f[0], f[1], anon) == 0) {
                if (anon) s->mmap_anon += f[1]; else s->mmap_file += f[1];
                mmap_peaks(s);
            }
        }
        gauge = 1;
        break;
    case PST_EV_MUNMAP:
        CALL(AZ_F_MUNMAP, 0);
        unmap(s, f[0], f[1]); gauge = 1; break;
    case PST_EV_MREMAP: {
        CALL(AZ_F_MREMAP, 0);
        if (f[2] && f[2] != UINT64_MAX) {
            mapent_t *e = map_find(p, f[0]);
            int anon = e ? e->anon : 1;
            if (e) unmap(s, f[0], e->len);
            if (map_put(p, f[2], f[3], anon) == 0) {
                if (anon) s->mmap_anon += f[3]; else s->mmap_file += f[3];
                mmap_peaks(s);
            }
        }
        gauge = 1;
        break;
    }
    case PST_EV_RSS:
        s->rss = f[0];
        s->rss_samples++;
        if (p->counting && f[0] > s->peak_rss) { s->peak_rss = f[0]; s->peak_rss_t = t; }
        gauge = 1;
        break;
    case PST_EV_POOL_CREATE: {
        az_pool_info_t *pi = pool_get(s, f[0], 0);
        if (pi) {
            pi->cap = f[3];
            if (ev->str) snprintf(pi->name, sizeof pi->name, "%s", ev->str);
        }
        break;
    }
    case PST_EV_POOL_ACQUIRE: {
        az_pool_info_t *pi = pool_get(s, f[0], 0);
        uint64_t gb = f[7], hit = f[8];
        az_acquire(s->pool, (int)hit);
        az_alloc(s->pool, t, f[0] << 40 ^ f[3], f[6], gb, gb, ev->stack);
        s->pool_out += gb;
        if (hit) s->pool_cached -= gb < s->pool_cached ? gb : s->pool_cached;
        if (pi) {
            if (p->counting) { pi->acquires++; pi->hits += hit != 0; }
            pi->outstanding += gb;
            if (hit) pi->cached -= gb < pi->cached ? gb : pi->cached;
            if (p->counting && pi->outstanding > pi->peak_out) pi->peak_out = pi->outstanding;
        }
        az_reserved(s->pool, t, s->pool_out, s->pool_cached);
        gauge = 1;
        break;
    }
    case PST_EV_POOL_RECLAIM: {
        az_pool_info_t *pi = pool_get(s, f[0], 0);
        uint64_t gb = f[4];
        az_free(s->pool, t, f[0] << 40 ^ f[3]);
        s->pool_out -= gb < s->pool_out ? gb : s->pool_out;
        if (f[5]) s->pool_cached += gb;
        if (pi) {
            pi->outstanding -= gb < pi->outstanding ? gb : pi->outstanding;
            if (f[5]) pi->cached += gb;
            if (p->counting && pi->cached > pi->peak_cached) pi->peak_cached = pi->cached;
        }
        az_reserved(s->pool, t, s->pool_out, s->pool_cached);
        gauge = 1;
        break;
    }
    case PST_EV_POOL_BACKING_ALLOC: az_backing(s->pool, 1, 0); break;
    case PST_EV_POOL_BACKING_FREE:  az_backing(s->pool, 0, 1); break;
    case PST_EV_KVB_CREATE: {
        kvpool_t *k = kv_get(s, f[0]);
        if (k && f[2]) k->block_size = f[2];
        az_pool_info_t *pi = pool_get(s, f[0], 1);
        if (pi) {
            pi->block_size = f[2]; pi->n_blocks = f[3];
            if (ev->str) snprintf(pi->name, sizeof pi->name, "%s", ev->str);
        }
        break;
    }
    case PST_EV_KVB_ALLOC: case PST_EV_KVB_FREE: {
        kvpool_t *k = kv_get(s, f[0]);
        if (!k) break;
        int alloc = ev->type == PST_EV_KVB_ALLOC;
        /* The pool fills a block at allocation: n_tokens (f[5]) spread over
         * the ids in order, block_size each, the last one partial; it emits
         * TOKENS only when a count changes later. A list split over several
         * events carries n_tokens on the first piece only (0 on the others):
         * what is left of it goes on; without it a block counts as full. */
        uint64_t left = 0;
        int spread = 0;
        if (alloc) {
            if (f[5] > 0) { left = f[5]; spread = 1; }
            else if (k->carry) { left = k->carry; spread = 1; }
        }
        for (uint32_t i = 0; i < ev->n_ids; i++) {
            uint32_t id = ev->ids[i];
            if (kv_reserve(k, id)) continue;
            if (alloc && !k->held[id]) {
                uint64_t fill = k->block_size;
                if (spread) { fill = left < k->block_size ? left : k->block_size; left -= fill; }
                k->held[id] = 1; k->n_used[id] = (uint32_t)fill; k->blocks++; k->tokens += fill;
            }
            else if (!alloc && k->held[id]) {
                k->held[id] = 0; k->tokens -= k->n_used[id]; k->n_used[id] = 0; k->blocks--;
            }
        }
        if (alloc) k->carry = left;
        kv_publish(s, t);
        gauge = 1;
        break;
    }
    case PST_EV_KVB_TOKENS: {
        kvpool_t *k = kv_get(s, f[0]);
        if (!k || kv_reserve(k, f[2])) break;
        uint64_t id = f[2];
        if (!k->held[id]) break;
        k->tokens = k->tokens - k->n_used[id] + f[3];
        k->n_used[id] = (uint32_t)f[3];
        kv_publish(s, t);
        gauge = 1;
        break;
    }
    case PST_EV_MARK_POINT: case PST_EV_MARK_BEGIN: case PST_EV_MARK_END: {
        int kind = ev->type == PST_EV_MARK_POINT ? AZ_MARK_POINT :
                   ev->type == PST_EV_MARK_BEGIN ? AZ_MARK_BEGIN : AZ_MARK_END;
        uint64_t inst = ev->type == PST_EV_MARK_POINT ? 0 : f[1];
        az_mark(s->heap, t, kind, ev->str ? ev->str : "?", inst);
        if (s->n_markers < p->opts.keep_markers)
            s->markers[s->n_markers++] = (az_marker_rec_t){ t, inst, (uint32_t)f[0], (uint8_t)kind };
        else if (p->opts.keep_markers)
            s->markers_dropped++;
        if (p->opts.phase && ev->type == PST_EV_MARK_END && ev->str &&
            !strcmp(ev->str, p->opts.phase) && p->phase_open > 0)
            p->phase_open--;
        break;
    }
    case PST_EV_THREAD_START: s->threads++; break;
    case PST_EV_THREAD_NAME:   /* the interposer's stream for exiting threads is not a thread */
        if (ev->str && !strcmp(ev->str, PST_EXIT_STREAM_NAME) && s->threads) s->threads--;
        break;
    case PST_EV_FORK: s->forks++; break;
    case PST_EV_EXEC: s->execs++; break;
    case PST_EV_LOST: s->lost += f[0]; break;
    default: break;
    }
#undef CALL
    /* the timeline covers --from/--to only (a --phase is not a time span:
     * the timeline is whole-run then, and the report says so) */
    if (p->opts.window && (t < p->opts.from || t > p->opts.to)) gauge = 0;
    if (gauge == 2) tl_heap(s, t);
    else if (gauge) tl_update(s, t);
    if (p->opts.hook) p->opts.hook(p->opts.hook_ctx, ev, s);
}

/* The trace is the file `path`, or the len bytes at mem when mem is set. */
static int scan_any(const char *path, const void *mem, size_t mem_len, const az_scan_opts_t *opts,
                    az_scan_t **out, char *msg, size_t msglen)
{
    int err = 0;
    *out = NULL;
    az_scan_t *s = calloc(1, sizeof *s);
    priv_t *p = calloc(1, sizeof *p);
    if (!s || !p) { free(s); free(p); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
    s->priv = p;
    s->path = path;
    if (opts) p->opts = *opts;
    p->counting = 1;
    s->tl_n = p->opts.timeline_buckets ? p->opts.timeline_buckets : 64;
    s->tl_n = (s->tl_n + 1) & ~(size_t)1;
    s->tl = calloc(s->tl_n, sizeof *s->tl);
    if (p->opts.keep_markers) s->markers = malloc(p->opts.keep_markers * sizeof *s->markers);
    s->heap = az_create(NULL, &err);
    s->pool = az_create(NULL, &err);
    if (!s->tl || !s->heap || !s->pool || psc_map_init(&p->maps, sizeof(mapent_t), 128, 50, NULL) ||
        (p->opts.keep_markers && !s->markers)) {
        az_scan_free(s);
        snprintf(msg, msglen, "out of memory");
        return PSC_ENOMEM;
    }
    s->r = mem ? pst_open_mem(mem, mem_len, &err) : pst_open(path, &err);
    if (!s->r) {
        if (err == PSC_EIO) snprintf(msg, msglen, "%s", strerror(errno));
        else if (err == PSC_ECORRUPT) snprintf(msg, msglen, "not a poolscope trace (bad header)");
        else if (err == PSC_ETRUNC) snprintf(msg, msglen, "cut short inside the file header");
        else if (err == PSC_EVERSION) snprintf(msg, msglen, "trace format version not supported by this build");
        else snprintf(msg, msglen, "%s", psc_strerror(err));
        az_scan_free(s);
        return err;
    }
    s->hdr = pst_header(s->r);
    if (opts) { s->phase = opts->phase; s->window = opts->window; s->from = opts->from; s->to = opts->to; }
    /* first bucket width: 1 us; doubled as needed */
    s->tl_shift = 10;
    pst_event_t ev;
    int rc;
    int started = 0;
    uint64_t file_bytes = 0, n_read = 0;
    struct stat fst;
    if (mem) file_bytes = mem_len;
    else if (opts && opts->progress && stat(path, &fst) == 0) file_bytes = (uint64_t)fst.st_size;
    while ((rc = pst_next(s->r, &ev)) > 0) {
        if (!started && (!p->opts.window || ev.ts >= p->opts.from)) { s->tl_t0 = ev.ts; started = 1; }
        on_event(s, &ev);
        if (opts && opts->progress && (++n_read & 0xfffff) == 0)
            opts->progress(opts->progress_ctx, n_read, pst_status(s->r)->bytes, file_bytes);
    }
    s->status = pst_status(s->r);
    if (rc < 0) {
        snprintf(msg, msglen, "read failed: %s", psc_strerror(rc));
        az_scan_free(s);
        return rc;
    }
    if (s->status->lost > s->lost) s->lost = s->status->lost;
    /* The tracer's own thread (it samples RSS) is not one of the program's;
     * its mappings are reported apart from the program's memory. */
    if (s->status->tracer_stream && s->threads) s->threads--;
    s->tracer_bytes = s->status->tracer_bytes_peak;
    if (s->status->sync_fields)
        s->resolution_ns = s->status->tick_gap_max_ns > PST_TICK_NS ? s->status->tick_gap_max_ns : PST_TICK_NS;
    /* the window ends the count at `to` even if events go on */
    az_finish(s->heap, s->t_last);
    az_finish(s->pool, s->t_last);
    az_result(s->heap, &s->heap_r);
    az_result(s->pool, &s->pool_r);
    if (p->opts.phase && !p->phase_seen) {         /* a typo would count nothing, silently */
        size_t k = (size_t)snprintf(msg, msglen, "no phase '%s' in this trace; its phases: ", p->opts.phase);
        if (!s->heap_r.n_phases && k < msglen) snprintf(msg + k, msglen - k, "none (no markers)");
        for (size_t i = 0; i < s->heap_r.n_phases && k < msglen; i++)
            k += (size_t)snprintf(msg + k, msglen - k, "%s%s", i ? ", " : "", s->heap_r.phases[i].name);
        az_scan_free(s);
        return PSC_ENOENT;
    }
    *out = s;
    return 0;
}

int az_scan_file(const char *path, const az_scan_opts_t *opts, az_scan_t **out,
                 char *msg, size_t msglen)
{
    return scan_any(path, NULL, 0, opts, out, msg, msglen);
}

int az_scan_mem(const void *buf, size_t len, const char *name, const az_scan_opts_t *opts,
                az_scan_t **out, char *msg, size_t msglen)
{
    return scan_any(name, buf, len, opts, out, msg, msglen);
}

void az_scan_free(az_scan_t *s)
{
    if (!s) return;
    priv_t *p = s->priv;
    if (p) {
        psc_map_free(&p->maps);
        for (size_t i = 0; i < p->n_kv; i++) { free(p->kv[i].n_used); free(p->kv[i].held); }
        free(p->kv);
        free(p);
    }
    pst_close(s->r);
    az_destroy(s->heap);
    az_destroy(s->pool);
    free(s->tl);
    free(s->markers);
    free(s->pools);
    free(s);
}

const char *az_scan_warning(const az_scan_t *s, char *buf, size_t len)
{
    const pst_status_t *st = s->status;
    if (!st) return NULL;
    if (st->corrupt) {
        snprintf(buf, len, "corrupt chunk at byte %llu (%s); reporting the %llu events before it",
                 (unsigned long long)st->corrupt_offset, st->corrupt_reason ? st->corrupt_reason : "bad data",
                 (unsigned long long)st->events);
        return buf;
    }
    if (st->truncated) {
        snprintf(buf, len, "trace is cut short (%s%llu unread bytes); reporting the %llu events read",
                 st->end_seen ? "" : "no end record, ",
                 (unsigned long long)st->unread_bytes, (unsigned long long)st->events);
        return buf;
    }
    return NULL;
}

void az_scan_program_json(const az_scan_t *s, az_json_t *j)
{
    const pst_header_t *h = s->hdr;
    az_json_str(j, "program", h && h->exe && h->exe[0] ? h->exe : NULL);
    az_json_begin(j, "argv", '[');
    for (uint32_t i = 0; h && h->argv && i < h->argc; i++) az_json_str(j, NULL, h->argv[i]);
    az_json_end(j);
}

int az_scan_kv_used(const az_scan_t *s, uint64_t pool, uint64_t block, uint32_t *n_used)
{
    const priv_t *p = s ? s->priv : NULL;
    for (size_t i = 0; p && i < p->n_kv; i++) {
        const kvpool_t *k = &p->kv[i];
        if (k->id != pool) continue;
        if (block >= k->cap || !k->held[block]) return 0;
        *n_used = k->n_used[block];
        return 1;
    }
    return 0;
}

const char *az_scan_string(const az_scan_t *s, uint32_t id)
{
    const char *n = s->r ? pst_string(s->r, id) : NULL;
    return n ? n : "?";
}

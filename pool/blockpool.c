/* blockpool.c — block bookkeeping and block storage of the KV-cache pool.
 *
 * What: fixed-size blocks of block_size token slots, checked out to owners
 * from per-stream LIFO free lists (a just-freed block is cache-hot, so it goes
 * out first), with the counters of docs/DESIGN.md ("KV block pool"), a
 * 256-entry stats history, a Prometheus exposition and an observer.  See
 * blockpool.h for the semantics.
 *
 * Why this shape:
 *   - Block records live in one array indexed by id, so ids are stable and a
 *     lookup is an index.  Both list kinds are threaded through the records:
 *     the free list of a stream is a singly linked stack (next), the blocks of
 *     an owner a doubly linked list (prev/next) in allocation order, so free
 *     of any block is O(1) and blocks_for needs no sorting.
 *   - Owners sit in the common hash map (common/hashmap.h: linear probing,
 *     backward-shift deletion, no tombstones), allocated through the meta
 *     allocator.  Its room is reserved before anything is committed, so a
 *     failed allocation never leaves a half-done allocate.
 *   - Storage is part of the pool (cfg.row_elems > 0): one anonymous
 *     MAP_NORESERVE mapping at creation and one per growth step, made under
 *     the pool's lock when the blocks are added.  Pages commit on first write;
 *     writing a block only copies bytes.  Each record keeps its slot pointer.
 *   - Every fallible step (meta allocation, mmap) happens before the first
 *     change to the bookkeeping, so every error leaves the pool as it was.
 */
#include "poolscope/blockpool.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blockpool_int.h"

/* ---- small helpers -------------------------------------------------------- */

static void *sys_alloc(void *ctx, size_t n) { (void)ctx; return malloc(n); }
static void  sys_free(void *ctx, void *p)   { (void)ctx; free(p); }

static void *m_alloc(kvb_pool_t *p, size_t n) { return p->a.alloc(p->a.ctx, n); }
static void  m_free(kvb_pool_t *p, void *q)   { if (q) p->a.free(p->a.ctx, q); }

static const char *check_locked(kvb_pool_t *p);

/* Every operation that changes the pool unlocks here: in the debug build
 * the walker runs first, still under the lock, so a broken invariant is
 * reported by the operation that broke it. Queries unlock plainly. */
static void pool_unlock(kvb_pool_t *p)
{
#if PS_DEBUG
    if (psc_debug_due(&p->dbg_ops, p->dbg_every))
        PSC_VERIFY("KV block pool", NULL, check_locked(p));
#endif
    pthread_mutex_unlock(&p->mu);
}

const char *kvb_stream_name(kvb_stream_t s)
{
    switch (s) {
    case KVB_STREAM_K:  return "k";
    case KVB_STREAM_V:  return "v";
    case KVB_STREAM_KV: return "kv";
    }
    return "?";
}

static const struct { const char *name; int bits; } fmt_tab[KVB_FMT_COUNT] = {
    [KVB_FMT_F32]  = { "f32", 32 },  [KVB_FMT_F16]  = { "f16", 16 },
    [KVB_FMT_BF16] = { "bf16", 16 }, [KVB_FMT_INT8] = { "int8", 8 },
    [KVB_FMT_INT4] = { "int4", 4 },  [KVB_FMT_INT2] = { "int2", 2 },
    [KVB_FMT_INT1] = { "int1", 1 },
};

static bool fmt_ok(kvb_format_t f) { return (unsigned)f < KVB_FMT_COUNT; }

int kvb_format_bits(kvb_format_t f)
{
    return fmt_ok(f) ? fmt_tab[f].bits : PSC_EINVAL;
}

const char *kvb_format_name(kvb_format_t f)
{
    return fmt_ok(f) ? fmt_tab[f].name : "?";
}

int kvb_format_parse(const char *name)
{
    if (!name)
        return PSC_EINVAL;
    for (int i = 0; i < KVB_FMT_COUNT; i++)
        if (strcmp(name, fmt_tab[i].name) == 0)
            return i;
    return PSC_EINVAL;
}

kvb_config_t kvb_config_default(void)
{
    kvb_config_t c;
    memset(&c, 0, sizeof c);
    c.block_size = 16;
    c.n_blocks = 1024;
    c.separate_kv = true;
    c.grow_on_exhaustion = false;
    c.max_blocks = 0;
    return c;
}

/* Free-list index of a public stream, or -1 if it does not fit the config. */
static int list_of(const kvb_pool_t *p, kvb_stream_t s)
{
    if (p->n_lists == 2)
        return (s == KVB_STREAM_K || s == KVB_STREAM_V) ? (int)s : -1;
    return (s == KVB_STREAM_K || s == KVB_STREAM_V || s == KVB_STREAM_KV) ? 0 : -1;
}

static kvb_stream_t stream_of_list(const kvb_pool_t *p, int l)
{
    return p->n_lists == 2 ? (kvb_stream_t)l : KVB_STREAM_KV;
}

/* ---- events and history (called under the lock) --------------------------- */

static void ev_init(kvb_event_t *ev, kvb_event_kind_t kind)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->owner = -1;
}

static void emit(kvb_pool_t *p, kvb_event_t *ev)
{
    if (p->cfg.observe) {
        ev->seq = p->seq++;
        p->cfg.observe(p->cfg.observe_ctx, ev);
    }
}

static void emit_owner(kvb_pool_t *p, kvb_event_kind_t kind, int64_t owner)
{
    if (p->cfg.observe) {
        kvb_event_t ev;
        ev_init(&ev, kind);
        ev.owner = owner;
        emit(p, &ev);
    }
}

static double frag_of(const kvb_stats_t *s)
{
    return s->n_blocks ? (double)s->blocks_partial / (double)s->n_blocks : 0.0;
}

/* Everything but fragmentation, which readers derive (keeps a division off
 * the hot path: every mutating call pushes a snapshot). */
static void stats_fill_raw(const kvb_pool_t *p, kvb_stats_t *s)
{
    s->n_blocks = (int64_t)p->n_total[0] + p->n_total[1];
    s->n_allocations = p->n_alloc;
    s->n_frees = p->n_frees;
    s->n_reused = p->n_reused;
    s->n_exhausted = p->n_exh;
    s->n_grown = p->n_grown;
    s->n_retired = p->n_retired;
    s->peak_blocks_in_use = p->peak;
    s->blocks_in_use = p->n_alloc - p->n_frees;
    s->blocks_partial = p->n_partial;
    s->fragmentation = 0.0;
}

static void stats_fill(const kvb_pool_t *p, kvb_stats_t *s)
{
    stats_fill_raw(p, s);
    s->fragmentation = frag_of(s);
}

static void hist_push(kvb_pool_t *p)
{
    uint32_t i = (p->hist_head + p->hist_n) % KVB_HISTORY_LEN;
    stats_fill_raw(p, &p->hist[i]);
    if (p->hist_n < KVB_HISTORY_LEN)
        p->hist_n++;
    else
        p->hist_head = (p->hist_head + 1) % KVB_HISTORY_LEN;
}

/* ---- owner table ------------------------------------------------------------ */

static void *own_alloc(void *ctx, size_t n)
{
    const kvb_alloc_t *a = ctx;
    return a->alloc(a->ctx, n);
}

static void own_free(void *ctx, void *q, size_t n)
{
    const kvb_alloc_t *a = ctx;
    (void)n;
    a->free(a->ctx, q);
}

static inline struct owner *own_find(kvb_pool_t *p, int64_t key)
{
    return psc_map_get_sz(&p->own, (uint64_t)key, sizeof(struct owner));
}

/* Make room for one more owner (load <= 1/2).  The only fallible step. */
static int own_reserve(kvb_pool_t *p)
{
    return psc_map_reserve(&p->own, psc_map_count(&p->own) + 1);
}

/* Room must have been reserved. */
static struct owner *own_insert(kvb_pool_t *p, int64_t key)
{
    int is_new;
    struct owner *o = psc_map_put_sz(&p->own, (uint64_t)key, &is_new, sizeof(struct owner));
    if (is_new)
        *o = (struct owner){ .head = NIL, .tail = NIL };
    return o;
}

static void own_delete(kvb_pool_t *p, struct owner *o)
{
    psc_map_erase_sz(&p->own, o, sizeof(struct owner));
}

/* ---- storage ---------------------------------------------------------------- */

static void slot_giveback(kvb_pool_t *p, struct blk *b)
{
    if (b->slot)
        (void)madvise(b->slot, p->slot_bytes, MADV_DONTNEED);
    if (b->flags & F_RESIDENT) {
        b->flags &= (uint8_t)~F_RESIDENT;
        p->n_resident--;
    }
}

/* Reserve record and chunk-array room for k more blocks and map their
 * storage.  On success *base is the new mapping (NULL without storage); the
 * bookkeeping is unchanged either way. */
static int blocks_reserve(kvb_pool_t *p, int32_t k, uint8_t **base)
{
    *base = NULL;
    if (k > INT32_MAX - p->n_ids)
        return PSC_EEXHAUSTED;
    int32_t want = p->n_ids + k;
    if (want > p->blk_cap) {
        int64_t ncap = (int64_t)p->blk_cap * 2;
        if (ncap < want)
            ncap = want;
        if (ncap > INT32_MAX)
            ncap = INT32_MAX;
        struct blk *nb = m_alloc(p, (size_t)ncap * sizeof *nb);
        if (!nb)
            return PSC_ENOMEM;
        if (p->n_ids)
            memcpy(nb, p->blk, (size_t)p->n_ids * sizeof *nb);
        m_free(p, p->blk);
        p->blk = nb;
        p->blk_cap = (int32_t)ncap;
    }
    if (!p->slot_bytes)
        return 0;
    if (p->n_chunks == p->chunk_cap) {
        int32_t ncap = p->chunk_cap ? p->chunk_cap * 2 : 4;
        struct chunk *nc = m_alloc(p, (size_t)ncap * sizeof *nc);
        if (!nc)
            return PSC_ENOMEM;
        if (p->n_chunks)
            memcpy(nc, p->chunks, (size_t)p->n_chunks * sizeof *nc);
        m_free(p, p->chunks);
        p->chunks = nc;
        p->chunk_cap = ncap;
    }
    if ((size_t)k > SIZE_MAX / p->slot_bytes)
        return PSC_ENOMEM;
    size_t len = (size_t)k * p->slot_bytes;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return PSC_ENOMEM;
    p->chunks[p->n_chunks++] = (struct chunk){ m, len };
    *base = m;
    return 0;
}

/* Add k blocks (room reserved) to list l, the lowest new id on top. */
static void blocks_add(kvb_pool_t *p, int l, int32_t k, uint8_t *base)
{
    int32_t first = p->n_ids;
    for (int32_t i = 0; i < k; i++) {
        struct blk *b = &p->blk[first + i];
        b->slot = base ? base + (size_t)i * p->slot_bytes : NULL;
        b->owner = -1;
        b->prev = NIL;
        b->n_used = 0;
        b->list = (uint8_t)l;
        b->format = KVB_FMT_F16;
        b->flags = 0;
    }
    for (int32_t i = k - 1; i >= 0; i--) {
        p->blk[first + i].next = p->top[l];
        p->top[l] = first + i;
    }
    p->n_ids += k;
    p->n_free[l] += k;
    p->n_total[l] += k;
}

/* ---- create / destroy ------------------------------------------------------- */

static int config_check(const kvb_config_t *c)
{
    if (c->block_size < 1 || c->n_blocks < 1 || c->max_blocks < 0)
        return PSC_EINVAL;
    if (c->max_blocks != 0 && c->max_blocks < c->n_blocks)
        return PSC_EINVAL;
    if ((c->alloc.alloc == NULL) != (c->alloc.free == NULL))
        return PSC_EINVAL;
    if (c->row_elems) {
        /* slot = block_size * row_elems * 4 bytes, rounded to a page */
        if (c->row_elems > SIZE_MAX / 4 / (size_t)c->block_size - 65536)
            return PSC_EINVAL;
    }
    return 0;
}

kvb_pool_t *kvb_create(const kvb_config_t *cfg, int *err)
{
    int e = PSC_EINVAL;
    kvb_pool_t *p = NULL;
    if (!cfg || (e = config_check(cfg)) != 0)
        goto fail;

    kvb_alloc_t a = cfg->alloc;
    if (!a.alloc) {
        a.alloc = sys_alloc;
        a.free = sys_free;
        a.ctx = NULL;
    }
    e = PSC_ENOMEM;
    p = a.alloc(a.ctx, sizeof *p);
    if (!p)
        goto fail;
    memset(p, 0, sizeof *p);
#if PS_DEBUG
    p->dbg_every = psc_debug_every();
#endif
    p->cfg = *cfg;
    p->a = a;
    p->n_lists = cfg->separate_kv ? 2 : 1;
    p->top[0] = p->top[1] = NIL;
    if (cfg->max_blocks) {
        if (p->n_lists == 2) {
            p->cap[0] = cfg->max_blocks - cfg->max_blocks / 2;
            p->cap[1] = cfg->max_blocks / 2;
        } else {
            p->cap[0] = cfg->max_blocks;
        }
    }
    if (cfg->row_elems) {
        long pg = sysconf(_SC_PAGESIZE);
        size_t page = pg > 0 ? (size_t)pg : 4096;
        size_t raw = (size_t)cfg->block_size * cfg->row_elems * 4;
        p->slot_bytes = (raw + page - 1) / page * page;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        a.free(a.ctx, p);
        p = NULL;
        goto fail;
    }
    p->hist = m_alloc(p, KVB_HISTORY_LEN * sizeof *p->hist);
    if (!p->hist)
        goto fail_pool;
    psc_alloc_t own_al = { own_alloc, own_free, &p->a };
    if (psc_map_init(&p->own, sizeof(struct owner), 32, 50, &own_al))   /* 64 slots */
        goto fail_pool;

    int32_t nk = p->n_lists == 2 ? cfg->n_blocks - cfg->n_blocks / 2 : cfg->n_blocks;
    uint8_t *base;
    int rc = blocks_reserve(p, cfg->n_blocks, &base);
    if (rc) {
        e = rc == PSC_EEXHAUSTED ? PSC_EINVAL : rc;
        goto fail_pool;
    }
    /* One mapping for the whole initial pool: K ids first, then V. */
    blocks_add(p, 0, nk, base);
    if (p->n_lists == 2)
        blocks_add(p, 1, cfg->n_blocks - nk,
                   base ? base + (size_t)nk * p->slot_bytes : NULL);

    pthread_mutex_lock(&p->mu);
    if (p->cfg.observe) {
        kvb_event_t ev;
        ev_init(&ev, KVB_EV_CREATE);
        ev.config = &p->cfg;
        emit(p, &ev);
    }
    pool_unlock(p);
    if (err)
        *err = 0;
    return p;

fail_pool:
    kvb_destroy(p);
    p = NULL;
fail:
    if (err)
        *err = e;
    return NULL;
}

void kvb_destroy(kvb_pool_t *p)
{
    if (!p)
        return;
    for (int32_t i = 0; i < p->n_chunks; i++)
        munmap(p->chunks[i].base, p->chunks[i].len);
    m_free(p, p->chunks);
    m_free(p, p->blk);
    psc_map_free(&p->own);
    m_free(p, p->hist);
    pthread_mutex_destroy(&p->mu);
    p->a.free(p->a.ctx, p);
}

/* ---- allocate / free ------------------------------------------------------------ */

/* Grow list l by k blocks if the config allows; PSC_EEXHAUSTED if not. */
static int grow(kvb_pool_t *p, int l, int32_t k)
{
    if (!p->cfg.grow_on_exhaustion)
        return PSC_EEXHAUSTED;
    if (p->cap[l] && (int64_t)p->n_total[l] + k > p->cap[l])
        return PSC_EEXHAUSTED;
    uint8_t *base;
    int rc = blocks_reserve(p, k, &base);
    if (rc)
        return rc;
    int32_t first = p->n_ids;
    blocks_add(p, l, k, base);
    p->n_grown += k;
    if (p->cfg.observe) {
        kvb_event_t ev;
        ev_init(&ev, KVB_EV_GROW);
        ev.stream = stream_of_list(p, l);
        ev.block = first;
        ev.n_ids = k;
        emit(p, &ev);
    }
    return 0;
}

int kvb_allocate(kvb_pool_t *p, kvb_stream_t stream, int64_t n_tokens,
                 int64_t owner, kvb_format_t format, int32_t *ids, int32_t cap)
{
    if (!p || n_tokens <= 0 || owner < 0 || !fmt_ok(format) || cap < 0 ||
        (!ids && cap > 0))
        return PSC_EINVAL;
    int l = list_of(p, stream);
    if (l < 0)
        return PSC_EINVAL;
    int32_t bs = p->cfg.block_size;
    int64_t need64 = n_tokens / bs + (n_tokens % bs != 0);
    if (need64 > cap)
        return PSC_ERANGE;
    int32_t need = (int32_t)need64;

    pthread_mutex_lock(&p->mu);
    int rc = own_reserve(p);
    if (rc)
        goto out;
    if (p->n_free[l] < need) {
        rc = grow(p, l, need - p->n_free[l]);
        if (rc == PSC_EEXHAUSTED) {
            p->n_exh++;
            if (p->cfg.observe) {
                kvb_event_t ev;
                ev_init(&ev, KVB_EV_EXHAUSTED);
                ev.stream = stream_of_list(p, l);
                ev.owner = owner;
                ev.format = format;
                ev.n_tokens = n_tokens;
                emit(p, &ev);
            }
            hist_push(p);
        }
        if (rc)
            goto out;
    }

    struct owner *o = own_insert(p, owner);
    if (!o->active) {
        o->active = 1;
        emit_owner(p, KVB_EV_OWNER_REGISTER, owner);
    }
    int64_t left = n_tokens;
    for (int32_t i = 0; i < need; i++) {
        int32_t id = p->top[l];
        struct blk *b = &p->blk[id];
        p->top[l] = b->next;
        b->owner = owner;
        b->format = (uint8_t)format;
        b->n_used = left >= bs ? bs : (int32_t)left;
        left -= b->n_used;
        if (b->n_used < bs)
            p->n_partial++;
        if (b->flags & F_EVER)
            p->n_reused++;
        b->flags |= F_EVER;
        b->next = NIL;
        b->prev = o->tail;
        if (o->tail != NIL)
            p->blk[o->tail].next = id;
        else
            o->head = id;
        o->tail = id;
        ids[i] = id;
    }
    o->count += need;
    p->n_free[l] -= need;
    p->n_alloc += need;
    if (p->n_alloc - p->n_frees > p->peak)
        p->peak = p->n_alloc - p->n_frees;
    if (p->cfg.observe) {
        kvb_event_t ev;
        ev_init(&ev, KVB_EV_ALLOCATE);
        ev.stream = stream_of_list(p, l);
        ev.owner = owner;
        ev.format = format;
        ev.n_tokens = n_tokens;
        ev.ids = ids;
        ev.n_ids = need;
        emit(p, &ev);
    }
    hist_push(p);
    rc = need;
out:
    pool_unlock(p);
    return rc;
}

#define FREE_BATCH 256

struct batch {
    kvb_event_kind_t kind;
    kvb_stream_t     stream;
    int32_t          n;
    int32_t          ids[FREE_BATCH];
};

static void batch_flush(kvb_pool_t *p, struct batch *bt)
{
    if (bt->n && p->cfg.observe) {
        kvb_event_t ev;
        ev_init(&ev, bt->kind);
        ev.stream = bt->stream;
        ev.ids = bt->ids;
        ev.n_ids = bt->n;
        emit(p, &ev);
    }
    bt->n = 0;
}

static void batch_add(kvb_pool_t *p, struct batch *bt, int32_t id)
{
    if (!p->cfg.observe)
        return;
    bt->ids[bt->n++] = id;
    if (bt->n == FREE_BATCH)
        batch_flush(p, bt);
}

/* Return one checked-out block to its free list.  The caller has unlinked it
 * from its owner (or is dropping the whole owner list). */
static void block_put(kvb_pool_t *p, int32_t id)
{
    struct blk *b = &p->blk[id];
    if (b->n_used < p->cfg.block_size)
        p->n_partial--;
    b->owner = -1;
    b->n_used = 0;
    b->prev = NIL;
    b->next = p->top[b->list];
    p->top[b->list] = id;
    p->n_free[b->list]++;
    p->n_frees++;
}

int kvb_free(kvb_pool_t *p, const int32_t *ids, int32_t n)
{
    if (!p || n < 0 || (!ids && n > 0))
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= p->n_ids) {
            pool_unlock(p);
            return PSC_EINVAL;
        }
    }
    struct batch bt;
    bt.kind = KVB_EV_FREE;
    bt.stream = 0;
    bt.n = 0;
    int freed = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        struct blk *b = &p->blk[id];
        if (b->owner < 0)
            continue;
        struct owner *o = own_find(p, b->owner);
        if (b->prev != NIL)
            p->blk[b->prev].next = b->next;
        else
            o->head = b->next;
        if (b->next != NIL)
            p->blk[b->next].prev = b->prev;
        else
            o->tail = b->prev;
        if (--o->count == 0 && !o->active)
            own_delete(p, o);
        block_put(p, id);
        batch_add(p, &bt, id);
        freed++;
    }
    batch_flush(p, &bt);
    hist_push(p);
    pool_unlock(p);
    return freed;
}

int kvb_free_all(kvb_pool_t *p, int64_t owner)
{
    if (!p || owner < 0)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int freed = 0;
    struct owner *o = own_find(p, owner);
    if (o) {
        struct batch bt;
        bt.kind = KVB_EV_FREE;
        bt.stream = 0;
        bt.n = 0;
        for (int32_t id = o->head; id != NIL;) {
            int32_t nx = p->blk[id].next;
            block_put(p, id);
            batch_add(p, &bt, id);
            freed++;
            id = nx;
        }
        batch_flush(p, &bt);
        bool was_active = o->active;
        own_delete(p, o);
        if (was_active)
            emit_owner(p, KVB_EV_OWNER_RELEASE, owner);
    }
    hist_push(p);
    pool_unlock(p);
    return freed;
}

/* ---- per-block and per-owner queries ------------------------------------------ */

/* A live (not retired) block, or NULL. */
static struct blk *blk_get(kvb_pool_t *p, int32_t id)
{
    if (id < 0 || id >= p->n_ids || (p->blk[id].flags & F_RETIRED))
        return NULL;
    return &p->blk[id];
}

/* Under the lock: set n_used of a checked-out block, keep n_partial, emit. */
static void set_used_locked(kvb_pool_t *p, int32_t id, struct blk *b, int32_t n_used)
{
    int32_t bs = p->cfg.block_size;
    if (b->n_used == n_used)
        return;
    p->n_partial += (n_used < bs) - (b->n_used < bs);
    b->n_used = n_used;
    if (p->cfg.observe) {
        kvb_event_t ev;
        ev_init(&ev, KVB_EV_TOKENS);
        ev.block = id;
        ev.n_used = n_used;
        ev.owner = b->owner;
        ev.stream = stream_of_list(p, b->list);
        emit(p, &ev);
    }
}

int kvb_set_used(kvb_pool_t *p, int32_t id, int32_t n_used)
{
    if (!p)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    struct blk *b = blk_get(p, id);
    if (!b)
        rc = PSC_ENOENT;
    else if (b->owner < 0 || n_used < 0 || n_used > p->cfg.block_size)
        rc = PSC_EINVAL;
    else {
        set_used_locked(p, id, b, n_used);
        hist_push(p);
    }
    pool_unlock(p);
    return rc;
}

int kvb_blocks_for(kvb_pool_t *p, int64_t owner, int32_t *ids, int32_t cap)
{
    if (!p || cap < 0 || (!ids && cap > 0))
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int n = 0;
    struct owner *o = owner >= 0 ? own_find(p, owner) : NULL;
    if (o)
        for (int32_t id = o->head; id != NIL; id = p->blk[id].next, n++)
            if (n < cap)
                ids[n] = id;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int kvb_n_free(kvb_pool_t *p, kvb_stream_t stream)
{
    if (!p)
        return PSC_EINVAL;
    int l = list_of(p, stream);
    if (l < 0)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int n = p->n_free[l];
    pthread_mutex_unlock(&p->mu);
    return n;
}

int kvb_register_owner(kvb_pool_t *p, int64_t owner)
{
    if (!p || owner < 0)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    struct owner *o = own_find(p, owner);
    int rc = 0;
    if (o && o->active) {
        rc = PSC_EOWNER;
    } else if (!o && (rc = own_reserve(p)) != 0) {
        /* PSC_ENOMEM */
    } else {
        o = own_insert(p, owner);
        o->active = 1;
        emit_owner(p, KVB_EV_OWNER_REGISTER, owner);
        hist_push(p);
    }
    pool_unlock(p);
    return rc;
}

int kvb_release_owner(kvb_pool_t *p, int64_t owner)
{
    if (!p || owner < 0)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    struct owner *o = own_find(p, owner);
    if (o && o->active) {
        o->active = 0;
        if (o->count == 0)
            own_delete(p, o);
        emit_owner(p, KVB_EV_OWNER_RELEASE, owner);
    }
    hist_push(p);
    pool_unlock(p);
    return 0;
}

int kvb_shrink(kvb_pool_t *p, kvb_stream_t stream, int32_t target_free)
{
    if (!p || target_free < 0)
        return PSC_EINVAL;
    int l = list_of(p, stream);
    if (l < 0)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int32_t k = p->n_free[l] - target_free;
    if (k > 0) {
        /* Keep the top target_free (hottest) blocks, retire the rest. */
        int32_t *link = &p->top[l];
        for (int32_t i = 0; i < target_free; i++)
            link = &p->blk[*link].next;
        int32_t id = *link;
        *link = NIL;
        struct batch bt;
        bt.kind = KVB_EV_SHRINK;
        bt.stream = stream_of_list(p, l);
        bt.n = 0;
        while (id != NIL) {
            struct blk *b = &p->blk[id];
            int32_t nx = b->next;
            b->flags |= F_RETIRED;
            b->next = NIL;
            slot_giveback(p, b);
            batch_add(p, &bt, id);
            id = nx;
        }
        batch_flush(p, &bt);
        p->n_free[l] -= k;
        p->n_total[l] -= k;
        p->n_retired += k;
    } else {
        k = 0;
    }
    hist_push(p);
    pool_unlock(p);
    return k;
}

int kvb_block_get(kvb_pool_t *p, int32_t id, kvb_block_t *out)
{
    if (!p || !out)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = PSC_ENOENT;
    struct blk *b = blk_get(p, id);
    if (b) {
        out->id = id;
        out->stream = stream_of_list(p, b->list);
        out->format = (kvb_format_t)b->format;
        out->n_used = b->n_used;
        out->owner = b->owner;
        out->ever_allocated = (b->flags & F_EVER) != 0;
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int32_t kvb_block_size(const kvb_pool_t *p)
{
    return p ? p->cfg.block_size : PSC_EINVAL;
}

const kvb_alloc_t *kvb_pool_allocator(const kvb_pool_t *p)
{
    return p ? &p->a : NULL;
}

/* ---- invariant walker ------------------------------------------------------------ */

/* NULL when sound, or the invariant found broken (the debug build's abort
 * message names it; kvb_check says PSC_ECORRUPT). Under the lock. */
#define CHECK(c, what) do { if (!(c)) return (what); } while (0)

static const char *check_locked(kvb_pool_t *p)
{
    /* The walker borrows no memory (it must work when allocation fails):
     * it counts blocks reached through the lists and compares with a scan of
     * the records; the per-list step bounds also stop cycles. */
    int64_t seen_free = 0, seen_owned = 0, partial = 0, resident = 0;
    int32_t retired = 0;
    for (int l = 0; l < p->n_lists; l++) {
        int32_t n = 0;
        for (int32_t id = p->top[l]; id != NIL; id = p->blk[id].next) {
            CHECK(id >= 0 && id < p->n_ids, "a free list links to a block id out of range");
            struct blk *b = &p->blk[id];
            CHECK(b->owner == -1 && b->list == l && !(b->flags & F_RETIRED),
                  "a free list holds a block that is owned, retired or of the other stream");
            CHECK(b->n_used == 0, "a free block holds tokens");
            CHECK(++n <= p->n_free[l], "a free list is longer than its free count (or a cycle)");
        }
        CHECK(n == p->n_free[l], "a free list is shorter than its free count");
        seen_free += n;
    }
    size_t owners = 0, it = 0;
    uint64_t okey;
    void *ov;
    while (psc_map_next(&p->own, &it, &okey, &ov)) {
        struct owner *o = ov;
        int64_t key = (int64_t)okey;
        owners++;
        CHECK(key >= 0 && own_find(p, key) == o, "the owner map does not find an owner it holds");
        CHECK(o->active || o->count > 0, "an owner neither registered nor holding blocks is kept");
        int32_t n = 0, prev = NIL;
        for (int32_t id = o->head; id != NIL; id = p->blk[id].next) {
            CHECK(id >= 0 && id < p->n_ids, "an owner's list links to a block id out of range");
            struct blk *b = &p->blk[id];
            CHECK(b->owner == key && b->prev == prev,
                  "an owner's list is not a doubly linked list of its blocks");
            CHECK(b->n_used >= 0 && b->n_used <= p->cfg.block_size,
                  "a block holds more tokens than block_size");
            CHECK(++n <= o->count, "an owner's list is longer than its count (or a cycle)");
            prev = id;
        }
        CHECK(n == o->count && o->tail == prev, "an owner's list disagrees with its count or tail");
        seen_owned += n;
    }
    CHECK(owners == psc_map_count(&p->own), "the owner map's count differs from its entries");
    int64_t total[2] = { 0, 0 }, owned = 0;
    for (int32_t id = 0; id < p->n_ids; id++) {
        struct blk *b = &p->blk[id];
        CHECK(b->list < p->n_lists, "a block belongs to a stream the pool does not have");
        if (b->flags & F_RETIRED) {
            CHECK(b->owner == -1 && !(b->flags & F_RESIDENT), "a retired block is owned or resident");
            retired++;
            continue;
        }
        total[b->list]++;
        if (b->owner >= 0) {
            owned++;
            CHECK(b->flags & F_EVER, "an owned block is not marked ever allocated");
            if (b->n_used < p->cfg.block_size)
                partial++;
        }
        if (b->flags & F_RESIDENT) {
            CHECK(b->slot != NULL, "a resident block has no storage slot");
            resident++;
        }
    }
    CHECK(owned == seen_owned, "an owned block is on no owner's list");
    CHECK(owned + seen_free + retired == p->n_ids, "a block is neither free, owned nor retired");
    CHECK(total[0] == p->n_total[0] && total[1] == p->n_total[1],
          "the managed-block counts differ from the records");
    CHECK(p->n_alloc - p->n_frees == owned, "allocations minus frees differ from the blocks owned");
    CHECK(partial == p->n_partial, "the partial-block count differs from the records");
    CHECK(resident == p->n_resident, "the resident-block count differs from the records");
    CHECK(retired == p->n_retired, "the retired count differs from the records");
    CHECK(p->n_alloc - p->n_frees <= p->peak, "blocks in use exceed their peak");
    for (int l = 0; l < p->n_lists; l++)
        CHECK(!p->cap[l] || p->n_total[l] <= p->cap[l], "a stream has more blocks than its cap");
    return NULL;
}

#undef CHECK

int kvb_check(kvb_pool_t *p)
{
    if (!p)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    const char *why = check_locked(p);
    pthread_mutex_unlock(&p->mu);
    return why ? PSC_ECORRUPT : 0;
}

/* ---- stats ---------------------------------------------------------------------- */

int kvb_stats(kvb_pool_t *p, kvb_stats_t *out)
{
    if (!p || !out)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    stats_fill(p, out);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int kvb_history(kvb_pool_t *p, kvb_stats_t *out, int cap)
{
    if (!p || cap < 0 || (!out && cap > 0))
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    uint32_t n = p->hist_n < (uint32_t)cap ? p->hist_n : (uint32_t)cap;
    uint32_t skip = p->hist_n - n;
    for (uint32_t i = 0; i < n; i++) {
        out[i] = p->hist[(p->hist_head + skip + i) % KVB_HISTORY_LEN];
        out[i].fragmentation = frag_of(&out[i]);
    }
    pthread_mutex_unlock(&p->mu);
    return (int)n;
}

static bool metric_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (const char *c = s; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                     *c == '_' || *c == ':';
        bool digit = *c >= '0' && *c <= '9';
        if (!alpha && !(digit && c != s))
            return false;
    }
    return true;
}

struct out {
    char  *buf;
    size_t cap, len;
};

__attribute__((format(printf, 2, 3)))
static void outf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

int kvb_stats_prometheus(const kvb_stats_t *s, const char *prefix,
                         char *buf, size_t cap)
{
    if (!s || (!buf && cap > 0))
        return PSC_EINVAL;
    if (!prefix)
        prefix = KVB_PROM_PREFIX;
    if (!metric_name_ok(prefix))
        return PSC_EINVAL;
    static const struct {
        const char *name, *type, *help;
        int field; /* index into the values below */
    } m[] = {
        { "blocks_in_use", "gauge", "Blocks currently checked out to an owner.", 0 },
        { "blocks_managed", "gauge", "Blocks currently managed by the pool (initial + grown - retired).", 1 },
        { "fragmentation", "gauge", "Fraction of managed blocks that are allocated but not full.", -1 },
        { "peak_blocks_in_use", "gauge", "High-water mark of blocks checked out at once.", 2 },
        { "allocations_total", "counter", "Blocks handed out.", 3 },
        { "frees_total", "counter", "Blocks returned to the pool.", 4 },
        { "reused_total", "counter", "Blocks handed out that had been handed out before.", 5 },
        { "exhausted_total", "counter", "Allocation attempts that failed for lack of free blocks.", 6 },
        { "grown_total", "counter", "Blocks added by exhaustion-triggered growth.", 7 },
        { "retired_total", "counter", "Blocks removed from the pool by shrink.", 8 },
    };
    int64_t v[] = { s->blocks_in_use, s->n_blocks, s->peak_blocks_in_use,
                    s->n_allocations, s->n_frees, s->n_reused, s->n_exhausted,
                    s->n_grown, s->n_retired };
    struct out o = { buf, cap, 0 };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        outf(&o, "# HELP %s_%s %s\n# TYPE %s_%s %s\n", prefix, m[i].name,
             m[i].help, prefix, m[i].name, m[i].type);
        if (m[i].field < 0)
            outf(&o, "%s_%s %.17g\n", prefix, m[i].name, s->fragmentation);
        else
            outf(&o, "%s_%s %lld\n", prefix, m[i].name, (long long)v[m[i].field]);
    }
    if (o.len > INT_MAX)
        return PSC_ERANGE;
    return (int)o.len;
}

/* ---- storage API ---------------------------------------------------------------- */

size_t kvb_row_bytes(const kvb_pool_t *p, kvb_format_t f)
{
    if (!p || !p->slot_bytes || !fmt_ok(f))
        return 0;
    return (p->cfg.row_elems * (size_t)fmt_tab[f].bits + 7) / 8;
}

size_t kvb_slot_bytes(const kvb_pool_t *p)
{
    return p ? p->slot_bytes : 0;
}

static void mark_resident(kvb_pool_t *p, struct blk *b)
{
    if (!(b->flags & F_RESIDENT)) {
        b->flags |= F_RESIDENT;
        p->n_resident++;
    }
}

int kvb_write(kvb_pool_t *p, int32_t id, int32_t offset,
              const void *rows, int32_t n_rows)
{
    if (!p || !p->slot_bytes || offset < 0 || n_rows < 0 || (!rows && n_rows > 0))
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    struct blk *b = blk_get(p, id);
    if (!b) {
        rc = PSC_ENOENT;
    } else if (b->owner < 0) {
        rc = PSC_EINVAL;
    } else if (n_rows > p->cfg.block_size - offset) {
        rc = PSC_ERANGE;
    } else {
        size_t stride = kvb_row_bytes(p, (kvb_format_t)b->format);
        if (n_rows) {
            memcpy(b->slot + (size_t)offset * stride, rows, (size_t)n_rows * stride);
            mark_resident(p, b);
        }
        if (offset + n_rows > b->n_used)
            set_used_locked(p, id, b, offset + n_rows);
        hist_push(p);
    }
    pool_unlock(p);
    return rc;
}

int kvb_read(kvb_pool_t *p, int32_t id, const void **rows, int32_t *n_rows)
{
    if (!p || !p->slot_bytes || !rows || !n_rows)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = PSC_ENOENT;
    struct blk *b = blk_get(p, id);
    if (b) {
        *rows = b->slot;
        *n_rows = b->n_used;
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void *kvb_slot(kvb_pool_t *p, int32_t id)
{
    if (!p || !p->slot_bytes)
        return NULL;
    pthread_mutex_lock(&p->mu);
    void *s = NULL;
    struct blk *b = blk_get(p, id);
    if (b) {
        mark_resident(p, b);
        s = b->slot;
    }
    pool_unlock(p);
    return s;
}

int64_t kvb_resident_bytes(kvb_pool_t *p)
{
    if (!p)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int64_t r = p->n_resident * (int64_t)p->slot_bytes;
    pthread_mutex_unlock(&p->mu);
    return r;
}

int kvb_release(kvb_pool_t *p, int32_t id)
{
    if (!p || !p->slot_bytes)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    struct blk *b = blk_get(p, id);
    if (!b)
        rc = PSC_ENOENT;
    else if (b->owner >= 0)
        rc = PSC_EBUSY;
    else
        slot_giveback(p, b);
    pool_unlock(p);
    return rc;
}

int kvb_storage_mappings(kvb_pool_t *p)
{
    if (!p)
        return PSC_EINVAL;
    pthread_mutex_lock(&p->mu);
    int n = p->n_chunks;
    pthread_mutex_unlock(&p->mu);
    return n;
}

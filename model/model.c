/* model.c — the one interpreter of a trace's events (see model.h).
 *
 * Per event: a switch on the type, O(1) hashed table work per address or
 * block id, and the operations written into one buffer the model owns.
 * Nothing here prints or reads the trace: the caller feeds events.
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "hashmap.h"
#include "invariant.h"
#include "poolscope/blockpool.h"
#include "poolscope/error.h"

#define MAP_ANON_FLAG 0x20       /* Linux MAP_ANONYMOUS */

/* Bounds on tables whose size a trace chooses: enough for any real program,
 * small enough that a crafted trace cannot make us allocate much. */
#define PM_MAX_POOLS 4096
#define PM_MAX_RESV  65536
/* A reservation's commit bitmap has at most this many granules (bits). */
#define PM_RESV_BITS (1u << 20)

const char *const pm_func_names[PM_F_COUNT] = {
    "malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign",
    "aligned_alloc", "memalign", "valloc", "pvalloc", "mmap", "munmap", "mremap",
};

/* A mapping, keyed by its start. */
typedef struct mapent {
    uint64_t len;
    uint32_t name;               /* file name string id, 0 unknown */
    uint32_t stack;              /* the stack of the call that mapped it (its PM_MAP_ADD's) */
    uint8_t  anon, resv;         /* anon: 0 file, 1 anonymous, 2 an allocator's arena (its
                                    objects are heap events: counted apart, in mt.arena);
                                    resv: mapped PROT_NONE (a reservation record exists
                                    when it is anonymous and the table had room) */
} mapent_t;

/* An anonymous PROT_NONE mapping and which of its granules mprotect made
 * accessible since. */
typedef struct resv {
    uint64_t start, len, committed;
    unsigned shift;              /* granule = 2^shift bytes */
    uint64_t *bits;
} resv_t;

typedef struct kvblk {
    uint32_t owner;              /* request slot */
    uint32_t n_used;
    uint8_t  counts;             /* K or KV stream: its tokens count for the request */
} kvblk_t;

typedef struct kvreq {
    uint64_t id;                 /* owner id / request marker instance */
    uint64_t tokens, blocks, reserve;
    uint8_t  has_marker, ended, resident, live;
} kvreq_t;

typedef struct filent { uint64_t bytes, peak; } filent_t;

struct pm_model {
    int counting;
    int peaks_due;               /* an anonymous MMAP's peaks wait for the next event: an
                                    MMAP_NAME naming it an arena takes it out of them */
    pm_pool_t *pools;
    size_t n_pools;
    uint64_t *carry;             /* per pool: tokens of a split ALLOC not yet given to a block */
    uint64_t pool_out, pool_cached;
    int kv_config_sent;
    uint64_t kv_orphans;

    psc_map_t maps;              /* start -> mapent_t */
    resv_t *resv;                /* sorted by start */
    size_t n_resv, cap_resv;
    psc_map_t files;             /* name id -> filent_t */
    pm_maps_t mt;

    psc_map_t blocks;            /* (pool index + 1) << 32 | block id -> kvblk_t */
    psc_map_t owners;            /* owner id -> request slot (u32) */
    kvreq_t *req;
    size_t cap_req;
    uint32_t *free_req;
    size_t n_free_req, cap_free_req;
    uint32_t next_req;

    psc_map_t depth;             /* marker name id -> open scopes (u64) */

    uint64_t rss, peak_rss, peak_rss_t, rss_samples;

#if PS_DEBUG
    unsigned dbg_ops, dbg_every;   /* model_check runs every dbg_every-th event */
#endif
    size_t n_ops;
    pm_op_t ops[2 * PST_MAX_IDS + 16];
};

pm_model_t *pm_create(int *err)
{
    pm_model_t *m = calloc(1, sizeof *m);
    int rc = PSC_ENOMEM;
    if (!m) goto fail;
    m->counting = 1;
#if PS_DEBUG
    m->dbg_every = psc_debug_every();
#endif
    if ((rc = psc_map_init(&m->maps, sizeof(mapent_t), 128, 50, NULL)) ||
        (rc = psc_map_init(&m->files, sizeof(filent_t), 8, 0, NULL)) ||
        (rc = psc_map_init(&m->blocks, sizeof(kvblk_t), 256, 0, NULL)) ||
        (rc = psc_map_init(&m->owners, sizeof(uint32_t), 64, 0, NULL)) ||
        (rc = psc_map_init(&m->depth, sizeof(uint64_t), 16, 0, NULL)))
        goto fail;
    return m;
fail:
    pm_destroy(m);
    if (err) *err = rc;
    return NULL;
}

void pm_destroy(pm_model_t *m)
{
    if (!m) return;
    psc_map_free(&m->maps);
    psc_map_free(&m->files);
    psc_map_free(&m->blocks);
    psc_map_free(&m->owners);
    psc_map_free(&m->depth);
    for (size_t i = 0; i < m->n_resv; i++) free(m->resv[i].bits);
    free(m->resv);
    free(m->pools);
    free(m->carry);
    free(m->req);
    free(m->free_req);
    free(m);
}

static pm_op_t *op(pm_model_t *m, pm_kind_t kind)
{
    pm_op_t *o = &m->ops[m->n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = (uint8_t)kind;
    return o;
}

/* ---- peaks ----------------------------------------------------------------- */

static void map_peaks(pm_model_t *m)
{
    if (!m->counting) return;
    pm_maps_t *t = &m->mt;
    uint64_t total = t->anon + t->file, committed = total - (t->reserved < total ? t->reserved : total);
    if (t->anon > t->peak_anon) t->peak_anon = t->anon;
    if (t->file > t->peak_file) t->peak_file = t->file;
    if (total > t->peak_total) t->peak_total = total;
    if (t->reserved > t->peak_reserved) t->peak_reserved = t->reserved;
    if (t->arena > t->peak_arena) t->peak_arena = t->arena;
    if (committed > t->peak_committed) t->peak_committed = committed;
}

void pm_set_counting(pm_model_t *m, int on)
{
    if (on == m->counting) return;
    m->counting = on;
    if (!on) return;
    /* what is held when the window opens is a candidate peak of the window */
    map_peaks(m);
    if (m->rss_samples && m->rss > m->peak_rss) m->peak_rss = m->rss;
    for (size_t i = 0; i < m->n_pools; i++) {
        pm_pool_t *p = &m->pools[i];
        if (p->outstanding > p->peak_out) p->peak_out = p->outstanding;
        if (p->cached > p->peak_cached) p->peak_cached = p->cached;
    }
    size_t it = 0;
    void *v;
    while (psc_map_next(&m->files, &it, NULL, &v)) {
        filent_t *f = v;
        if (f->bytes > f->peak) f->peak = f->bytes;
    }
}

/* ---- pools ----------------------------------------------------------------- */

static pm_pool_t *pool_find(pm_model_t *m, uint64_t id, int kv)
{
    for (size_t i = 0; i < m->n_pools; i++)
        if (m->pools[i].id == id && m->pools[i].kv == kv) return &m->pools[i];
    return NULL;
}

static pm_pool_t *pool_get(pm_model_t *m, uint64_t id, int kv)
{
    pm_pool_t *p = pool_find(m, id, kv);
    if (p || m->n_pools == PM_MAX_POOLS) return p;
    pm_pool_t *a = realloc(m->pools, (m->n_pools + 1) * sizeof *a);
    if (!a) return NULL;
    m->pools = a;
    uint64_t *c = realloc(m->carry, (m->n_pools + 1) * sizeof *c);
    if (!c) return NULL;
    m->carry = c;
    c[m->n_pools] = 0;
    p = &m->pools[m->n_pools++];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->kv = kv;
    snprintf(p->name, sizeof p->name, "%s%llu", kv ? "kv" : "pool", (unsigned long long)id);
    return p;
}

static uint32_t pool_index(const pm_model_t *m, const pm_pool_t *p) { return (uint32_t)(p - m->pools); }

static void sub_sat(uint64_t *g, uint64_t v) { *g -= v < *g ? v : *g; }

static void pool_acquire(pm_model_t *m, const pst_event_t *ev)
{
    /* "uuuuuuuuu" pool id, pool_seq, arm, buf id, requested, granted, req bytes, granted bytes, hit */
    const uint64_t *f = ev->f;
    pm_pool_t *p = pool_get(m, f[0], 0);
    uint64_t rb = f[6], gb = f[7];
    int hit = f[8] != 0;
    pm_op_t *o = op(m, PM_POOL_ACQUIRE);
    o->pool = p ? pool_index(m, p) : UINT32_MAX;
    o->key = f[0] << 40 ^ f[3];
    o->req = rb;
    o->bytes = gb;
    o->flags = hit ? PM_F_HIT : 0;
    o->stack = ev->stack;
    m->pool_out += gb;
    if (hit) sub_sat(&m->pool_cached, gb);
    if (!p) return;
    p->outstanding += gb;
    if (hit) sub_sat(&p->cached, gb);
    if (!m->counting) return;
    p->acquires++;
    p->hits += hit;
    p->req_bytes += rb;
    p->granted_bytes += gb;
    if (rb && gb > rb && gb - rb > rb) p->oversized++;   /* gb > 2 * rb, without overflow */
    if (p->outstanding > p->peak_out) p->peak_out = p->outstanding;
}

static void pool_reclaim(pm_model_t *m, const pst_event_t *ev)
{
    /* "uuuuuu" pool id, pool_seq, arm, buf id, granted bytes, cached (1) or destroyed (0) */
    const uint64_t *f = ev->f;
    pm_pool_t *p = pool_get(m, f[0], 0);
    uint64_t gb = f[4];
    pm_op_t *o = op(m, PM_POOL_RECLAIM);
    o->pool = p ? pool_index(m, p) : UINT32_MAX;
    o->key = f[0] << 40 ^ f[3];
    o->bytes = gb;
    o->flags = f[5] ? PM_F_CACHED : 0;
    sub_sat(&m->pool_out, gb);
    if (f[5]) m->pool_cached += gb;
    if (!p) return;
    sub_sat(&p->outstanding, gb);
    if (f[5]) p->cached += gb;
    if (m->counting && p->cached > p->peak_cached) p->peak_cached = p->cached;
}

/* ---- mappings -------------------------------------------------------------- */

static mapent_t *map_find(pm_model_t *m, uint64_t a) { return psc_map_get_sz(&m->maps, a, sizeof(mapent_t)); }

/* The reservation holding address a, or NULL; *at = where one starting at a
 * would be inserted. */
static resv_t *resv_find(pm_model_t *m, uint64_t a, size_t *at)
{
    size_t lo = 0, hi = m->n_resv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->resv[mid].start <= a) lo = mid + 1; else hi = mid;
    }
    if (at) *at = lo;
    if (lo == 0) return NULL;
    resv_t *r = &m->resv[lo - 1];
    return a - r->start < r->len ? r : NULL;
}

static void resv_add(pm_model_t *m, uint64_t start, uint64_t len)
{
    size_t at;
    if (m->n_resv == PM_MAX_RESV || resv_find(m, start, &at) || len == 0) return;
    if (m->n_resv == m->cap_resv) {
        size_t n = m->cap_resv ? 2 * m->cap_resv : 16;
        resv_t *r = realloc(m->resv, n * sizeof *r);
        if (!r) return;
        m->resv = r;
        m->cap_resv = n;
    }
    unsigned shift = 12;
    while ((len >> shift) >= PM_RESV_BITS) shift++;
    uint64_t granules = (len + (1ull << shift) - 1) >> shift;
    uint64_t *bits = calloc((size_t)((granules + 63) / 64), sizeof *bits);
    if (!bits) return;
    memmove(&m->resv[at + 1], &m->resv[at], (m->n_resv - at) * sizeof *m->resv);
    m->resv[at] = (resv_t){ .start = start, .len = len, .shift = shift, .bits = bits };
    m->n_resv++;
}

/* Forget the reservation starting at start; returns its committed bytes. */
static uint64_t resv_drop(pm_model_t *m, uint64_t start)
{
    resv_t *r = resv_find(m, start, NULL);
    if (!r || r->start != start) return 0;
    uint64_t c = r->committed;
    free(r->bits);
    size_t i = (size_t)(r - m->resv);
    memmove(&m->resv[i], &m->resv[i + 1], (m->n_resv - i - 1) * sizeof *m->resv);
    m->n_resv--;
    return c;
}

static void file_add(pm_model_t *m, uint32_t name, uint64_t bytes, int add)
{
    if (!name) return;
    int is_new;
    filent_t *f = psc_map_put_sz(&m->files, name, &is_new, sizeof(filent_t));
    if (!f) return;
    if (is_new) memset(f, 0, sizeof *f);
    if (add) f->bytes += bytes; else sub_sat(&f->bytes, bytes);
    if (m->counting && f->bytes > f->peak) f->peak = f->bytes;
}

static void unmap(pm_model_t *m, uint64_t addr, uint64_t len);

/* rest: what is left of a mapping the model had (a munmap of its start,
 * an mremap's new place), not a new call: its PM_MAP_ADD says so. */
static void map_add(pm_model_t *m, uint64_t a, uint64_t len, int anon, int resv, uint32_t name,
                    uint32_t stack, int rest)
{
    if (map_find(m, a)) unmap(m, a, UINT64_MAX);    /* a new mapping replaces one we had there */
    mapent_t *e = psc_map_put_sz(&m->maps, a, NULL, sizeof(mapent_t));
    if (!e) return;
    *e = (mapent_t){ .len = len, .name = name, .stack = stack, .anon = (uint8_t)anon, .resv = (uint8_t)resv };
    pm_op_t *o = op(m, PM_MAP_ADD);
    o->key = a;
    o->n = len;
    o->bytes = resv ? 0 : len;
    o->stack = stack;
    o->flags = (uint8_t)((anon ? 0 : PM_F_FILE) | (rest ? PM_F_REST : 0));
    *(anon == 2 ? &m->mt.arena : anon ? &m->mt.anon : &m->mt.file) += len;
    if (resv) {
        m->mt.reserved += len;
        if (anon) resv_add(m, a, len);
    }
    file_add(m, name, len, 1);
    m->mt.n_live++;
}

/* munmap(addr, len) of a mapping we saw start at addr: the first len bytes
 * go; the rest, if any, stays as a mapping of its own. An unmap of part of
 * a reservation forgets what mprotect committed in the rest (documented). */
static void unmap(pm_model_t *m, uint64_t addr, uint64_t len)
{
    mapent_t *e = map_find(m, addr);
    if (!e) return;
    mapent_t old = *e;
    uint64_t cut = len < old.len ? len : old.len;
    psc_map_erase_sz(&m->maps, e, sizeof(mapent_t));
    m->mt.n_live--;
    pm_op_t *o = op(m, PM_MAP_DEL);
    o->key = addr;
    o->n = old.len;
    o->stack = old.stack;
    o->flags = old.anon ? 0 : PM_F_FILE;
    sub_sat(old.anon == 2 ? &m->mt.arena : old.anon ? &m->mt.anon : &m->mt.file, old.len);
    file_add(m, old.name, old.len, 0);
    if (old.resv) {
        uint64_t committed = old.anon ? resv_drop(m, addr) : 0;
        sub_sat(&m->mt.reserved, old.len - (committed < old.len ? committed : old.len));
    }
    if (cut < old.len) map_add(m, addr + cut, old.len - cut, old.anon, old.resv, old.name, old.stack, 1);
}

static void mprotect_range(pm_model_t *m, uint64_t a, uint64_t len, uint64_t prot)
{
    resv_t *r = resv_find(m, a, NULL);
    if (!r) return;               /* outside every reservation: committed already */
    uint64_t end = len > r->start + r->len - a ? r->start + r->len : a + len;
    uint64_t g = 1ull << r->shift;
    for (uint64_t off = (a - r->start) >> r->shift; (off << r->shift) + r->start < end; off++) {
        uint64_t bit = 1ull << (off & 63), *w = &r->bits[off >> 6];
        uint64_t gl = g;
        if ((off << r->shift) + g > r->len) gl = r->len - (off << r->shift);
        if (prot && !(*w & bit)) { *w |= bit; r->committed += gl; sub_sat(&m->mt.reserved, gl); }
        else if (!prot && (*w & bit)) { *w &= ~bit; sub_sat(&r->committed, gl); m->mt.reserved += gl; }
    }
}

static int map_event(pm_model_t *m, const pst_event_t *ev)
{
    const uint64_t *f = ev->f;
    switch (ev->type) {
    case PST_EV_MMAP:
        /* "Auuuzu" ret, len, prot, flags, fd, offset */
        if (!f[0] || f[0] == UINT64_MAX) return 0;
        map_add(m, f[0], f[1], (f[3] & MAP_ANON_FLAG) != 0, f[2] == 0, 0, ev->stack, 0);
        if ((f[3] & MAP_ANON_FLAG) && f[2]) { m->peaks_due = 1; return 1; }
        break;
    case PST_EV_MUNMAP:
        unmap(m, f[0], f[1]);
        break;
    case PST_EV_MREMAP: {
        /* "AuAuu" old, old_len, ret, new_len, flags */
        if (!f[2] || f[2] == UINT64_MAX) return 0;
        mapent_t *e = map_find(m, f[0]);
        mapent_t old = e ? *e : (mapent_t){ .anon = 1, .stack = ev->stack };
        if (e) unmap(m, f[0], UINT64_MAX);
        map_add(m, f[2], f[3], old.anon, old.resv, old.name, old.stack, e != NULL);
        break;
    }
    case PST_EV_MPROTECT:
        /* "Auu" addr, len, prot */
        mprotect_range(m, f[0], f[1], f[2]);
        break;
    case PST_EV_MMAP_NAME: {
        /* "AS" start, path */
        mapent_t *e = map_find(m, f[0]);
        if (!e || e->name || f[1] > UINT32_MAX) return 0;
        if (e->anon == 1 && !e->resv && ev->str && !strcmp(ev->str, PST_PYMALLOC_ARENA_NAME)) {
            e->anon = 2;   /* pymalloc's arena: its reserve, not the program's mapping */
            sub_sat(&m->mt.anon, e->len);
            m->mt.arena += e->len;
            m->peaks_due = 0;
            break;
        }
        e->name = (uint32_t)f[1];
        file_add(m, e->name, e->len, 1);
        break;
    }
    default:
        return 0;
    }
    map_peaks(m);
    return 1;
}

/* ---- KV -------------------------------------------------------------------- */

static pm_pool_t *kv_pool(pm_model_t *m, uint64_t id)
{
    pm_pool_t *p = pool_find(m, id, 1);
    return p && p->block_size ? p : NULL;
}

/* The request slot of an owner id, created on first sight. */
static int kv_owner(pm_model_t *m, uint64_t id, uint32_t *slot)
{
    int is_new;
    uint32_t *v = psc_map_put_sz(&m->owners, id, &is_new, sizeof(uint32_t));
    if (!v) return PSC_ENOMEM;
    if (!is_new) { *slot = *v; return 0; }
    uint32_t o;
    if (m->n_free_req) {
        o = m->free_req[--m->n_free_req];
    } else {
        if (m->next_req == m->cap_req) {
            size_t n = m->cap_req ? 2 * m->cap_req : 64;
            kvreq_t *q = realloc(m->req, n * sizeof *q);
            if (!q) { psc_map_del(&m->owners, id); return PSC_ENOMEM; }
            m->req = q;
            m->cap_req = n;
        }
        o = m->next_req++;
    }
    *v = o;
    m->req[o] = (kvreq_t){ .id = id, .live = 1 };
    *slot = o;
    return 0;
}

/* The request's state as an operation, and forget it once it is over
 * (holds nothing and either ended or never had a marker). */
static int kv_emit(pm_model_t *m, uint32_t o)
{
    kvreq_t *q = &m->req[o];
    int resident = q->blocks > 0;
    if (resident || q->resident) {
        pm_op_t *x = op(m, PM_KV_REQUEST);
        x->owner = o;
        x->n = q->tokens;
        x->bytes = q->reserve;
        x->flags = resident ? PM_F_RESIDENT : 0;
    }
    q->resident = (uint8_t)resident;
    if (!resident && (q->ended || !q->has_marker)) {
        psc_map_del(&m->owners, q->id);
        q->live = 0;
        if (m->n_free_req == m->cap_free_req) {
            size_t n = m->cap_free_req ? 2 * m->cap_free_req : 64;
            uint32_t *f = realloc(m->free_req, n * sizeof *f);
            if (!f) return PSC_ENOMEM;
            m->free_req = f;
            m->cap_free_req = n;
        }
        m->free_req[m->n_free_req++] = o;
    }
    return 0;
}

static uint64_t kv_key(uint32_t pool_ix, uint64_t id) { return ((uint64_t)pool_ix + 1) << 32 | (uint32_t)id; }

static int kv_alloc(pm_model_t *m, const pst_event_t *ev)
{
    /* "uuuzuuL" pool id, pool_seq, stream, owner, format, n_tokens, ids */
    const uint64_t *f = ev->f;
    pm_pool_t *p = kv_pool(m, f[0]);
    if (!p) { m->kv_orphans++; return 0; }
    uint32_t ix = pool_index(m, p);
    int counts = f[2] != KVB_STREAM_V;      /* V blocks duplicate K's tokens */
    /* n_tokens (f[5]) spread over the ids in order, block_size each; a list
     * split over several events carries it on the first piece only (0 on
     * the others): what is left of it goes on; without it a block counts
     * as full. */
    uint64_t left = 0;
    int spread = 0;
    if (f[5] > 0) { left = f[5]; spread = 1; }
    else if (m->carry[ix]) { left = m->carry[ix]; spread = 1; }
    uint32_t o;
    int rc = kv_owner(m, f[3], &o);
    if (rc) return rc;
    for (uint32_t i = 0; i < ev->n_ids; i++) {
        int is_new;
        kvblk_t *b = psc_map_put_sz(&m->blocks, kv_key(ix, ev->ids[i]), &is_new, sizeof(kvblk_t));
        if (!b) return PSC_ENOMEM;
        if (!is_new) continue;            /* already out: nothing new */
        uint64_t fill = p->block_size;
        if (spread) { fill = left < p->block_size ? left : p->block_size; left -= fill; }
        *b = (kvblk_t){ .owner = o, .n_used = (uint32_t)fill, .counts = (uint8_t)counts };
        p->blocks++;
        p->tokens += fill;
        m->req[o].blocks++;
        if (counts) m->req[o].tokens += fill;
        pm_op_t *x = op(m, PM_KV_BLOCK_ALLOC);
        x->pool = ix;
        x->key = kv_key(ix, ev->ids[i]);
        x->n = fill;
        x->owner = o;
        x->stack = ev->stack;
        x->bytes = p->block_bytes;
        x->req = p->block_size;
        x->flags = counts ? PM_F_COUNTS : 0;
    }
    m->carry[ix] = left;
    return kv_emit(m, o);
}

static int kv_tokens(pm_model_t *m, const pst_event_t *ev)
{
    /* "uuuu" pool id, pool_seq, block id, n_used */
    const uint64_t *f = ev->f;
    pm_pool_t *p = kv_pool(m, f[0]);
    if (!p) { m->kv_orphans++; return 0; }
    if (f[2] > UINT32_MAX) return 0;
    kvblk_t *b = psc_map_get_sz(&m->blocks, kv_key(pool_index(m, p), f[2]), sizeof(kvblk_t));
    if (!b) return 0;
    uint32_t nu = f[3] > UINT32_MAX ? UINT32_MAX : (uint32_t)f[3];
    p->tokens = p->tokens - b->n_used + nu;
    kvreq_t *q = &m->req[b->owner];
    if (b->counts) q->tokens = q->tokens - b->n_used + nu;
    b->n_used = nu;
    return kv_emit(m, b->owner);
}

static int kv_free(pm_model_t *m, const pst_event_t *ev)
{
    /* "uuL" pool id, pool_seq, ids */
    pm_pool_t *p = kv_pool(m, ev->f[0]);
    if (!p) { m->kv_orphans++; return 0; }
    uint32_t ix = pool_index(m, p), cur = UINT32_MAX;
    int rc;
    for (uint32_t i = 0; i < ev->n_ids; i++) {
        uint64_t key = kv_key(ix, ev->ids[i]);
        kvblk_t *bp = psc_map_get_sz(&m->blocks, key, sizeof(kvblk_t));
        if (!bp) continue;
        kvblk_t b = *bp;
        psc_map_erase_sz(&m->blocks, bp, sizeof(kvblk_t));
        if (cur != UINT32_MAX && cur != b.owner && (rc = kv_emit(m, cur))) return rc;
        cur = b.owner;
        kvreq_t *q = &m->req[b.owner];
        q->blocks--;
        if (b.counts) sub_sat(&q->tokens, b.n_used);
        p->blocks--;
        sub_sat(&p->tokens, b.n_used);
        pm_op_t *x = op(m, PM_KV_BLOCK_FREE);
        x->pool = ix;
        x->key = key;
        x->n = b.n_used;
        x->owner = b.owner;
        x->bytes = p->block_bytes;
        x->req = p->block_size;
        x->flags = b.counts ? PM_F_COUNTS : 0;
    }
    return cur != UINT32_MAX ? kv_emit(m, cur) : 0;
}

/* "request" markers: the request's prompt + max tokens, and its end. */
static int kv_marker(pm_model_t *m, const pst_event_t *ev)
{
    uint32_t o;
    int rc;
    if (ev->type == PST_EV_MARK_BEGIN) {
        if ((rc = kv_owner(m, ev->f[1], &o))) return rc;
        kvreq_t *q = &m->req[o];
        q->has_marker = 1;
        q->ended = 0;
        if (ev->n_payload >= 2 && ev->payload[0] >= 0 && ev->payload[1] >= 0 &&
            psc_add_u64((uint64_t)ev->payload[0], (uint64_t)ev->payload[1], &q->reserve))
            q->reserve = 0;
        /* An engine may take the first blocks just before it opens the scope. */
        return q->blocks ? kv_emit(m, o) : 0;
    }
    uint32_t *v = psc_map_get_sz(&m->owners, ev->f[1], sizeof(uint32_t));
    if (!v) return 0;
    m->req[*v].ended = 1;
    return kv_emit(m, *v);
}

/* ---- markers ---------------------------------------------------------------- */

static int mark(pm_model_t *m, const pst_event_t *ev)
{
    uint64_t open = 0, before = 0;
    if (ev->type != PST_EV_MARK_POINT) {
        int is_new;
        uint64_t *d = psc_map_put_sz(&m->depth, ev->f[0], &is_new, sizeof(uint64_t));
        if (!d) return PSC_ENOMEM;
        if (is_new) *d = 0;
        before = *d;
        if (ev->type == PST_EV_MARK_BEGIN) ++*d;
        else if (*d > 0) --*d;
        open = *d;
    }
    pm_op_t *o = op(m, PM_MARK);
    o->flags = ev->type == PST_EV_MARK_BEGIN ? PM_F_BEGIN : ev->type == PST_EV_MARK_END ? PM_F_END : 0;
    o->n = open;
    o->req = before;
    o->key = ev->type == PST_EV_MARK_POINT ? 0 : ev->f[1];
    if (ev->str && !strcmp(ev->str, "request") && ev->type != PST_EV_MARK_POINT) return kv_marker(m, ev);
    return 0;
}

/* ---- one event --------------------------------------------------------------- */

static void heap_alloc(pm_model_t *m, const pst_event_t *ev, uint64_t addr, uint64_t req)
{
    if (!addr) { op(m, PM_HEAP_FAILED); return; }
    pm_op_t *o = op(m, PM_HEAP_ALLOC);
    o->key = addr;
    o->bytes = req;
    o->stack = ev->stack;
}

static void heap_free(pm_model_t *m, uint64_t addr)
{
    if (addr) op(m, PM_HEAP_FREE)->key = addr;
}

/* The malloc family (most of a long trace's events): a function of its
 * own, so the common event does not pay for the register saves of the big
 * switch below. 1 when ev was one of them. */
static inline int heap_event(pm_model_t *m, const pst_event_t *ev, pm_step_t *st)
{
    const uint64_t *f = ev->f;
    switch (ev->type) {
    case PST_EV_MALLOC: case PST_EV_VALLOC: case PST_EV_PVALLOC:
        st->call = ev->type == PST_EV_MALLOC ? PM_F_MALLOC : ev->type == PST_EV_VALLOC ? PM_F_VALLOC : PM_F_PVALLOC;
        st->call_bytes = f[1];
        heap_alloc(m, ev, f[0], f[1]);
        st->moved = PM_MOVED_HEAP;
        break;
    case PST_EV_CALLOC: {
        uint64_t size;
        st->call = PM_F_CALLOC;
        if (psc_mul_u64(f[1], f[2], &size)) op(m, PM_HEAP_FAILED);   /* nmemb * size overflows: calloc fails */
        else { st->call_bytes = size; heap_alloc(m, ev, f[0], size); }
        st->moved = PM_MOVED_HEAP;
        break;
    }
    case PST_EV_REALLOC: case PST_EV_REALLOCARRAY: {
        int arr = ev->type == PST_EV_REALLOCARRAY;
        uint64_t old = f[0], ret = f[1], size = f[2];
        st->call = arr ? PM_F_REALLOCARRAY : PM_F_REALLOC;
        /* nmemb * size overflows: reallocarray fails, the old block stays */
        if (arr && psc_mul_u64(f[2], f[3], &size)) { op(m, PM_HEAP_FAILED); st->moved = PM_MOVED_HEAP; break; }
        st->call_bytes = size;
        if (old == 0) heap_alloc(m, ev, ret, size);
        else if (ret == 0 && size == 0) heap_free(m, old);   /* realloc(p, 0) frees */
        else if (ret == 0) op(m, PM_HEAP_FAILED);           /* failed: the old block stays */
        else { heap_free(m, old); heap_alloc(m, ev, ret, size); }
        st->moved = PM_MOVED_HEAP;
        break;
    }
    case PST_EV_FREE:
        st->call = PM_F_FREE;
        heap_free(m, f[0]);
        st->moved = PM_MOVED_HEAP;
        break;
    default:
        return 0;
    }
    return 1;
}

/* Every other event. */
static __attribute__((noinline)) int other_event(pm_model_t *m, const pst_event_t *ev, pm_step_t *st)
{
    const uint64_t *f = ev->f;
    int rc = 0;
    switch (ev->type) {
    case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN:
        st->call = ev->type == PST_EV_POSIX_MEMALIGN ? PM_F_POSIX_MEMALIGN :
                   ev->type == PST_EV_ALIGNED_ALLOC ? PM_F_ALIGNED_ALLOC : PM_F_MEMALIGN;
        st->call_bytes = f[2];
        heap_alloc(m, ev, f[0], f[2]);
        st->moved = PM_MOVED_HEAP;
        break;
    case PST_EV_MMAP: case PST_EV_MUNMAP: case PST_EV_MREMAP:
        st->call = ev->type == PST_EV_MMAP ? PM_F_MMAP : ev->type == PST_EV_MUNMAP ? PM_F_MUNMAP : PM_F_MREMAP;
        map_event(m, ev);
        st->moved = PM_MOVED_MAP;
        break;
    case PST_EV_MPROTECT: case PST_EV_MMAP_NAME:
        if (map_event(m, ev)) st->moved = PM_MOVED_MAP;
        break;
    case PST_EV_RSS:
        m->rss = f[0];
        m->rss_samples++;
        if (m->counting && f[0] > m->peak_rss) { m->peak_rss = f[0]; m->peak_rss_t = ev->ts; }
        st->moved = PM_MOVED_RSS;
        break;

    case PST_EV_TENSOR_ACQUIRE: {
        /* "uuuuu" tensor id, arm, dtype, n_elems, bytes */
        pm_op_t *o = op(m, PM_TENSOR_ALLOC);
        o->key = f[0];
        o->arm = (uint8_t)f[1];
        o->dtype = (uint8_t)f[2];
        o->n = f[3];
        o->bytes = f[4];
        o->stack = ev->stack;
        break;
    }
    case PST_EV_TENSOR_RELEASE:
        op(m, PM_TENSOR_FREE)->key = f[0];
        break;

    case PST_EV_POOL_CREATE: {
        /* "uSuu" pool id, name, arms, cap bytes */
        pm_pool_t *p = pool_get(m, f[0], 0);
        if (p) {
            p->cap = f[3];
            if (ev->str) snprintf(p->name, sizeof p->name, "%s", ev->str);
        }
        break;
    }
    case PST_EV_POOL_ACQUIRE: pool_acquire(m, ev); st->moved = PM_MOVED_POOL; break;
    case PST_EV_POOL_RECLAIM: pool_reclaim(m, ev); st->moved = PM_MOVED_POOL; break;
    case PST_EV_POOL_BACKING_ALLOC: case PST_EV_POOL_BACKING_FREE: {
        pm_pool_t *p = pool_get(m, f[0], 0);
        pm_op_t *o = op(m, PM_POOL_BACKING);
        o->pool = p ? pool_index(m, p) : UINT32_MAX;
        o->flags = ev->type == PST_EV_POOL_BACKING_FREE ? PM_F_FREED : 0;
        o->bytes = f[3];
        break;
    }

    case PST_EV_KVB_CREATE: {
        /* "uSuuuuuu" pool id, name, block_size, n_blocks, separate_kv, grow, max_blocks, slot bytes */
        pm_pool_t *p = pool_get(m, f[0], 1);
        if (!p) break;
        if (ev->str) snprintf(p->name, sizeof p->name, "%s", ev->str);
        p->n_blocks = f[3];
        p->block_bytes = f[7];
        /* a pool of blocks of no size (or of more tokens than a block can
         * count) holds nothing we could measure: its events are orphans */
        p->block_size = f[2] <= UINT32_MAX ? f[2] : 0;
        if (p->block_size && !m->kv_config_sent) {
            m->kv_config_sent = 1;
            pm_op_t *o = op(m, PM_KV_CONFIG);
            o->n = p->block_size;
            o->bytes = p->block_bytes;
            o->pool = pool_index(m, p);
        }
        break;
    }
    case PST_EV_KVB_ALLOC:  rc = kv_alloc(m, ev); st->moved = PM_MOVED_KV; break;
    case PST_EV_KVB_TOKENS: rc = kv_tokens(m, ev); st->moved = PM_MOVED_KV; break;
    case PST_EV_KVB_FREE:   rc = kv_free(m, ev); st->moved = PM_MOVED_KV; break;

    case PST_EV_MARK_POINT: case PST_EV_MARK_BEGIN: case PST_EV_MARK_END:
        rc = mark(m, ev);
        break;
    default:
        break;
    }
    return rc;
}

/* ---- the debug build's self-check ----------------------------------------------- */

#if PS_DEBUG
/* Peaks are taken while counting, so then none is below what is held now
 * (a mapping's peaks wait one event when peaks_due). */
static const char *check_peaks(const pm_model_t *m)
{
    if (!m->counting) return NULL;
    for (size_t i = 0; i < m->n_pools; i++) {
        const pm_pool_t *p = &m->pools[i];
        if (p->peak_out < p->outstanding || p->peak_cached < p->cached)
            return "a buffer pool holds more than its peak while counting";
    }
    if (m->rss_samples && m->peak_rss < m->rss) return "RSS is above its peak while counting";
    const pm_maps_t *t = &m->mt;
    uint64_t total = t->anon + t->file, committed = total - (t->reserved < total ? t->reserved : total);
    if (!m->peaks_due && (t->peak_anon < t->anon || t->peak_file < t->file || t->peak_total < total ||
                          t->peak_reserved < t->reserved || t->peak_arena < t->arena ||
                          t->peak_committed < committed))
        return "mapped memory is above its peak while counting";
    size_t it = 0;
    void *v;
    while (psc_map_next(&m->files, &it, NULL, &v)) {
        const filent_t *f = v;
        if (f->peak < f->bytes) return "a file's mapped bytes are above their peak while counting";
    }
    return NULL;
}

/* Every request slot the owner map names is live and names the owner back;
 * no slot is both live and free. */
static const char *check_requests(const pm_model_t *m)
{
    size_t live = 0;
    for (uint32_t o = 0; o < m->next_req; o++) {
        const kvreq_t *q = &m->req[o];
        if (!q->live) continue;
        live++;
        const uint32_t *v = psc_map_get_sz(&m->owners, q->id, sizeof(uint32_t));
        if (!v || *v != o) return "a live request slot is not its owner's";
    }
    if (live != psc_map_count(&m->owners)) return "the owner map and the live request slots differ";
    for (size_t i = 0; i < m->n_free_req; i++)
        if (m->free_req[i] >= m->next_req || m->req[m->free_req[i]].live)
            return "a free request slot is live";
    return NULL;
}

/* Each KV pool's blocks and tokens, and each request's, are the sums over
 * the blocks it holds. sums: 2 per pool then 2 per request slot, zeroed. */
static const char *check_kv(const pm_model_t *m, uint64_t *sums)
{
    uint64_t *ps = sums, *rs = sums + 2 * m->n_pools;
    size_t it = 0;
    uint64_t key;
    void *v;
    while (psc_map_next(&m->blocks, &it, &key, &v)) {
        const kvblk_t *b = v;
        uint64_t ix = (key >> 32) - 1;
        if ((key >> 32) == 0 || ix >= m->n_pools || !m->pools[ix].kv)
            return "a KV block belongs to no KV pool";
        if (b->owner >= m->next_req || !m->req[b->owner].live)
            return "a KV block is held by a request that is over";
        ps[2 * ix]++;
        ps[2 * ix + 1] += b->n_used;
        rs[2 * b->owner]++;
        if (b->counts) rs[2 * b->owner + 1] += b->n_used;
    }
    for (size_t i = 0; i < m->n_pools; i++)
        if (m->pools[i].kv && (m->pools[i].blocks != ps[2 * i] || m->pools[i].tokens != ps[2 * i + 1]))
            return "a KV pool's blocks or tokens differ from the sum over its blocks";
    for (uint32_t o = 0; o < m->next_req; o++)
        if (m->req[o].live && (m->req[o].blocks != rs[2 * o] || m->req[o].tokens != rs[2 * o + 1]))
            return "a request's blocks or tokens differ from the sum over its blocks";
    return NULL;
}

static const char *model_check(const pm_model_t *m)
{
    if (m->n_ops > sizeof m->ops / sizeof m->ops[0]) return "one event made more operations than fit";
    if (m->mt.n_live != psc_map_count(&m->maps)) return "the live-mapping count differs from the table";
    const char *why = check_peaks(m);
    if (!why) why = check_requests(m);
    if (why) return why;
    uint64_t *sums = calloc(2 * (m->n_pools + m->next_req) + 1, sizeof *sums);
    if (!sums) return NULL;            /* nothing to count with: no verdict */
    why = check_kv(m, sums);
    free(sums);
    return why;
}
#endif

int pm_event(pm_model_t *m, const pst_event_t *ev, pm_step_t *st)
{
    int rc = 0;
    m->n_ops = 0;
    st->call = -1;
    st->call_bytes = 0;
    st->moved = 0;
    if (m->peaks_due && ev->type != PST_EV_MMAP_NAME) { m->peaks_due = 0; map_peaks(m); }
    if (!heap_event(m, ev, st)) rc = other_event(m, ev, st);
    st->n_ops = m->n_ops;
    st->ops = m->ops;
#if PS_DEBUG
    if (psc_debug_due(&m->dbg_ops, m->dbg_every))
        PSC_VERIFY("model", NULL, model_check(m));
#endif
    return rc;
}

/* ---- state -------------------------------------------------------------------- */

const pm_pool_t *pm_pools(const pm_model_t *m, size_t *n)
{
    *n = m->n_pools;
    return m->pools;
}

const pm_maps_t *pm_maps(const pm_model_t *m)
{
    if (m->peaks_due) {   /* the last event was that MMAP: its peaks are due now */
        pm_model_t *w = (pm_model_t *)m;
        w->peaks_due = 0;
        map_peaks(w);
    }
    return &m->mt;
}

void pm_pool_totals(const pm_model_t *m, uint64_t *outstanding, uint64_t *cached)
{
    *outstanding = m->pool_out;
    *cached = m->pool_cached;
}

void pm_kv_totals(const pm_model_t *m, uint64_t *blocks, uint64_t *tokens, uint64_t *capacity)
{
    uint64_t b = 0, t = 0, c = 0;
    for (size_t i = 0; i < m->n_pools; i++) {
        const pm_pool_t *p = &m->pools[i];
        if (!p->kv) continue;
        b += p->blocks;
        t += p->tokens;
        c += p->blocks * p->block_size;
    }
    *blocks = b;
    *tokens = t;
    *capacity = c;
}

int pm_kv_used(const pm_model_t *m, uint64_t pool_id, uint64_t block, uint32_t *n_used)
{
    for (size_t i = 0; i < m->n_pools; i++) {
        if (!m->pools[i].kv || m->pools[i].id != pool_id || block > UINT32_MAX) continue;
        const kvblk_t *b = psc_map_get_sz(&m->blocks, kv_key((uint32_t)i, block), sizeof(kvblk_t));
        if (!b) return 0;
        *n_used = b->n_used;
        return 1;
    }
    return 0;
}

uint64_t pm_kv_orphans(const pm_model_t *m) { return m->kv_orphans; }

void pm_rss(const pm_model_t *m, uint64_t *now, uint64_t *peak, uint64_t *peak_t, uint64_t *samples)
{
    *now = m->rss;
    *peak = m->peak_rss;
    *peak_t = m->peak_rss_t;
    *samples = m->rss_samples;
}

static int by_peak(const void *a, const void *b)
{
    const pm_file_map_t *x = a, *y = b;
    return x->peak < y->peak ? 1 : x->peak > y->peak ? -1 : (x->name > y->name) - (x->name < y->name);
}

size_t pm_file_maps(const pm_model_t *m, pm_file_map_t *out, size_t cap)
{
    size_t n = psc_map_count(&m->files), k = 0, it = 0;
    pm_file_map_t *all = n ? malloc(n * sizeof *all) : NULL;
    if (!all) return 0;
    uint64_t key;
    void *v;
    while (psc_map_next(&m->files, &it, &key, &v)) {
        const filent_t *f = v;
        all[k++] = (pm_file_map_t){ (uint32_t)key, f->bytes, f->peak };
    }
    qsort(all, k, sizeof *all, by_peak);
    if (k > cap) k = cap;
    memcpy(out, all, k * sizeof *out);
    free(all);
    return k;
}

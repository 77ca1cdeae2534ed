/* bufpool.c — the buffer pool (see bufpool.h and docs/DESIGN.md,
 * "Buffer pool").
 *
 * What: refcounted buffers handed out from two size-rounded free lists (the
 * f32 arm in elements, the 64-byte aligned byte-slab arm in bytes) that
 * share one cap on cached bytes. A released buffer goes back to its arm's
 * free list, or is destroyed when it alone exceeds the cap or caching it
 * would exceed the cap.
 *
 * Why this index: read literally, the rule is one list sorted by length
 * and a first-fit scan, which is O(cached buffers) per acquire and release.
 * We keep exactly the same selection (smallest cached length >= the rounded
 * request; LIFO among equal lengths) but index it:
 *
 *  - Rounded lengths are discrete (f32: 1,2,4..1024 then multiples of 1024;
 *    slab: multiples of 4096), so each length maps to one size class. The
 *    first BP_NCLASS classes of each arm (f32 up to ~16 MiB, slabs up to
 *    16 MiB: every transient of a small model) are an array of LIFO stacks
 *    plus a two-level bitmap (64 words + one summary word): smallest fit is
 *    two count-trailing-zeros, push and pop are O(1).
 *  - Longer lengths live in an intrusive AVL tree keyed by length. The tree
 *    node for a length is the OLDEST cached buffer of that length; newer
 *    ones are stacked on it (node->stack, then ->below). Pops take the stack
 *    first, so the node itself leaves last and LIFO order holds exactly.
 *    O(log distinct lengths).
 *  - Index links live in the buffer header itself, so caching and hitting
 *    never allocate bookkeeping: the meta allocator is called only for the
 *    header of a brand-new buffer (and a few headers of destroyed buffers
 *    are kept as spares for the next miss).
 *
 * Concurrency: one mutex guards the free lists, the counters and the
 * observer. The refcount is atomic, so views may be released from any
 * thread; only the last release takes the lock. On a miss the lock is
 * dropped while the allocators run, then re-taken to publish the buffer,
 * update the counters and emit BACKING_ALLOC + ACQUIRE. The outstanding
 * count is an atomic written only under the lock (a plain load+store, no
 * locked instruction), so bp_outstanding() can read it without the lock.
 *
 * The pool never dereferences a data pointer: the replay tool runs this
 * code over a simulated backing store that returns fake addresses.
 */
#include "poolscope/bufpool.h"

#include <assert.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define BP_HAVE_SINGLE_THREADED 1
#endif
#endif

#ifndef PS_DEBUG
#define PS_DEBUG 0
#endif
#if PS_DEBUG
#define BP_ASSERT(x) assert(x)
#else
#define BP_ASSERT(x) ((void)0)
#endif

#define BP_NCLASS 4096                /* direct size classes per arm */
#define BP_NWORDS (BP_NCLASS / 64)    /* == 64: one summary word */
#define BP_SPARE_MAX 64               /* spare headers kept for misses */

enum { ST_OUT = 1, ST_CACHED = 2 };

struct bp_buf {
    /* First cache line: what acquire and release touch. */
    void *data;
    size_t len;            /* granted length, arm units (the index key) */
    size_t bytes;          /* granted bytes */
    bp_buf_t *below;       /* stacked: next older buffer of the same length */
    bp_pool_t *pool;
    _Atomic uint32_t refs;
    uint8_t arm, dtype, state;
    int8_t height;         /* AVL height when a tree node */
    size_t req_bytes;      /* the current (or last) lease */
    uint64_t stamp;        /* release clock when cached (LIFO check) */
    /* Second line: events, the tree, the walker. */
    size_t n_elems, req_len;
    uint64_t id;
    bp_buf_t *stack;       /* tree node: newest buffer stacked on it */
    bp_buf_t *left, *right;
    uint64_t mark;         /* bp_check epoch */
    bp_buf_t *all_prev, *all_next;   /* every live header of the pool */
};

typedef struct bp_index {
    bp_arm_stats_t st;
    bp_buf_t *tree;                /* AVL of longer lengths */
    uint64_t summary;              /* bit w: words[w] != 0 */
    uint64_t words[BP_NWORDS];     /* bit c: heads[c] != NULL */
    bp_buf_t *heads[BP_NCLASS];    /* LIFO stack per class */
} bp_index_t;

struct bp_pool {
    pthread_mutex_t lock;
    atomic_size_t outstanding;     /* written under the lock only */
    bp_observe_fn observe;
    void *observe_ctx;
    bp_allocator_t backing, meta;
    size_t cap;
    uint64_t seq, next_id, clock, epoch, failed;
    size_t cached_bytes, peak_cached;
    size_t out_bufs, peak_out_bufs, out_bytes, peak_out_bytes, req_bytes;
    size_t peak_reserved;
    double frag_at_peak;
    int detached;                  /* bp_destroy returned PSC_EBUSY */
    bp_buf_t *all;
    bp_buf_t *spare;
    size_t nspare;
    char name[64];
    bp_index_t idx[BP_ARM_COUNT];
};

/* --- the lock ------------------------------------------------------------ */

/* While the process is single-threaded nobody can race with us, so the
 * mutex is skipped -- the same test glibc's malloc makes. Once a thread
 * exists (pthread_create clears the flag before the thread runs) every
 * caller takes the mutex. The decision is kept in `locked` so lock and
 * unlock always pair. */
static inline int pool_lock(bp_pool_t *p)
{
#ifdef BP_HAVE_SINGLE_THREADED
    if (__libc_single_threaded)
        return 0;
#endif
    pthread_mutex_lock(&p->lock);
    return 1;
}

static inline void pool_unlock(bp_pool_t *p, int locked)
{
    if (locked)
        pthread_mutex_unlock(&p->lock);
}

/* --- element types and rounding ------------------------------------------ */

static const struct { size_t blck, size; const char *name; } dtypes[BP_DT_COUNT] = {
    [BP_DT_F32]  = {1, 4, "f32"},   [BP_DT_F16] = {1, 2, "f16"},
    [BP_DT_BF16] = {1, 2, "bf16"},  [BP_DT_I8]  = {1, 1, "i8"},
    [BP_DT_U8]   = {1, 1, "u8"},    [BP_DT_I32] = {1, 4, "i32"},
    [BP_DT_Q8_0] = {32, 34, "q8_0"}, [BP_DT_RAW] = {1, 1, "raw"},
};

size_t bp_dtype_bytes(bp_dtype_t dt, size_t n)
{
    if ((unsigned)dt >= BP_DT_COUNT || n == 0)
        return 0;
    size_t blocks = n / dtypes[dt].blck + (n % dtypes[dt].blck != 0);
    if (blocks > SIZE_MAX / dtypes[dt].size)
        return 0;
    return blocks * dtypes[dt].size;
}

const char *bp_dtype_name(bp_dtype_t dt)
{
    return (unsigned)dt < BP_DT_COUNT ? dtypes[dt].name : "?";
}

const char *bp_arm_name(bp_arm_t arm)
{
    return arm == BP_ARM_F32 ? "f32" : arm == BP_ARM_SLAB ? "slab" : "?";
}

size_t bp_round_f32(size_t n)
{
    if (n <= 1)
        return 1;
    if (n <= 1024)
        return (size_t)1 << (64 - __builtin_clzll((unsigned long long)(n - 1)));
    if (n > SIZE_MAX - 1023)
        return 0;
    return (n + 1023) & ~(size_t)1023;
}

size_t bp_round_slab(size_t bytes)
{
    if (bytes == 0)
        return BP_SLAB_QUANTUM;
    if (bytes > SIZE_MAX - (BP_SLAB_QUANTUM - 1))
        return 0;
    return (bytes + BP_SLAB_QUANTUM - 1) & ~(size_t)(BP_SLAB_QUANTUM - 1);
}

/* Size class of a rounded length: f32 1..1024 -> 0..10, 1024*m -> 9+m;
 * slab 4096*m -> m-1. Classes >= BP_NCLASS go to the tree. */
static inline size_t class_of(int arm, size_t len)
{
    if (arm == BP_ARM_SLAB)
        return len / BP_SLAB_QUANTUM - 1;
    if (len <= 1024)
        return (size_t)__builtin_ctzll((unsigned long long)len);
    return 9 + len / 1024;
}

/* --- default allocators ----------------------------------------------------- */

static void *def_data_alloc(void *ctx, size_t bytes, size_t align)
{
    (void)ctx;
    void *p = NULL;
    if (align < sizeof(void *))
        align = sizeof(void *);
    return posix_memalign(&p, align, bytes ? bytes : 1) == 0 ? p : NULL;
}

static void *def_meta_alloc(void *ctx, size_t bytes, size_t align)
{
    (void)ctx;
    (void)align;   /* never above alignof(max_align_t) here */
    return malloc(bytes);
}

static void def_free(void *ctx, void *p, size_t bytes)
{
    (void)ctx;
    (void)bytes;
    free(p);
}

/* --- the AVL tree of long lengths ------------------------------------------ */

static inline int ht(const bp_buf_t *n) { return n ? n->height : 0; }

static inline void fix_height(bp_buf_t *n)
{
    int l = ht(n->left), r = ht(n->right);
    n->height = (int8_t)((l > r ? l : r) + 1);
}

static bp_buf_t *rot_right(bp_buf_t *n)
{
    bp_buf_t *l = n->left;
    n->left = l->right;
    l->right = n;
    fix_height(n);
    fix_height(l);
    return l;
}

static bp_buf_t *rot_left(bp_buf_t *n)
{
    bp_buf_t *r = n->right;
    n->right = r->left;
    r->left = n;
    fix_height(n);
    fix_height(r);
    return r;
}

static bp_buf_t *rebalance(bp_buf_t *n)
{
    fix_height(n);
    int b = ht(n->left) - ht(n->right);
    if (b > 1) {
        if (ht(n->left->left) < ht(n->left->right))
            n->left = rot_left(n->left);
        return rot_right(n);
    }
    if (b < -1) {
        if (ht(n->right->right) < ht(n->right->left))
            n->right = rot_right(n->right);
        return rot_left(n);
    }
    return n;
}

/* h->len is not in the tree yet. */
static bp_buf_t *avl_insert(bp_buf_t *n, bp_buf_t *h)
{
    if (!n)
        return h;
    if (h->len < n->len)
        n->left = avl_insert(n->left, h);
    else
        n->right = avl_insert(n->right, h);
    return rebalance(n);
}

static bp_buf_t *avl_remove_min(bp_buf_t *n, bp_buf_t **min)
{
    if (!n->left) {
        *min = n;
        return n->right;
    }
    n->left = avl_remove_min(n->left, min);
    return rebalance(n);
}

/* Unlink the node keyed `len` (present) and relink its neighbours. */
static bp_buf_t *avl_remove(bp_buf_t *n, size_t len)
{
    if (len < n->len) {
        n->left = avl_remove(n->left, len);
    } else if (len > n->len) {
        n->right = avl_remove(n->right, len);
    } else {
        bp_buf_t *l = n->left, *r = n->right, *m;
        if (!r)
            return l;
        r = avl_remove_min(r, &m);
        m->left = l;
        m->right = r;
        return rebalance(m);
    }
    return rebalance(n);
}

/* --- the index: take the smallest fit, put back LIFO ------------------------ */

static inline void class_set(bp_index_t *x, size_t c)
{
    x->words[c >> 6] |= (uint64_t)1 << (c & 63);
    x->summary |= (uint64_t)1 << (c >> 6);
}

static inline void class_clear(bp_index_t *x, size_t c)
{
    x->words[c >> 6] &= ~((uint64_t)1 << (c & 63));
    if (!x->words[c >> 6])
        x->summary &= ~((uint64_t)1 << (c >> 6));
}

/* Lowest non-empty class >= c (c < BP_NCLASS), or BP_NCLASS. */
static inline size_t class_find(const bp_index_t *x, size_t c)
{
    size_t w = c >> 6;
    uint64_t bits = x->words[w] & (~(uint64_t)0 << (c & 63));
    if (bits)
        return (w << 6) + (size_t)__builtin_ctzll(bits);
    uint64_t s = w + 1 < BP_NWORDS ? x->summary & (~(uint64_t)0 << (w + 1)) : 0;
    if (!s)
        return BP_NCLASS;
    w = (size_t)__builtin_ctzll(s);
    return (w << 6) + (size_t)__builtin_ctzll(x->words[w]);
}

static bp_buf_t *index_take(bp_index_t *x, size_t len, size_t cls)
{
    if (cls < BP_NCLASS) {
        size_t c = class_find(x, cls);
        if (c < BP_NCLASS) {
            bp_buf_t *h = x->heads[c];
            x->heads[c] = h->below;
            if (!h->below)
                class_clear(x, c);
            return h;
        }
    }
    bp_buf_t *n = x->tree, *best = NULL;
    while (n) {
        if (n->len >= len) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    if (!best)
        return NULL;
    if (best->stack) {
        bp_buf_t *h = best->stack;
        best->stack = h->below;
        return h;
    }
    x->tree = avl_remove(x->tree, best->len);
    return best;
}

static void index_put(bp_index_t *x, bp_buf_t *h, size_t cls)
{
    if (cls < BP_NCLASS) {
        h->below = x->heads[cls];
        x->heads[cls] = h;
        class_set(x, cls);
        return;
    }
    for (bp_buf_t *n = x->tree; n; n = h->len < n->len ? n->left : n->right) {
        if (n->len == h->len) {
            h->below = n->stack;
            n->stack = h;
            return;
        }
    }
    h->left = h->right = h->stack = h->below = NULL;
    h->height = 1;
    x->tree = avl_insert(x->tree, h);
}

/* --- events and counters ------------------------------------------------ */

static void emit(bp_pool_t *p, bp_event_kind_t kind, const bp_buf_t *h, int hit, int cached)
{
    int lease_ev = kind == BP_EV_ACQUIRE || kind == BP_EV_RECLAIM;
    const bp_event_t ev = {
        .kind = kind,
        .seq = ++p->seq,
        .arm = (bp_arm_t)h->arm,
        .dtype = (bp_dtype_t)h->dtype,
        .buf_id = h->id,
        .n_elems = lease_ev ? h->n_elems : 0,
        .req_len = lease_ev ? h->req_len : 0,
        .granted_len = h->len,
        .req_bytes = lease_ev ? h->req_bytes : 0,
        .granted_bytes = h->bytes,
        .hit = hit,
        .cached = cached,
        .data = h->data,
        .bytes = lease_ev ? 0 : h->bytes,
    };
    p->observe(p->observe_ctx, &ev);
}

static inline void outstanding_add(bp_pool_t *p, long d)
{
    size_t v = atomic_load_explicit(&p->outstanding, memory_order_relaxed);
    atomic_store_explicit(&p->outstanding, v + (size_t)d, memory_order_relaxed);
}

/* Hand h out for a lease: refcount 1 and the outstanding counters. */
static void lease(bp_pool_t *p, bp_index_t *x, bp_buf_t *h, bp_dtype_t dt,
                  size_t n_elems, size_t req_len, size_t req_bytes)
{
    h->state = ST_OUT;
    h->dtype = (uint8_t)dt;
    h->n_elems = n_elems;
    h->req_len = req_len;
    h->req_bytes = req_bytes;
    atomic_store_explicit(&h->refs, 1, memory_order_relaxed);

    x->st.acquires++;
    x->st.outstanding_buffers++;
    x->st.outstanding_bytes += h->bytes;
    x->st.requested_bytes += req_bytes;
    if (x->st.outstanding_bytes > x->st.peak_outstanding_bytes)
        x->st.peak_outstanding_bytes = x->st.outstanding_bytes;

    outstanding_add(p, 1);
    p->out_bufs++;
    p->out_bytes += h->bytes;
    p->req_bytes += req_bytes;
    if (p->out_bufs > p->peak_out_bufs)
        p->peak_out_bufs = p->out_bufs;
    if (p->out_bytes > p->peak_out_bytes) {
        p->peak_out_bytes = p->out_bytes;
        p->frag_at_peak = (double)(p->out_bytes - p->req_bytes) / (double)p->out_bytes;
    }
    if (p->out_bytes + p->cached_bytes > p->peak_reserved)
        p->peak_reserved = p->out_bytes + p->cached_bytes;
}

static void unlease(bp_pool_t *p, bp_index_t *x, bp_buf_t *h)
{
    x->st.outstanding_buffers--;
    x->st.outstanding_bytes -= h->bytes;
    x->st.requested_bytes -= h->req_bytes;
    outstanding_add(p, -1);
    p->out_bufs--;
    p->out_bytes -= h->bytes;
    p->req_bytes -= h->req_bytes;
}

static void all_link(bp_pool_t *p, bp_buf_t *h)
{
    h->all_prev = NULL;
    h->all_next = p->all;
    if (p->all)
        p->all->all_prev = h;
    p->all = h;
}

static void all_unlink(bp_pool_t *p, bp_buf_t *h)
{
    if (h->all_prev)
        h->all_prev->all_next = h->all_next;
    else
        p->all = h->all_next;
    if (h->all_next)
        h->all_next->all_prev = h->all_prev;
}

/* Keep a header as a spare (under the lock); returns 0 if the caller must
 * free it instead. */
static int spare_keep(bp_pool_t *p, bp_buf_t *h)
{
    if (p->nspare >= BP_SPARE_MAX || p->detached)
        return 0;
    h->below = p->spare;
    p->spare = h;
    p->nspare++;
    return 1;
}

/* --- create / destroy -------------------------------------------------------- */

bp_config_t bp_config_default(void)
{
    bp_config_t c;
    memset(&c, 0, sizeof c);
    c.max_cached_bytes = BP_DEFAULT_MAX_CACHED_BYTES;
    return c;
}

static int fill_allocator(bp_allocator_t *dst, const bp_allocator_t *src,
                          void *(*def_alloc)(void *, size_t, size_t))
{
    if (!src->alloc != !src->free)
        return PSC_EINVAL;
    if (src->alloc) {
        *dst = *src;
    } else {
        dst->alloc = def_alloc;
        dst->free = def_free;
        dst->ctx = NULL;
    }
    return 0;
}

bp_pool_t *bp_create(const bp_config_t *cfg, int *err)
{
    bp_config_t def = bp_config_default();
    bp_allocator_t backing, meta;
    int e;
    if (!cfg)
        cfg = &def;
    if ((e = fill_allocator(&backing, &cfg->backing, def_data_alloc)) != 0 ||
        (e = fill_allocator(&meta, &cfg->meta, def_meta_alloc)) != 0) {
        if (err)
            *err = e;
        return NULL;
    }
    bp_pool_t *p = meta.alloc(meta.ctx, sizeof *p, alignof(bp_pool_t));
    if (!p) {
        if (err)
            *err = PSC_ENOMEM;
        return NULL;
    }
    memset(p, 0, sizeof *p);
    /* A plain mutex: glibc's fast path for the default type is the
     * shortest (an adaptive mutex measured slower uncontended). */
    e = pthread_mutex_init(&p->lock, NULL);
    if (e != 0) {
        meta.free(meta.ctx, p, sizeof *p);
        if (err)
            *err = PSC_ENOMEM;
        return NULL;
    }
    atomic_init(&p->outstanding, 0);
    p->backing = backing;
    p->meta = meta;
    p->cap = cfg->max_cached_bytes;
    p->observe = cfg->observe;
    p->observe_ctx = cfg->observe_ctx;
    if (cfg->name) {
        strncpy(p->name, cfg->name, sizeof p->name - 1);
        p->name[sizeof p->name - 1] = '\0';
    }
    if (err)
        *err = 0;
    return p;
}

static void free_pool_memory(bp_pool_t *p)
{
    bp_allocator_t meta = p->meta;
    pthread_mutex_destroy(&p->lock);
    meta.free(meta.ctx, p, sizeof *p);
}

/* Destroy a cached buffer during bp_destroy (lock held). */
static void destroy_cached(bp_pool_t *p, bp_buf_t *h)
{
    bp_index_t *x = &p->idx[h->arm];
    x->st.backing_frees++;
    x->st.cached_buffers--;
    x->st.cached_bytes -= h->bytes;
    p->cached_bytes -= h->bytes;
    if (p->observe)
        emit(p, BP_EV_BACKING_FREE, h, 0, 0);
    all_unlink(p, h);
    p->backing.free(p->backing.ctx, h->data, h->bytes);
    p->meta.free(p->meta.ctx, h, sizeof *h);
}

static void destroy_tree(bp_pool_t *p, bp_buf_t *n)
{
    while (n) {
        bp_buf_t *right = n->right;
        destroy_tree(p, n->left);
        for (bp_buf_t *h = n->stack, *next; h; h = next) {
            next = h->below;
            destroy_cached(p, h);
        }
        destroy_cached(p, n);
        n = right;
    }
}

int bp_destroy(bp_pool_t *p)
{
    if (!p)
        return 0;
    int locked = pool_lock(p);
    for (int a = 0; a < BP_ARM_COUNT; a++) {
        bp_index_t *x = &p->idx[a];
        for (size_t c = 0; c < BP_NCLASS; c++) {
            for (bp_buf_t *h = x->heads[c], *next; h; h = next) {
                next = h->below;
                destroy_cached(p, h);
            }
            x->heads[c] = NULL;
        }
        memset(x->words, 0, sizeof x->words);
        x->summary = 0;
        destroy_tree(p, x->tree);
        x->tree = NULL;
    }
    while (p->spare) {
        bp_buf_t *h = p->spare;
        p->spare = h->below;
        p->meta.free(p->meta.ctx, h, sizeof *h);
    }
    p->nspare = 0;
    size_t out = atomic_load_explicit(&p->outstanding, memory_order_relaxed);
    if (out) {
        /* The last release frees the pool (see bp_release). */
        p->detached = 1;
        p->observe = NULL;
        pool_unlock(p, locked);
        BP_ASSERT(out == 0 && "bp_destroy: buffers still outstanding");
        return PSC_EBUSY;
    }
    pool_unlock(p, locked);
    free_pool_memory(p);
    return 0;
}

/* --- acquire ------------------------------------------------------------- */

static bp_buf_t *acquire(bp_pool_t *p, bp_arm_t arm, bp_dtype_t dt, size_t n_elems,
                         size_t req_len, size_t req_bytes, size_t len, size_t bytes,
                         int *err)
{
    bp_index_t *x = &p->idx[arm];
    size_t cls = class_of(arm, len);

    int locked = pool_lock(p);
    if (p->detached) {
        pool_unlock(p, locked);
        if (err)
            *err = PSC_EINVAL;
        return NULL;
    }
    bp_buf_t *h = index_take(x, len, cls);
    if (h) {
        x->st.hits++;
        x->st.cached_buffers--;
        x->st.cached_bytes -= h->bytes;
        p->cached_bytes -= h->bytes;
        lease(p, x, h, dt, n_elems, req_len, req_bytes);
        if (p->observe)
            emit(p, BP_EV_ACQUIRE, h, 1, 0);
        pool_unlock(p, locked);
        if (err)
            *err = 0;
        return h;
    }
    h = p->spare;
    if (h) {
        p->spare = h->below;
        p->nspare--;
    }
    pool_unlock(p, locked);

    /* Miss: allocate without the lock. */
    if (!h)
        h = p->meta.alloc(p->meta.ctx, sizeof *h, alignof(bp_buf_t));
    void *data = h ? p->backing.alloc(p->backing.ctx, bytes, BP_ALIGN) : NULL;

    locked = pool_lock(p);
    if (!data) {
        p->failed++;
        int kept = h && spare_keep(p, h);
        pool_unlock(p, locked);
        if (h && !kept)
            p->meta.free(p->meta.ctx, h, sizeof *h);
        if (err)
            *err = PSC_ENOMEM;
        return NULL;
    }
    memset(h, 0, sizeof *h);
    h->data = data;
    h->len = len;
    h->bytes = bytes;
    h->pool = p;
    h->arm = (uint8_t)arm;
    h->id = ++p->next_id;
    all_link(p, h);
    x->st.misses++;
    x->st.backing_allocs++;
    lease(p, x, h, dt, n_elems, req_len, req_bytes);
    if (p->observe) {
        emit(p, BP_EV_BACKING_ALLOC, h, 0, 0);
        emit(p, BP_EV_ACQUIRE, h, 0, 0);
    }
    pool_unlock(p, locked);
    if (err)
        *err = 0;
    return h;
}

static bp_buf_t *fail(int *err, int e)
{
    if (err)
        *err = e;
    return NULL;
}

bp_buf_t *bp_acquire(bp_pool_t *p, size_t n, int *err)
{
    size_t len = bp_round_f32(n);
    if (!p || len == 0 || len > SIZE_MAX / sizeof(float))
        return fail(err, PSC_EINVAL);
    return acquire(p, BP_ARM_F32, BP_DT_F32, n, n, n * sizeof(float), len,
                   len * sizeof(float), err);
}

bp_buf_t *bp_acquire_typed(bp_pool_t *p, bp_dtype_t dt, size_t n, int *err)
{
    if (!p || (unsigned)dt >= BP_DT_COUNT)
        return fail(err, PSC_EINVAL);
    if (dt == BP_DT_F32)
        return bp_acquire(p, n, err);
    size_t req = bp_dtype_bytes(dt, n);
    if (n != 0 && req == 0)
        return fail(err, PSC_EINVAL);
    size_t len = bp_round_slab(req);
    if (len == 0)
        return fail(err, PSC_EINVAL);
    return acquire(p, BP_ARM_SLAB, dt, n, req, req, len, len, err);
}

bp_buf_t *bp_acquire_scratch(bp_pool_t *p, size_t bytes, int *err)
{
    return bp_acquire_typed(p, BP_DT_RAW, bytes, err);
}

/* --- retain / release / reclaim ------------------------------------------ */

int bp_retain(bp_buf_t *h)
{
    if (!h)
        return PSC_EINVAL;
    uint32_t old = atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    if (old == 0) {
        atomic_fetch_sub_explicit(&h->refs, 1, memory_order_relaxed);
        BP_ASSERT(!"bp_retain on a released buffer");
        return PSC_EINVAL;
    }
    return 0;
}

int bp_release(bp_buf_t *h)
{
    if (!h)
        return PSC_EINVAL;
    /* Sole holder (the common case for a transient): nobody else can retain
     * or release concurrently, so a plain store does; the acquire load pairs
     * with the release decrements of earlier holders. Otherwise decrement. */
    uint32_t old = atomic_load_explicit(&h->refs, memory_order_acquire);
    if (old == 1) {
        atomic_store_explicit(&h->refs, 0, memory_order_relaxed);
    } else if (old != 0) {
        old = atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel);
        if (old > 1)
            return 0;
        if (old == 0)
            atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    }
    if (old == 0) {
        BP_ASSERT(!"bp_release on a released buffer");
        return PSC_EINVAL;
    }

    /* Last reference: reclaim. */
    bp_pool_t *p = h->pool;
    bp_index_t *x = &p->idx[h->arm];
    int locked = pool_lock(p);
    unlease(p, x, h);
    /* Once the lock is dropped the pool may be destroyed by another thread
     * (it may see zero outstanding): copy what is needed after the unlock. */
    if (p->detached) {
        bp_allocator_t backing = p->backing, meta = p->meta;
        /* bp_destroy already ran: free straight to the backing store. */
        all_unlink(p, h);
        int last = atomic_load_explicit(&p->outstanding, memory_order_relaxed) == 0;
        pool_unlock(p, locked);
        backing.free(backing.ctx, h->data, h->bytes);
        meta.free(meta.ctx, h, sizeof *h);
        if (last)
            free_pool_memory(p);
        return 1;
    }
    if (h->bytes > p->cap || p->cached_bytes + h->bytes > p->cap) {
        bp_allocator_t backing = p->backing, meta = p->meta;
        x->st.destroyed_over_cap++;
        x->st.backing_frees++;
        if (p->observe) {
            emit(p, BP_EV_RECLAIM, h, 0, 0);
            emit(p, BP_EV_BACKING_FREE, h, 0, 0);
        }
        all_unlink(p, h);
        void *data = h->data;
        size_t bytes = h->bytes;
        int kept = spare_keep(p, h);
        pool_unlock(p, locked);
        /* Freed after the event, so a BACKING_ALLOC of the same address
         * always has a larger seq. */
        backing.free(backing.ctx, data, bytes);
        if (!kept)
            meta.free(meta.ctx, h, sizeof *h);
        return 1;
    }
    h->state = ST_CACHED;
    h->stamp = ++p->clock;
    index_put(x, h, class_of(h->arm, h->len));
    x->st.reclaims_cached++;
    x->st.cached_buffers++;
    x->st.cached_bytes += h->bytes;
    if (x->st.cached_bytes > x->st.peak_cached_bytes)
        x->st.peak_cached_bytes = x->st.cached_bytes;
    p->cached_bytes += h->bytes;
    if (p->cached_bytes > p->peak_cached)
        p->peak_cached = p->cached_bytes;
    if (p->observe)
        emit(p, BP_EV_RECLAIM, h, 0, 1);
    pool_unlock(p, locked);
    return 1;
}

/* --- accessors ---------------------------------------------------------- */

void *bp_data(const bp_buf_t *h) { return h ? h->data : NULL; }
float *bp_f32(const bp_buf_t *h) { return h && h->arm == BP_ARM_F32 ? h->data : NULL; }
size_t bp_len(const bp_buf_t *h) { return h ? h->len : 0; }
size_t bp_bytes(const bp_buf_t *h) { return h ? h->bytes : 0; }
size_t bp_requested_bytes(const bp_buf_t *h) { return h ? h->req_bytes : 0; }
bp_arm_t bp_arm(const bp_buf_t *h) { return h ? (bp_arm_t)h->arm : BP_ARM_F32; }
bp_dtype_t bp_dtype(const bp_buf_t *h) { return h ? (bp_dtype_t)h->dtype : BP_DT_F32; }
uint64_t bp_id(const bp_buf_t *h) { return h ? h->id : 0; }

uint32_t bp_refcount(const bp_buf_t *h)
{
    return h ? atomic_load_explicit(&((bp_buf_t *)h)->refs, memory_order_relaxed) : 0;
}

size_t bp_elems(const bp_buf_t *h)
{
    if (!h)
        return 0;
    if (h->arm == BP_ARM_F32)
        return h->len;
    return h->bytes / dtypes[h->dtype].size * dtypes[h->dtype].blck;
}

size_t bp_outstanding(const bp_pool_t *p)
{
    return p ? atomic_load_explicit(&((bp_pool_t *)p)->outstanding, memory_order_relaxed) : 0;
}

const char *bp_name(const bp_pool_t *p) { return p ? p->name : ""; }
size_t bp_max_cached_bytes(const bp_pool_t *p) { return p ? p->cap : 0; }

int bp_stats(const bp_pool_t *cp, bp_stats_t *out)
{
    if (!cp || !out)
        return PSC_EINVAL;
    bp_pool_t *p = (bp_pool_t *)cp;   /* the lock is mutable state */
    memset(out, 0, sizeof *out);
    int locked = pool_lock(p);
    for (int a = 0; a < BP_ARM_COUNT; a++) {
        const bp_arm_stats_t *s = &p->idx[a].st;
        out->arm[a] = *s;
        out->acquires += s->acquires;
        out->hits += s->hits;
        out->misses += s->misses;
        out->backing_allocs += s->backing_allocs;
        out->backing_frees += s->backing_frees;
        out->reclaims_cached += s->reclaims_cached;
        out->destroyed_over_cap += s->destroyed_over_cap;
        out->cached_buffers += s->cached_buffers;
    }
    out->failed_acquires = p->failed;
    out->cached_bytes = p->cached_bytes;
    out->peak_cached_bytes = p->peak_cached;
    out->outstanding_buffers = p->out_bufs;
    out->peak_outstanding_buffers = p->peak_out_bufs;
    out->outstanding_bytes = p->out_bytes;
    out->peak_outstanding_bytes = p->peak_out_bytes;
    out->requested_bytes = p->req_bytes;
    out->reserved_bytes = p->out_bytes + p->cached_bytes;
    out->peak_reserved_bytes = p->peak_reserved;
    out->internal_frag = p->out_bytes
        ? (double)(p->out_bytes - p->req_bytes) / (double)p->out_bytes : 0.0;
    out->internal_frag_at_peak = p->frag_at_peak;
    out->max_cached_bytes = p->cap;
    pool_unlock(p, locked);
    return 0;
}

/* --- invariant walker ------------------------------------------------------ */

typedef struct check_acc {
    size_t bufs, bytes;
} check_acc_t;

static int len_ok(int arm, size_t len, size_t bytes)
{
    if (arm == BP_ARM_F32)
        return len != 0 && bp_round_f32(len) == len && bytes == len * sizeof(float);
    return len != 0 && len % BP_SLAB_QUANTUM == 0 && bytes == len;
}

/* One cached buffer seen in the index: must be a live header of this pool
 * (marked `seen` by the list walk), not visited yet, cached, unreferenced. */
static int check_cached(bp_pool_t *p, bp_buf_t *h, int arm, size_t len, uint64_t seen,
                        uint64_t visit, check_acc_t *acc)
{
    if (h->mark != seen || h->pool != p || h->arm != arm || h->len != len ||
        h->state != ST_CACHED || atomic_load_explicit(&h->refs, memory_order_relaxed) != 0)
        return PSC_ECORRUPT;
    h->mark = visit;
    acc->bufs++;
    acc->bytes += h->bytes;
    return 0;
}

/* A LIFO stack: newest first, stamps strictly decreasing. */
static int check_stack(bp_pool_t *p, bp_buf_t *h, int arm, size_t len, uint64_t seen,
                       uint64_t visit, uint64_t *last_stamp, check_acc_t *acc)
{
    for (; h; h = h->below) {
        if (check_cached(p, h, arm, len, seen, visit, acc) != 0 || h->stamp >= *last_stamp)
            return PSC_ECORRUPT;
        *last_stamp = h->stamp;
    }
    return 0;
}

/* Returns the subtree height, or -1 when corrupt. Keys strictly inside
 * (lo, hi). */
static int check_tree(bp_pool_t *p, bp_buf_t *n, int arm, size_t lo, size_t hi, uint64_t seen,
                      uint64_t visit, check_acc_t *acc, int depth)
{
    if (!n)
        return 0;
    if (depth > 120 || n->len <= lo || n->len >= hi || class_of(arm, n->len) < BP_NCLASS)
        return -1;
    int l = check_tree(p, n->left, arm, lo, n->len, seen, visit, acc, depth + 1);
    int r = check_tree(p, n->right, arm, n->len, hi, seen, visit, acc, depth + 1);
    if (l < 0 || r < 0 || l - r > 1 || r - l > 1 || n->height != (l > r ? l : r) + 1)
        return -1;
    uint64_t stamp = UINT64_MAX;
    if (check_stack(p, n->stack, arm, n->len, seen, visit, &stamp, acc) != 0)
        return -1;
    /* The node is the oldest of its length. */
    if (n->mark != seen || n->stamp >= stamp ||
        check_cached(p, n, arm, n->len, seen, visit, acc) != 0)
        return -1;
    return n->height;
}

static int check_locked(bp_pool_t *p)
{
    uint64_t seen = ++p->epoch, visit = ++p->epoch;
    size_t out_bufs = 0, out_bytes = 0, req = 0, cached_live = 0;
    size_t arm_out[BP_ARM_COUNT] = {0}, arm_out_bytes[BP_ARM_COUNT] = {0};

    /* Every live header, once. A cycle meets its own mark. */
    for (bp_buf_t *h = p->all, *prev = NULL; h; prev = h, h = h->all_next) {
        if (h->mark == seen || h->all_prev != prev || h->pool != p ||
            h->arm >= BP_ARM_COUNT || !len_ok(h->arm, h->len, h->bytes))
            return PSC_ECORRUPT;
        h->mark = seen;
        if (h->state == ST_OUT) {
            out_bufs++;
            out_bytes += h->bytes;
            req += h->req_bytes;
            arm_out[h->arm]++;
            arm_out_bytes[h->arm] += h->bytes;
            if (h->req_bytes > h->bytes)
                return PSC_ECORRUPT;
        } else if (h->state == ST_CACHED) {
            cached_live++;
        } else {
            return PSC_ECORRUPT;
        }
    }
    if (out_bufs != p->out_bufs || out_bytes != p->out_bytes || req != p->req_bytes ||
        out_bufs != atomic_load_explicit(&p->outstanding, memory_order_relaxed))
        return PSC_ECORRUPT;

    size_t total_bufs = 0, total_bytes = 0;
    for (int a = 0; a < BP_ARM_COUNT; a++) {
        bp_index_t *x = &p->idx[a];
        check_acc_t acc = {0, 0};
        size_t prev_len = 0;
        if (arm_out[a] != x->st.outstanding_buffers ||
            arm_out_bytes[a] != x->st.outstanding_bytes)
            return PSC_ECORRUPT;
        for (size_t w = 0; w < BP_NWORDS; w++)
            if (((x->summary >> w) & 1) != (x->words[w] != 0))
                return PSC_ECORRUPT;
        for (size_t c = 0; c < BP_NCLASS; c++) {
            bp_buf_t *h = x->heads[c];
            if (((x->words[c >> 6] >> (c & 63)) & 1) != (h != NULL))
                return PSC_ECORRUPT;
            if (!h)
                continue;
            /* Sorted: one length per class, increasing with the class. */
            if (class_of(a, h->len) != c || h->len <= prev_len)
                return PSC_ECORRUPT;
            prev_len = h->len;
            uint64_t stamp = UINT64_MAX;
            if (check_stack(p, h, a, h->len, seen, visit, &stamp, &acc) != 0)
                return PSC_ECORRUPT;
        }
        if (check_tree(p, x->tree, a, prev_len, SIZE_MAX, seen, visit, &acc, 0) < 0)
            return PSC_ECORRUPT;
        if (acc.bufs != x->st.cached_buffers || acc.bytes != x->st.cached_bytes)
            return PSC_ECORRUPT;
        total_bufs += acc.bufs;
        total_bytes += acc.bytes;
    }
    if (total_bufs != cached_live || total_bytes != p->cached_bytes)
        return PSC_ECORRUPT;
    if (!p->detached && p->cached_bytes > p->cap)
        return PSC_ECORRUPT;
    return 0;
}

int bp_check(const bp_pool_t *cp)
{
    if (!cp)
        return PSC_EINVAL;
    bp_pool_t *p = (bp_pool_t *)cp;   /* lock and marks are mutable state */
    int locked = pool_lock(p);
    int rc = check_locked(p);
    pool_unlock(p, locked);
    return rc;
}

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

#include "bufpool_int.h"

/* Misuse the header promises to assert on in the debug build. */
#define BP_MISUSE(p, what) PSC_ASSERT("buffer pool", (p)->name, 0, what)

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

static inline void pool_unlock_plain(bp_pool_t *p, int locked)
{
    if (locked)
        pthread_mutex_unlock(&p->lock);
}

static const char *check_locked(bp_pool_t *p);

/* Every operation that changes the pool unlocks here: in the debug build
 * the walker runs first, still under the lock, so a broken invariant is
 * reported by the operation that broke it. */
static inline void pool_unlock(bp_pool_t *p, int locked)
{
#if PS_DEBUG
    if (psc_debug_due(&p->dbg_ops, p->dbg_every))
        PSC_VERIFY("buffer pool", p->name, check_locked(p));
#endif
    pool_unlock_plain(p, locked);
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
#if PS_DEBUG
    p->dbg_every = psc_debug_every();
#endif
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
        BP_MISUSE(p, "bp_destroy: buffers still outstanding");
        pool_unlock(p, locked);
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
        BP_MISUSE(h->pool, "bp_retain on a released buffer");
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
        BP_MISUSE(h->pool, "bp_release on a released buffer");
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
    pool_unlock_plain(p, locked);
    return 0;
}

/* --- invariant walker ------------------------------------------------------ */

/* Each check answers NULL when sound, or the invariant it found broken
 * (the debug build's abort message names it; bp_check says PSC_ECORRUPT). */

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
static const char *check_cached(bp_pool_t *p, bp_buf_t *h, int arm, size_t len, uint64_t seen,
                                uint64_t visit, check_acc_t *acc)
{
    if (h->mark == visit)
        return "a cached buffer is twice in the free lists";
    if (h->mark != seen || h->pool != p)
        return "a free-list entry is not a live buffer of this pool";
    if (h->arm != arm || h->len != len)
        return "a cached buffer sits under another arm or length";
    if (h->state != ST_CACHED || atomic_load_explicit(&h->refs, memory_order_relaxed) != 0)
        return "a free-list entry is not cached with no reference";
    h->mark = visit;
    acc->bufs++;
    acc->bytes += h->bytes;
    return NULL;
}

/* A LIFO stack: newest first, stamps strictly decreasing. */
static const char *check_stack(bp_pool_t *p, bp_buf_t *h, int arm, size_t len, uint64_t seen,
                               uint64_t visit, uint64_t *last_stamp, check_acc_t *acc)
{
    for (; h; h = h->below) {
        const char *why = check_cached(p, h, arm, len, seen, visit, acc);
        if (why)
            return why;
        if (h->stamp >= *last_stamp)
            return "a free list of one length is not newest first (LIFO)";
        *last_stamp = h->stamp;
    }
    return NULL;
}

/* The subtree's height into *height. Keys strictly inside (lo, hi). */
static const char *check_tree(bp_pool_t *p, bp_buf_t *n, int arm, size_t lo, size_t hi,
                              uint64_t seen, uint64_t visit, check_acc_t *acc, int depth,
                              int *height)
{
    *height = 0;
    if (!n)
        return NULL;
    if (depth > 120)
        return "the tree of long lengths is deeper than an AVL tree can be";
    if (n->len <= lo || n->len >= hi || class_of(arm, n->len) < BP_NCLASS)
        return "the tree of long lengths is not sorted above the size classes";
    int l, r;
    const char *why = check_tree(p, n->left, arm, lo, n->len, seen, visit, acc, depth + 1, &l);
    if (!why)
        why = check_tree(p, n->right, arm, n->len, hi, seen, visit, acc, depth + 1, &r);
    if (why)
        return why;
    if (l - r > 1 || r - l > 1 || n->height != (l > r ? l : r) + 1)
        return "the tree of long lengths is not AVL-balanced";
    uint64_t stamp = UINT64_MAX;
    if ((why = check_stack(p, n->stack, arm, n->len, seen, visit, &stamp, acc)) != NULL)
        return why;
    /* The node is the oldest of its length. */
    if (n->mark == seen && n->stamp >= stamp)
        return "a tree node is not the oldest buffer of its length";
    if ((why = check_cached(p, n, arm, n->len, seen, visit, acc)) != NULL)
        return why;
    *height = n->height;
    return NULL;
}

/* The size classes and the tree of one arm, against its counters. */
static const char *check_arm(bp_pool_t *p, int a, uint64_t seen, uint64_t visit, check_acc_t *acc)
{
    bp_index_t *x = &p->idx[a];
    size_t prev_len = 0;
    for (size_t w = 0; w < BP_NWORDS; w++)
        if (((x->summary >> w) & 1) != (x->words[w] != 0))
            return "the summary word disagrees with the class bitmap";
    for (size_t c = 0; c < BP_NCLASS; c++) {
        if ((c & 63) == 0 && !x->words[c >> 6]) {
            /* A word of empty classes (most of them): one OR over its heads. */
            uintptr_t any = 0;
            for (size_t i = 0; i < 64; i++)
                any |= (uintptr_t)x->heads[c + i];
            if (any)
                return "the class bitmap disagrees with the free lists";
            c += 63;
            continue;
        }
        bp_buf_t *h = x->heads[c];
        if (((x->words[c >> 6] >> (c & 63)) & 1) != (h != NULL))
            return "the class bitmap disagrees with the free lists";
        if (!h)
            continue;
        /* Sorted: one length per class, increasing with the class. */
        if (class_of(a, h->len) != c || h->len <= prev_len)
            return "a free list holds a length of another size class";
        prev_len = h->len;
        uint64_t stamp = UINT64_MAX;
        const char *why = check_stack(p, h, a, h->len, seen, visit, &stamp, acc);
        if (why)
            return why;
    }
    int height;
    const char *why = check_tree(p, x->tree, a, prev_len, SIZE_MAX, seen, visit, acc, 0, &height);
    if (why)
        return why;
    if (acc->bufs != x->st.cached_buffers || acc->bytes != x->st.cached_bytes)
        return "an arm's cached counters differ from its free lists";
    return NULL;
}

static const char *check_locked(bp_pool_t *p)
{
    uint64_t seen = ++p->epoch, visit = ++p->epoch;
    size_t out_bufs = 0, out_bytes = 0, req = 0, cached_live = 0;
    size_t arm_out[BP_ARM_COUNT] = {0}, arm_out_bytes[BP_ARM_COUNT] = {0};

    /* Every live header, once. A cycle meets its own mark. */
    for (bp_buf_t *h = p->all, *prev = NULL; h; prev = h, h = h->all_next) {
        if (h->mark == seen || h->all_prev != prev)
            return "the list of live buffers is not a doubly linked list";
        if (h->pool != p || h->arm >= BP_ARM_COUNT || !len_ok(h->arm, h->len, h->bytes))
            return "a live buffer's pool, arm or rounded length is wrong";
        h->mark = seen;
        if (h->state == ST_OUT) {
            out_bufs++;
            out_bytes += h->bytes;
            req += h->req_bytes;
            arm_out[h->arm]++;
            arm_out_bytes[h->arm] += h->bytes;
            if (h->req_bytes > h->bytes)
                return "a lease asked for more bytes than its buffer has";
        } else if (h->state == ST_CACHED) {
            cached_live++;
        } else {
            return "a live buffer is neither out nor cached";
        }
    }
    if (out_bufs != p->out_bufs || out_bytes != p->out_bytes || req != p->req_bytes ||
        out_bufs != atomic_load_explicit(&p->outstanding, memory_order_relaxed))
        return "the outstanding counters differ from the buffers out";

    size_t total_bufs = 0, total_bytes = 0;
    for (int a = 0; a < BP_ARM_COUNT; a++) {
        if (arm_out[a] != p->idx[a].st.outstanding_buffers ||
            arm_out_bytes[a] != p->idx[a].st.outstanding_bytes)
            return "an arm's outstanding counters differ from its buffers out";
        check_acc_t acc = {0, 0};
        const char *why = check_arm(p, a, seen, visit, &acc);
        if (why)
            return why;
        total_bufs += acc.bufs;
        total_bytes += acc.bytes;
    }
    if (total_bufs != cached_live)
        return "a cached buffer is missing from the free lists";
    if (total_bytes != p->cached_bytes)
        return "cached bytes differ from the sum of the cached buffers";
    if (!p->detached && p->cached_bytes > p->cap)
        return "cached bytes exceed the cap";
    return NULL;
}

int bp_check(const bp_pool_t *cp)
{
    if (!cp)
        return PSC_EINVAL;
    bp_pool_t *p = (bp_pool_t *)cp;   /* lock and marks are mutable state */
    int locked = pool_lock(p);
    const char *why = check_locked(p);
    pool_unlock_plain(p, locked);
    return why ? PSC_ECORRUPT : 0;
}

/* kvcache.c — a per-request KV cache whose memory is block-pool blocks.
 *
 * What: appends K and V token rows for one owner.  Token t of a stream lives
 * in block table[t / block_size] at row t % block_size, so attention reads
 * keys and values straight from the blocks through the table (ids and slot
 * pointers side by side; no lock and no lookup per row).
 *
 * Why: a pool-backed cache (docs/DESIGN.md, "KV block pool") grows in
 * block-sized chunks through the pool — a new block only when the last one
 * is full — so every growth step shows up in the pool's counters, and
 * release returns the owner's blocks in one call.  The tables are the only
 * memory the cache owns; they use the pool's meta allocator so allocation
 * failure is testable here too.
 */
#include "poolscope/blockpool.h"

#include <string.h>

struct kvb_cache {
    kvb_pool_t       *pool;
    const kvb_alloc_t *a;
    int64_t           owner;
    kvb_format_t      format;
    int32_t           bs;
    size_t            stride;       /* bytes per row, 0 without storage */
    int64_t           len;          /* tokens in each stream */
    int32_t           n_blocks, cap;
    bool              live;         /* owner registered or holding blocks */
    int32_t          *ids[2];       /* [cap] block ids of K, V */
    void            **slots[2];     /* [cap] slot pointers of K, V */
};

static void *c_alloc(kvb_cache_t *c, size_t n) { return c->a->alloc(c->a->ctx, n); }
static void  c_free(kvb_cache_t *c, void *p)   { if (p) c->a->free(c->a->ctx, p); }

kvb_cache_t *kvb_cache_create(kvb_pool_t *pool, int64_t owner,
                              kvb_format_t format, int *err)
{
    int e = PSC_EINVAL;
    kvb_cache_t *c = NULL;
    if (!pool || owner < 0 || kvb_format_bits(format) < 0)
        goto fail;
    const kvb_alloc_t *a = kvb_pool_allocator(pool);
    c = a->alloc(a->ctx, sizeof *c);
    if (!c) {
        e = PSC_ENOMEM;
        goto fail;
    }
    memset(c, 0, sizeof *c);
    c->pool = pool;
    c->a = a;
    c->owner = owner;
    c->format = format;
    c->bs = kvb_block_size(pool);
    c->stride = kvb_row_bytes(pool, format);
    e = kvb_register_owner(pool, owner);
    if (e < 0) {
        a->free(a->ctx, c);
        c = NULL;
        goto fail;
    }
    c->live = true;
    if (err)
        *err = 0;
    return c;
fail:
    if (err)
        *err = e;
    return NULL;
}

void kvb_cache_destroy(kvb_cache_t *c)
{
    if (!c)
        return;
    if (c->live)
        (void)kvb_free_all(c->pool, c->owner);
    for (int s = 0; s < 2; s++) {
        c_free(c, c->ids[s]);
        c_free(c, c->slots[s]);
    }
    c->a->free(c->a->ctx, c);
}

/* Room for `want` table entries in all four arrays, or PSC_ENOMEM with the
 * tables unchanged. */
static int table_reserve(kvb_cache_t *c, int64_t want)
{
    if (want <= c->cap)
        return 0;
    if (want > INT32_MAX / 2)
        return PSC_ENOMEM;
    int32_t ncap = c->cap ? c->cap : 8;
    while (ncap < want)
        ncap *= 2;
    int32_t *ids[2] = { NULL, NULL };
    void **slots[2] = { NULL, NULL };
    for (int s = 0; s < 2; s++) {
        ids[s] = c_alloc(c, (size_t)ncap * sizeof *ids[s]);
        slots[s] = c_alloc(c, (size_t)ncap * sizeof *slots[s]);
        if (!ids[s] || !slots[s]) {
            for (int t = 0; t <= s; t++) {
                c_free(c, ids[t]);
                c_free(c, slots[t]);
            }
            return PSC_ENOMEM;
        }
    }
    for (int s = 0; s < 2; s++) {
        if (c->n_blocks) {
            memcpy(ids[s], c->ids[s], (size_t)c->n_blocks * sizeof *ids[s]);
            memcpy(slots[s], c->slots[s], (size_t)c->n_blocks * sizeof *slots[s]);
        }
        c_free(c, c->ids[s]);
        c_free(c, c->slots[s]);
        c->ids[s] = ids[s];
        c->slots[s] = slots[s];
    }
    c->cap = ncap;
    return 0;
}

/* Write n rows of stream s for tokens [from, from+n) into the table's blocks
 * (already checked out), or just count them without storage. */
static int put_rows(kvb_cache_t *c, int s, int64_t from, const unsigned char *rows, int64_t n)
{
    while (n > 0) {
        int32_t bi = (int32_t)(from / c->bs);
        int32_t off = (int32_t)(from % c->bs);
        int32_t run = c->bs - off;
        if (run > n)
            run = (int32_t)n;
        int rc;
        if (rows) {
            rc = kvb_write(c->pool, c->ids[s][bi], off, rows, run);
            rows += (size_t)run * c->stride;
        } else {
            /* Accounting only: a new block's count was set by allocate. */
            rc = off ? kvb_set_used(c->pool, c->ids[s][bi], off + run) : 0;
        }
        if (rc < 0)
            return rc;
        from += run;
        n -= run;
    }
    return 0;
}

int kvb_cache_append(kvb_cache_t *c, const void *k_rows, const void *v_rows,
                     int32_t n_rows)
{
    if (!c || n_rows < 0 || (!k_rows != !v_rows) || (k_rows && !c->stride))
        return PSC_EINVAL;
    if (n_rows == 0)
        return 0;
    int64_t room = (int64_t)c->n_blocks * c->bs - c->len;
    int64_t rest = n_rows > room ? n_rows - room : 0;
    int32_t add = (int32_t)((rest + c->bs - 1) / c->bs);
    int rc = table_reserve(c, (int64_t)c->n_blocks + add);
    if (rc)
        return rc;
    if (add) {
        static const kvb_stream_t st[2] = { KVB_STREAM_K, KVB_STREAM_V };
        for (int s = 0; s < 2; s++) {
            rc = kvb_allocate(c->pool, st[s], rest, c->owner, c->format,
                              c->ids[s] + c->n_blocks, add);
            if (rc < 0) {
                if (s == 1)
                    (void)kvb_free(c->pool, c->ids[0] + c->n_blocks, add);
                return rc;
            }
        }
        for (int s = 0; s < 2; s++)
            for (int32_t i = c->n_blocks; i < c->n_blocks + add; i++)
                c->slots[s][i] = c->stride ? kvb_slot(c->pool, c->ids[s][i]) : NULL;
        c->n_blocks += add;
        c->live = true;
    }
    /* Bookkeeping cannot fail from here on (blocks are ours, sizes valid). */
    rc = put_rows(c, 0, c->len, k_rows, n_rows);
    if (rc == 0)
        rc = put_rows(c, 1, c->len, v_rows, n_rows);
    if (rc < 0)
        return rc;
    c->len += n_rows;
    return 0;
}

int kvb_cache_release(kvb_cache_t *c)
{
    if (!c)
        return PSC_EINVAL;
    int rc = c->live ? kvb_free_all(c->pool, c->owner) : 0;
    c->live = false;
    c->len = 0;
    c->n_blocks = 0;
    return rc;
}

int64_t kvb_cache_len(const kvb_cache_t *c)
{
    return c ? c->len : 0;
}

int32_t kvb_cache_n_blocks(const kvb_cache_t *c)
{
    return c ? c->n_blocks : 0;
}

const int32_t *kvb_cache_blocks(const kvb_cache_t *c, kvb_stream_t s)
{
    if (!c || (s != KVB_STREAM_K && s != KVB_STREAM_V))
        return NULL;
    return c->ids[s];
}

void *const *kvb_cache_slots(const kvb_cache_t *c, kvb_stream_t s)
{
    if (!c || (s != KVB_STREAM_K && s != KVB_STREAM_V))
        return NULL;
    return c->slots[s];
}

const void *kvb_cache_row(const kvb_cache_t *c, kvb_stream_t s, int64_t t)
{
    if (!c || !c->stride || (s != KVB_STREAM_K && s != KVB_STREAM_V) ||
        t < 0 || t >= c->len)
        return NULL;
    return (const unsigned char *)c->slots[s][t / c->bs] + (size_t)(t % c->bs) * c->stride;
}

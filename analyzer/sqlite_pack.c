/* sqlite_pack.c — the packed storage of the SQLite loader (see
 * sqlite_internal.h; why it is packed: sqlite.c).
 *
 * Rows go in BATCH at a time; a heap row's address is an offset from the
 * nearest of a few bases, its (stack, stream, bits) one heap_kinds number
 * and its time an offset from its block's heap_ts row. The views that
 * unpack all this are made by sqlite_schema.c from the same constants.
 */
#include "sqlite_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/format.h"

int sqi_batch_prepare(sqlite3 *db, batch_t *b, const char *table, int cols)
{
    b->cols = cols;
    b->n = 0;
    size_t len = 64 + (size_t)BATCH * (size_t)(2 * cols + 3);
    char *q = malloc(len);
    if (!q) return SQLITE_NOMEM;
    size_t o = (size_t)snprintf(q, len, "INSERT INTO %s VALUES", table);
    for (int r = 0; r < BATCH; r++) {
        q[o++] = r ? ',' : ' ';
        q[o++] = '(';
        for (int c = 0; c < cols; c++) { if (c) q[o++] = ','; q[o++] = '?'; }
        q[o++] = ')';
        if (r == 0) {
            q[o] = 0;
            int rc = sqlite3_prepare_v2(db, q, -1, &b->one, NULL);
            if (rc != SQLITE_OK) { free(q); return rc; }
        }
    }
    q[o] = 0;
    int rc = sqlite3_prepare_v2(db, q, -1, &b->many, NULL);
    free(q);
    return rc;
}

void sqi_batch_finalize(batch_t *b)
{
    sqlite3_finalize(b->one);
    sqlite3_finalize(b->many);
    b->one = b->many = NULL;
}

int sqi_step_reset(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : rc;
}

int sqi_batch_flush(batch_t *b)
{
    int rc = 0;
    if (b->n == BATCH) {
        int k = 1;
        for (int r = 0; r < BATCH; r++)
            for (int c = 0; c < b->cols; c++, k++) {
                if (b->null[r] & (1u << c)) sqlite3_bind_null(b->many, k);
                else sqlite3_bind_int64(b->many, k, b->v[r][c]);
            }
        rc = sqi_step_reset(b->many);
    } else {
        for (int r = 0; r < b->n && !rc; r++) {
            for (int c = 0; c < b->cols; c++) {
                if (b->null[r] & (1u << c)) sqlite3_bind_null(b->one, c + 1);
                else sqlite3_bind_int64(b->one, c + 1, b->v[r][c]);
            }
            rc = sqi_step_reset(b->one);
        }
    }
    b->n = 0;
    return rc;
}

/* ---- heap rows ------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Bytes SQLite takes for integer v (serial types 8/9 hold 0 and 1 in none). */
static int int_bytes(int64_t v)
{
    if (v == 0 || v == 1) return 0;
    if (v >= -128 && v < 128) return 1;
    if (v >= -32768 && v < 32768) return 2;
    if (v >= -8388608 && v < 8388608) return 3;
    if (v >= -2147483648LL && v < 2147483648LL) return 4;
    if (v >= -(1LL << 47) && v < (1LL << 47)) return 6;
    return 8;
}

/* The bases of sorted addresses a[n] grouped by regions of 2^shift bytes:
 * the median address of each of the most used MAX_BASES regions. */
static int bases_by_region(const int64_t *a, size_t n, int shift, int64_t *base)
{
    /* runs of one region, the largest first */
    struct { size_t at, len; } run[MAX_BASES];
    int nr = 0, nb = 0;
    for (size_t i = 0; i < n;) {
        size_t k = i;
        while (k < n && a[k] >> shift == a[i] >> shift) k++;
        int slot = nr < MAX_BASES ? nr++ : -1;
        if (slot < 0)            /* full: replace the smallest if this one is larger */
            for (int r = 0; r < nr; r++)
                if (run[r].len < k - i && (slot < 0 || run[r].len < run[slot].len)) slot = r;
        if (slot >= 0) { run[slot].at = i; run[slot].len = k - i; }
        i = k;
    }
    for (int r = 0; r < nr; r++) {
        int64_t b = a[run[r].at + run[r].len / 2] & ~(((int64_t)1 << ADDR_SHIFT) - 1);
        if (b > 0 && b < INT64_MAX / 2) base[nb++] = b;
    }
    return nb;
}


/* The address bases, chosen when the first row is written from the
 * objects waiting then (the first RING, or all of a shorter trace). An
 * address is stored as its offset from the nearest base in 16-byte units
 * (heap addresses are 16-byte aligned) with the base's index in the low
 * bits, so that most take 2 to 4 bytes (SQLite stores an integer in 1, 2,
 * 3, 4, 6 or 8) instead of six. The regions: 4 GiB (the main heap, the
 * area of the threads' arenas and mmap'd chunks) or finer, 512 or 64 MiB
 * (glibc gives each thread arena its own 64 MiB-aligned heap, so with a
 * base each their offsets stay within 3 bytes: 2.9 bytes an address on
 * the 4-thread stress trace instead of 3.5), whichever stores the waiting
 * objects' addresses in the fewest bytes. */
static void choose_bases(loader_t *L)
{
    L->base_set = 1;
    size_t n = (size_t)(L->tail - L->head);
    int64_t *a = n ? malloc(n * sizeof *a) : NULL;
    if (!a) return;              /* no base: addresses stored as they are */
    for (size_t i = 0; i < n; i++) a[i] = (int64_t)L->ring[(L->head + i) & (RING - 1)].addr;
    qsort(a, n, sizeof *a, cmp_i64);
    static const int shifts[] = { 32, 29, 26 };
    uint64_t best = UINT64_MAX;
    int64_t base[MAX_BASES];
    for (size_t s = 0; s < sizeof shifts / sizeof *shifts; s++) {
        int nb = bases_by_region(a, n, shifts[s], base);
        qsort(base, (size_t)nb, sizeof *base, cmp_i64);     /* addr_encode steps through them in order */
        int shift = 0;
        while ((1 << shift) < nb) shift++;
        loader_t t = { .n_base = nb, .base_shift = shift };
        memcpy(t.base, base, (size_t)nb * sizeof *base);
        uint64_t cost = 0;
        for (size_t i = 0; i < n; i++) {
            int64_t off;
            cost += sqi_addr_encode(&t, (uint64_t)a[i], &off) ? 8u : (uint64_t)int_bytes(off);
        }
        if (cost < best) {
            best = cost;
            L->n_base = nb;
            L->base_shift = shift;
            memcpy(L->base, base, (size_t)nb * sizeof *base);
        }
    }
    free(a);
}

/* addr as heap_rows.addr_off: the offset from the nearest base in 16-byte
 * units, shifted left by base_shift with the base's index below (with
 * one base, the offset alone); 0, or -1 when it is stored as it is. */
int sqi_addr_encode(const loader_t *L, uint64_t addr, int64_t *off)
{
    /* the bases are sorted: the nearest is found from the latest one by a
     * step or two (a row's address is usually in the region of the last
     * row's), not by a scan of all of them */
    int64_t a = (int64_t)addr, d;
    int r = L->last_base, n = L->n_base;
    if ((addr & ((1u << ADDR_SHIFT) - 1)) || n == 0) return -1;
    if (r >= n) r = 0;
    while (r > 0 && a < L->base[r - 1] + (L->base[r] - L->base[r - 1]) / 2) r--;
    while (r + 1 < n && a >= L->base[r] + (L->base[r + 1] - L->base[r]) / 2) r++;
    ((loader_t *)L)->last_base = r;
    if (__builtin_sub_overflow(a, L->base[r], &d)) return -1;
    uint64_t hi = (uint64_t)(d >> ADDR_SHIFT);
    /* the view computes ((off >> S) << ADDR_SHIFT) + base: it must not overflow */
    if ((int64_t)(hi << L->base_shift) >> L->base_shift != d >> ADDR_SHIFT) return -1;
    *off = (int64_t)(hi << L->base_shift) | r;
    return 0;
}

/* A row's (stack, stream, bits) as one small integer, heap_kinds.kind:
 * a program has few such triples, and one column of one byte takes the
 * place of three (SQLite stores 0 and 1 in no byte at all, and the first
 * kinds are the common ones). raw: the row stores its addresses as they
 * are, told by a negative kind (-1, -2, ...), so that the views' address
 * expression reads the row alone. */
int64_t sqi_kind_of(loader_t *L, uint32_t stack, uint32_t stream, uint64_t bits, int raw)
{
    int is_new;
    uint64_t *pp = psc_map_put_sz(&L->pairs, (uint64_t)stack << 32 | stream, &is_new, sizeof(uint64_t));
    if (!pp) { sqi_fail(L, SQLITE_NOMEM); return 0; }
    if (is_new) *pp = psc_map_count(&L->pairs) - 1;
    uint64_t pair = *pp;
    int64_t *k = NULL, kv = 0;
    if (pair < (1u << 23) && bits < ((uint64_t)1 << 39)) {
        k = psc_map_put_sz(&L->kinds, pair << 40 | bits << 1 | (uint64_t)raw, &is_new, sizeof(int64_t));
        if (!k) { sqi_fail(L, SQLITE_NOMEM); return 0; }
        if (!is_new) return *k;
    } else {
        for (size_t i = 0; i < L->n_far; i++)
            if (L->far[i].pair == pair && L->far[i].bits == bits && L->far[i].raw == raw) return L->far[i].kind;
        struct far_kind *f = realloc(L->far, (L->n_far + 1) * sizeof *f);
        if (!f) { sqi_fail(L, SQLITE_NOMEM); return 0; }
        L->far = f;
    }
    kv = raw ? -++L->n_raw_kinds : L->n_kinds++;
    if (k) *k = kv;
    else L->far[L->n_far++] = (struct far_kind){ pair, bits, raw, kv };
    sqlite3_stmt *s = L->st[ST_KIND];
    sqlite3_bind_int64(s, 1, kv);
    if (stack) sqlite3_bind_int64(s, 2, stack); else sqlite3_bind_null(s, 2);
    sqlite3_bind_int64(s, 3, stream);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)bits);
    sqi_fail(L, sqi_step_reset(s));
    return kv;
}

/* A realloc's source as heap_rows.extra, old - addr: 1 when that would not
 * come back from addr + extra in SQLite's 64-bit integers (the row then
 * stores both addresses as they are). */
int sqi_old_overflows(uint64_t addr, uint64_t old)
{
    int64_t d, back;
    return __builtin_sub_overflow((int64_t)old, (int64_t)addr, &d) || __builtin_add_overflow((int64_t)addr, d, &back);
}

/* The time ts of heap event id (an allocation or a free) as an offset
 * from the base of its block of 256 ids, a few bytes instead of six:
 * heap_ts has one row per block with a heap event, the time of its first
 * one (the hook sees ids in order, so the rows go in as appends). */
int64_t sqi_ts_off(loader_t *L, uint64_t id, uint64_t ts)
{
    uint64_t blk = id >> TS_SHIFT;
    if (!L->ts_have || blk != L->ts_blk) {
        sqlite3_stmt *s = L->st[ST_TS];
        sqlite3_bind_int64(s, 1, (sqlite3_int64)blk);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)ts);
        sqi_fail(L, sqi_step_reset(s));
        L->ts_have = 1;
        L->ts_blk = blk;
        L->ts_base = ts;
    }
    return (int64_t)(ts - L->ts_base);
}

void sqi_heap_emit(loader_t *L, const hrow_t *h)
{
    if (!L->base_set) choose_bases(L);
    batch_t *b = &L->heap;
    int64_t *v = b->v[b->n];
    /* old - addr in unsigned arithmetic: it may wrap, and then the row is
     * raw and old_off unused */
    int64_t addr = (int64_t)h->addr, off, old = (int64_t)h->old, old_off = (int64_t)(h->old - h->addr);
    /* the views add the base back in SQLite's 64-bit integers: a sum that
     * would overflow there (addresses above 2^63, crafted traces) is
     * stored as is */
    int raw = sqi_addr_encode(L, h->addr, &off) || (h->has_old && sqi_old_overflows(h->addr, h->old));
    if (raw) {
        off = addr;
        old_off = old;
    }
    v[0] = (int64_t)h->id;
    v[1] = h->ts;
    v[2] = h->fts;
    v[3] = (int64_t)h->size;
    v[4] = off;
    v[5] = sqi_kind_of(L, h->stack, h->stream, h->bits, raw);
    v[6] = (int64_t)h->gap;
    v[7] = h->has_old ? old_off : (int64_t)h->arg;      /* extra: old address or arg */
    b->null[b->n] = (h->freed ? 0u : 1u << 2 | 1u << 6) | (h->has_old || h->has_arg ? 0u : 1u << 7);
    if (++b->n == BATCH) sqi_fail(L, sqi_batch_flush(b));
    L->stats->allocations++;
}

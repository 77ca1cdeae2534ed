/* html.c — the self-contained HTML page of a trace (see html.h).
 *
 * One scan. Its hook reads what the scan's model made of each event
 * (s->step): the operations name
 * each heap object, pool buffer and KV block with its stack, so a live
 * table per kind (key -> row's id, bytes) attributes frees to the row that
 * allocated. Rows are (kind, pool, stack); each holds its totals and its
 * site buckets, in chunks allocated when first written (most rows allocate
 * in a few moments of the trace: all 1024 buckets of every row were 24 KiB
 * a row). The timeline keeps fixed-width buckets whose width
 * doubles when the trace outgrows them (pairs merged: maxima for gauges,
 * sums for counts and site buckets), as scan.c does, so memory is bounded
 * by the live objects and the rows, never by the trace's length.
 *
 * What a row held at a peak (of heap live, RSS, pool outstanding, KV
 * blocks) is kept without copying every row at every new peak: each peak
 * has an epoch; before a row changes, if it has not changed since the
 * latest peak, its value then is its value now, and is saved. At the end a
 * row untouched since the latest peak holds its final value.
 *
 * Output: HTML with the inlined style and script, the data as JSON in a
 * <script type="application/json"> ("<", ">", "&" and U+2028/9 escaped in
 * strings, so no string can close the element). Written through
 * common/outfile.h: a temporary file renamed on success.
 */
#include "html.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "hashmap.h"
#include "json.h"
#include "marks.h"
#include "outfile.h"
#include "poolscope/error.h"
#include "scan.h"
#include "suppress.h"
#include "symbolize.h"

/* The page's script and style, taken into the binary from the source tree
 * when this file is assembled (the Makefile makes this object depend on
 * them). Paths are relative to the tree's root, where every build runs. */
__asm__(".pushsection .rodata\n"
        ".balign 16\n"
        ".globl az_html_app_js\n.hidden az_html_app_js\n"
        "az_html_app_js:\n"
        ".incbin \"analyzer/html_app.js\"\n"
        ".byte 0\n"
        ".balign 16\n"
        ".globl az_html_app_css\n.hidden az_html_app_css\n"
        "az_html_app_css:\n"
        ".incbin \"analyzer/html_app.css\"\n"
        ".byte 0\n"
        ".popsection\n");
extern const char az_html_app_js[] __attribute__((visibility("hidden")));
extern const char az_html_app_css[] __attribute__((visibility("hidden")));

#define TL_N      AZ_HTML_TL_BUCKETS
#define SB_PER    2                  /* timeline buckets per site bucket */
#define SB_N      (TL_N / SB_PER)
#define CH_N      64                 /* site buckets per chunk of a row (1.5 KiB) */
#define CH_ROW    (SB_N / CH_N)      /* chunks of a row */
#define MAX_ROWS  4096               /* rows holding site buckets at once */
#define EVICT_ROWS (MAX_ROWS / 4)    /* when they are all in use: the smallest, merged at once */
#define CELL_BUDGET 300000           /* site buckets written with something in them, at most
                                      * (about 7 MB): beyond, written over buckets twice as wide */
#define MAX_POOLS 16                 /* pools counted apart over time (by model index) */
#define MAX_LANES 16
#define MAX_MARKS 400000
#define MAX_FRAMES 256

/* Row kinds: the page's KIND_NAME order. Mappings are by committed bytes
 * (model.h, PM_MAP_ADD), anonymous and file-backed apart. */
enum { K_HEAP, K_POOL, K_KV, K_MMAP_ANON, K_MMAP_FILE, K_N };
enum { P_HEAP, P_RSS, P_POOL, P_KV, P_N };
#define STACK_OVER  UINT32_MAX       /* row of the stacks merged to stay within MAX_ROWS */
#define STACK_OTHER (UINT32_MAX - 1) /* output row of the rows past AZ_HTML_ROWS */

typedef struct cell { uint64_t ab, an, fb; } cell_t;   /* allocated bytes, allocations, freed bytes */

typedef struct row {
    uint8_t kind;
    uint32_t pool;               /* model pool index (pool and KV rows), else 0 */
    uint32_t stack;
    uint64_t calls, bytes, live, live_n, temp, max_live;
    uint64_t snap[P_N];          /* live at the latest peak of each kind (see the top) */
    uint32_t ep[P_N];
    cell_t **ch;                 /* CH_ROW chunks of CH_N site buckets, a NULL chunk all zeros;
                                  * NULL while the slot is free */
    uint32_t id;                 /* the id its objects name; in a free slot, the next free slot */
} row_t;
#define NO_ROW UINT32_MAX

/* What a live object names: an id, not a row. A row merged away (see
 * rows_evict) gives its slot of 128 bytes back at once, while its objects,
 * maybe long-lived, still name its id: 8 bytes saying which row counts
 * them now. A Python program evicts hundreds of thousands of rows whose
 * objects outlive them; kept as rows, they were the page's largest holder
 * of memory after the live table. */
typedef struct rid {
    uint32_t row;                /* the row counting its objects; a free id: the next free id */
    uint32_t refs;               /* RID_OWN: the row is its own; else its objects still live */
} rid_t;
#define RID_OWN UINT32_MAX

/* A live object: its row's id (rid_t) and its size, OBJ_BIG for 4 GiB or more (the
 * size then in hb_t.big). 8 bytes, so 16 a slot of the live table, not 24:
 * that table, one slot per live object or more, is the page's largest own
 * holder of memory on a program with many small objects. */
typedef struct obj { uint32_t row; uint32_t bytes; } obj_t;
#define OBJ_BIG UINT32_MAX

typedef struct gauge {           /* maxima over a bucket */
    uint64_t heap, anon, file, committed, reserved, rss, pool_out, pool_res, kv_blocks, kv_tokens, kv_cap;
    int set;
} gauge_t;

typedef struct count {           /* sums over a bucket */
    uint64_t heap_allocs, heap_bytes, kv_allocs;
    uint64_t acq[MAX_POOLS], miss[MAX_POOLS], req[MAX_POOLS], granted[MAX_POOLS];
} count_t;

typedef struct hb {
    const az_scan_t *scan;       /* the scan, for its model's pools (set by the hook and after it) */
    int err;                     /* PSC_ENOMEM seen: some objects were not attributed */
    psc_map_t rowmap;            /* (kind, pool, stack) -> id of its row */
    row_t *rows;                 /* slots, a free one's ch NULL */
    size_t n_rows, cap_rows;
    size_t n_cells;              /* rows holding cells (MAX_ROWS at most, the over rows aside) */
    uint32_t free_row;           /* free slots, chained by id */
    rid_t *ids;
    size_t n_ids, cap_ids;
    uint32_t free_id;            /* ids no live object names, chained by row */
    uint32_t over[K_N];          /* each kind's STACK_OVER row (a slot), UINT32_MAX before one */
    psc_map_t live[K_N];         /* key -> obj_t */
    psc_map_t big[K_N];          /* key -> uint64_t size, of the live objects of OBJ_BIG */
    uint64_t last_key[K_N];
    int last_valid[K_N];
    uint32_t E[P_N];
    uint64_t peak_v[P_N];
    uint64_t peak_t[P_N];        /* when each peak was first reached: the moment the rows' pk hold */
    gauge_t *g, last;
    count_t *c;
    size_t used;
    unsigned shift;
    uint64_t t0, t_now;
    int started;
} hb_t;

/* ---- timeline ---------------------------------------------------------------- */

static void g_merge(gauge_t *a, const gauge_t *b)
{
#define MX(f) if (b->f > a->f) a->f = b->f
    MX(heap); MX(anon); MX(file); MX(committed); MX(reserved); MX(rss); MX(pool_out); MX(pool_res);
#undef MX
    if (b->set && b->kv_blocks >= a->kv_blocks) {
        a->kv_blocks = b->kv_blocks; a->kv_tokens = b->kv_tokens; a->kv_cap = b->kv_cap;
    }
    a->set |= b->set;
}

static void c_add(count_t *a, const count_t *b)
{
    a->heap_allocs += b->heap_allocs; a->heap_bytes += b->heap_bytes; a->kv_allocs += b->kv_allocs;
    for (int p = 0; p < MAX_POOLS; p++) {
        a->acq[p] += b->acq[p]; a->miss[p] += b->miss[p]; a->req[p] += b->req[p]; a->granted[p] += b->granted[p];
    }
}

static cell_t cell_sum(cell_t a, cell_t b) { return (cell_t){ a.ab + b.ab, a.an + b.an, a.fb + b.fb }; }

/* Site bucket k of a row holding them: zeros in a chunk never written. */
static cell_t cell_get(const row_t *r, size_t k)
{
    const cell_t *c = r->ch[k / CH_N];
    return c ? c[k % CH_N] : (cell_t){ 0, 0, 0 };
}

/* Site bucket k to write; its chunk allocated if need be. NULL out of memory. */
static cell_t *cell_at(row_t *r, size_t k)
{
    cell_t **c = &r->ch[k / CH_N];
    if (!*c && !(*c = calloc(CH_N, sizeof **c))) return NULL;
    return &(*c)[k % CH_N];
}

static void cells_free(row_t *r)
{
    if (!r->ch) return;
    for (size_t d = 0; d < CH_ROW; d++) free(r->ch[d]);
    free(r->ch);
    r->ch = NULL;
}

/* Double the bucket width: pairs merged into the lower half. */
static void halve(hb_t *h)
{
    for (size_t k = 0; k < TL_N / 2; k++) {
        gauge_t g = h->g[2 * k];
        g_merge(&g, &h->g[2 * k + 1]);
        count_t c = h->c[2 * k];
        c_add(&c, &h->c[2 * k + 1]);
        h->g[k] = g;
        h->c[k] = c;
    }
    memset(&h->g[TL_N / 2], 0, TL_N / 2 * sizeof *h->g);
    memset(&h->c[TL_N / 2], 0, TL_N / 2 * sizeof *h->c);
    /* site buckets: chunks 2d and 2d+1 become chunk d, in the storage of
     * either (chunk d is read before it is written, as d <= 2d) */
    for (size_t r = 0; r < h->n_rows; r++) {
        cell_t **ch = h->rows[r].ch;
        if (!ch) continue;                   /* merged */
        for (size_t d = 0; d < CH_ROW / 2; d++) {
            cell_t *a = ch[2 * d], *b = ch[2 * d + 1], *x = a ? a : b, t[CH_N];
            if (x) {
                for (size_t k = 0; k < CH_N / 2; k++) {
                    t[k] = a ? cell_sum(a[2 * k], a[2 * k + 1]) : (cell_t){ 0, 0, 0 };
                    t[CH_N / 2 + k] = b ? cell_sum(b[2 * k], b[2 * k + 1]) : (cell_t){ 0, 0, 0 };
                }
                memcpy(x, t, sizeof t);
                if (a && b) free(b);
            }
            ch[d] = x;
        }
        memset(&ch[CH_ROW / 2], 0, CH_ROW / 2 * sizeof *ch);
    }
    h->shift++;
    h->used = (h->used + 1) / 2;
}

/* The bucket of time t (times never go back: an earlier one is taken as
 * the latest seen); buckets skipped since the last event hold its state. */
static size_t tl_index(hb_t *h, uint64_t t)
{
    if (t < h->t_now) t = h->t_now;
    h->t_now = t;
    size_t i;
    while ((i = (size_t)((t - h->t0) >> h->shift)) >= TL_N) halve(h);
    if (i >= h->used) {
        for (size_t k = h->used; k <= i; k++)
            if (h->last.set) g_merge(&h->g[k], &h->last);
        h->used = i + 1;
    }
    return i;
}

/* ---- rows and live objects --------------------------------------------------- */

static uint64_t row_key(int kind, uint32_t pool, uint32_t stack)
{
    return ((uint64_t)(kind + 1) << 60) ^ ((uint64_t)(pool & 0xfffffffu) << 32) ^ stack;
}

/* A free id; NO_ROW out of memory. */
static uint32_t id_new(hb_t *h)
{
    if (h->free_id != NO_ROW) {
        uint32_t id = h->free_id;
        h->free_id = h->ids[id].row;
        return id;
    }
    if (h->n_ids == h->cap_ids) {
        size_t n = h->cap_ids ? h->cap_ids * 2 : 64;
        rid_t *a = n < NO_ROW ? realloc(h->ids, n * sizeof *a) : NULL;
        if (!a) return NO_ROW;
        h->ids = a;
        h->cap_ids = n;
    }
    return (uint32_t)h->n_ids++;
}

static void id_free(hb_t *h, uint32_t id)
{
    h->ids[id] = (rid_t){ h->free_id, 0 };
    h->free_id = id;
}

/* Slot ix given back: its cells freed, chained on the free list. */
static void row_free(hb_t *h, uint32_t ix)
{
    row_t *r = &h->rows[ix];
    cells_free(r);
    h->n_cells--;
    r->id = h->free_row;
    h->free_row = ix;
}

/* A new row with id id in a free slot: the slot, or NO_ROW out of memory. */
static uint32_t row_new(hb_t *h, int kind, uint32_t pool, uint32_t stack, uint32_t id)
{
    uint32_t ix;
    if (h->free_row != NO_ROW) {
        ix = h->free_row;
        h->free_row = h->rows[ix].id;
    } else {
        if (h->n_rows == h->cap_rows) {
            size_t n = h->cap_rows ? h->cap_rows * 2 : 64;
            row_t *a = realloc(h->rows, n * sizeof *a);
            if (!a) return NO_ROW;
            h->rows = a;
            h->cap_rows = n;
        }
        ix = (uint32_t)h->n_rows;
    }
    row_t *r = &h->rows[ix];
    cell_t **ch = calloc(CH_ROW, sizeof *ch);
    if (!ch) {
        if (ix != h->n_rows) { r->id = h->free_row; h->free_row = ix; }   /* back on the list */
        return NO_ROW;
    }
    memset(r, 0, sizeof *r);
    r->ch = ch;
    r->kind = (uint8_t)kind;
    r->pool = pool;
    r->stack = stack;
    r->id = id;
    memcpy(r->ep, h->E, sizeof r->ep);   /* held nothing at the latest peaks */
    if (ix == h->n_rows) h->n_rows++;
    h->n_cells++;
    h->ids[id] = (rid_t){ ix, RID_OWN };
    return ix;
}

/* Before a row changes: its value at the latest peaks (see the top). */
static void row_touch(hb_t *h, row_t *r);
static int row_add(row_t *a, const row_t *b);

static const row_t *evict_rows;
static int by_bytes(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, k = *(const uint32_t *)b;
    const row_t *x = &evict_rows[i], *y = &evict_rows[k];
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* All MAX_ROWS rows in use: the EVICT_ROWS that allocated least so far
 * are merged into their kind's STACK_OVER row (what they allocated,
 * hold and held at the peaks, their site buckets), and their stacks start
 * afresh if they allocate again. So the rows are the stacks that
 * allocated most, whatever their number: a Python program has a stack
 * per line its interpreter ran (thousands in its start-up alone), and
 * the lines of its script, coming last, would otherwise find no row.
 * 0, or -1 out of memory. */
static int rows_evict(hb_t *h)
{
    uint32_t *c = malloc(h->n_rows * sizeof *c);
    if (!c) return -1;
    size_t n = 0;
    for (size_t i = 0; i < h->n_rows; i++)
        if (h->rows[i].ch && h->rows[i].stack != STACK_OVER) c[n++] = (uint32_t)i;
    evict_rows = h->rows;
    qsort(c, n, sizeof *c, by_bytes);
    int rc = 0;
    for (size_t i = 0; i < n && i < EVICT_ROWS; i++) {
        int kind = h->rows[c[i]].kind;
        if (h->over[kind] == UINT32_MAX) {   /* (row_new may move the rows: indices here) */
            uint32_t id = id_new(h);
            if (id == NO_ROW || (h->over[kind] = row_new(h, kind, 0, STACK_OVER, id)) == NO_ROW) {
                if (id != NO_ROW) id_free(h, id);
                h->over[kind] = UINT32_MAX;
                rc = -1;
                break;
            }
        }
        row_t *r = &h->rows[c[i]], *o = &h->rows[h->over[kind]];
        row_touch(h, r);
        row_touch(h, o);
        if (row_add(o, r)) {
            rc = -1;
            break;
        }
        psc_map_del(&h->rowmap, row_key(r->kind, r->pool, r->stack));
        if (r->live_n) h->ids[r->id] = (rid_t){ h->over[kind], (uint32_t)r->live_n };
        else id_free(h, r->id);               /* nothing names it: reusable */
        row_free(h, c[i]);
    }
    free(c);
    return rc;
}

static uint32_t row_of(hb_t *h, int kind, uint32_t pool, uint32_t stack)
{
    uint64_t key = row_key(kind, pool, stack);
    uint32_t *ix = psc_map_get_sz(&h->rowmap, key, sizeof(uint32_t));
    if (ix) return *ix;
    if (h->n_cells >= MAX_ROWS + K_N && rows_evict(h)) return NO_ROW;
    uint32_t id = id_new(h);
    if (id == NO_ROW) return NO_ROW;
    uint32_t r = row_new(h, kind, pool, stack, id);
    if (r == NO_ROW) { id_free(h, id); return NO_ROW; }
    if (!(ix = psc_map_put_sz(&h->rowmap, key, NULL, sizeof(uint32_t)))) {
        row_free(h, r);
        id_free(h, id);
        return NO_ROW;
    }
    *ix = id;
    return id;
}

/* The row that counts an object of id: its own, or the row it was merged
 * into (the id given back for reuse once no object names it). */
static row_t *row_live(hb_t *h, uint32_t id)
{
    rid_t *d = &h->ids[id];
    row_t *r = &h->rows[d->row];
    if (d->refs != RID_OWN && !--d->refs) id_free(h, id);
    return r;
}

/* Before a row changes: its value at the latest peaks (see the top). */
static void row_touch(hb_t *h, row_t *r)
{
    for (int p = 0; p < P_N; p++)
        if (r->ep[p] != h->E[p]) { r->snap[p] = r->live; r->ep[p] = h->E[p]; }
}

static row_t *obj_gone(hb_t *h, int kind, uint64_t key, const obj_t *ob, size_t b)
{
    uint64_t bytes = ob->bytes;
    if (bytes == OBJ_BIG) {
        uint64_t *v = psc_map_get_sz(&h->big[kind], key, sizeof(uint64_t));
        bytes = v ? *v : 0;
        if (v) psc_map_erase_sz(&h->big[kind], v, sizeof(uint64_t));
    }
    row_t *r = row_live(h, ob->row);
    row_touch(h, r);
    r->live -= bytes;
    r->live_n--;
    cell_t *c = cell_at(r, b);
    if (c) c->fb += bytes;
    else h->err = PSC_ENOMEM;
    return r;
}

/* call 0: not a new allocation but the rest of one the row had (a
 * mapping's part left by a munmap of its start, an mremap's new place):
 * live again, in no call count. The bucket's freed bytes took the whole
 * mapping at its DEL, just before: the rest comes back out of them, so a
 * munmap is not drawn as an allocation and the buckets' allocated bytes
 * add up to the row's; only a rest larger than what was freed there (an
 * mremap that grew) is allocated bytes, without a call. */
static void obj_alloc(hb_t *h, int kind, uint32_t pool, uint32_t stack, uint64_t key, uint64_t bytes, size_t b,
                      int call)
{
    int is_new;
    obj_t *ob = psc_map_put_sz(&h->live[kind], key, &is_new, sizeof(obj_t));
    if (!ob) { h->err = PSC_ENOMEM; return; }
    if (!is_new) obj_gone(h, kind, key, ob, b);   /* allocated again at a live key: the old one is gone */
    uint32_t id = row_of(h, kind, pool, stack);
    if (id == NO_ROW) { psc_map_erase_sz(&h->live[kind], ob, sizeof(obj_t)); h->err = PSC_ENOMEM; return; }
    row_t *r = &h->rows[h->ids[id].row];
    cell_t *c = cell_at(r, b);
    uint64_t *big = NULL;
    if (!c || (bytes >= OBJ_BIG && !(big = psc_map_put_sz(&h->big[kind], key, NULL, sizeof(uint64_t))))) {
        psc_map_erase_sz(&h->live[kind], ob, sizeof(obj_t));
        h->err = PSC_ENOMEM;
        return;
    }
    if (big) *big = bytes;
    row_touch(h, r);
    uint64_t fresh = bytes;
    if (call) {
        r->calls++;
        c->an++;
    } else {
        uint64_t back = bytes < c->fb ? bytes : c->fb;
        c->fb -= back;
        fresh -= back;
    }
    r->bytes += fresh;
    c->ab += fresh;
    r->live += bytes;
    r->live_n++;
    if (r->live > r->max_live) r->max_live = r->live;
    ob->row = id;
    ob->bytes = big ? OBJ_BIG : (uint32_t)bytes;
    h->last_key[kind] = key;
    h->last_valid[kind] = 1;
}

static void obj_free(hb_t *h, int kind, uint64_t key, size_t b)
{
    obj_t *ob = psc_map_get_sz(&h->live[kind], key, sizeof(obj_t));
    if (!ob) return;
    row_t *r = obj_gone(h, kind, key, ob, b);
    /* freed before any other allocation of its kind: temporary (as metrics.c) */
    if (h->last_valid[kind] && h->last_key[kind] == key) r->temp++;
    h->last_valid[kind] = 0;
    psc_map_erase_sz(&h->live[kind], ob, sizeof(obj_t));
}

static void peak_check(hb_t *h, int p, uint64_t v, uint64_t t)
{
    if (v > h->peak_v[p]) { h->peak_v[p] = v; h->E[p]++; h->peak_t[p] = t; }
}

static void hook(void *ctx, const pst_event_t *ev, const az_scan_t *s)
{
    hb_t *h = ctx;
    if (!h->started) { h->t0 = h->t_now = ev->ts; h->started = 1; }
    h->scan = s;
    if (!s->step) return;
    const pm_step_t st = *s->step;
    if (!st.n_ops && !st.moved) return;
    size_t i = tl_index(h, ev->ts), b = i / SB_PER;
    count_t *c = &h->c[i];
    for (size_t k = 0; k < st.n_ops; k++) {
        const pm_op_t *o = &st.ops[k];
        size_t pi = o->pool < MAX_POOLS ? o->pool : MAX_POOLS - 1;
        switch ((pm_kind_t)o->kind) {
        case PM_HEAP_ALLOC:
            c->heap_allocs++;
            c->heap_bytes += o->bytes;
            obj_alloc(h, K_HEAP, 0, o->stack, o->key, o->bytes, b, 1);
            break;
        case PM_HEAP_FREE: obj_free(h, K_HEAP, o->key, b); break;
        case PM_POOL_ACQUIRE:
            c->acq[pi]++;
            if (!(o->flags & PM_F_HIT)) c->miss[pi]++;
            c->req[pi] += o->req;
            c->granted[pi] += o->bytes;
            obj_alloc(h, K_POOL, o->pool, o->stack, o->key, o->bytes, b, 1);
            break;
        case PM_POOL_RECLAIM: obj_free(h, K_POOL, o->key, b); break;
        case PM_KV_BLOCK_ALLOC:
            c->kv_allocs++;
            obj_alloc(h, K_KV, o->pool, o->stack, o->key, o->bytes, b, 1);
            break;
        case PM_KV_BLOCK_FREE: obj_free(h, K_KV, o->key, b); break;
        case PM_MAP_ADD:
            obj_alloc(h, o->flags & PM_F_FILE ? K_MMAP_FILE : K_MMAP_ANON, 0, o->stack, o->key, o->bytes, b,
                      !(o->flags & PM_F_REST));
            break;
        case PM_MAP_DEL: obj_free(h, o->flags & PM_F_FILE ? K_MMAP_FILE : K_MMAP_ANON, o->key, b); break;
        default: break;
        }
    }
    const az_state_t *hs = az_state(s->heap);
    peak_check(h, P_HEAP, hs->live_bytes, ev->ts);
    peak_check(h, P_RSS, s->rss, ev->ts);
    peak_check(h, P_POOL, s->pool_out, ev->ts);
    peak_check(h, P_KV, hs->kv_blocks, ev->ts);
    if (!st.moved) return;
    uint64_t mapped = s->mmap_anon + s->mmap_file;
    gauge_t now = {
        .heap = hs->live_bytes, .anon = s->mmap_anon, .file = s->mmap_file,
        .committed = mapped > s->mmap_reserved ? mapped - s->mmap_reserved : 0, .reserved = s->mmap_reserved,
        .rss = s->rss, .pool_out = s->pool_out, .pool_res = az_reserved_now(s->pool),
        .kv_blocks = hs->kv_blocks, .kv_tokens = hs->kv_tokens, .kv_cap = hs->kv_capacity, .set = 1 };
    g_merge(&h->g[i], &now);
    h->last = now;
}

static int hb_init(hb_t *h)
{
    memset(h, 0, sizeof *h);
    for (int k = 0; k < K_N; k++) h->over[k] = UINT32_MAX;
    h->free_row = h->free_id = NO_ROW;
    h->shift = 10;               /* 1 us buckets to start with */
    h->g = calloc(TL_N, sizeof *h->g);
    h->c = calloc(TL_N, sizeof *h->c);
    if (!h->g || !h->c || psc_map_init(&h->rowmap, sizeof(uint32_t), 1024, 0, NULL)) return PSC_ENOMEM;
    for (int k = 0; k < K_N; k++)
        if (psc_map_init(&h->live[k], sizeof(obj_t), 1024, 0, NULL) ||
            psc_map_init(&h->big[k], sizeof(uint64_t), 8, 0, NULL)) return PSC_ENOMEM;
    return 0;
}

static void hb_free(hb_t *h)
{
    for (size_t r = 0; r < h->n_rows; r++) cells_free(&h->rows[r]);
    free(h->rows);
    free(h->ids);
    psc_map_free(&h->rowmap);
    for (int k = 0; k < K_N; k++) { psc_map_free(&h->live[k]); psc_map_free(&h->big[k]); }
    free(h->g);
    free(h->c);
}

/* ---- JSON into the page --------------------------------------------------------- */

/* A JSON string that cannot end the <script> element it is in, nor be
 * read as markup: '<', '>', '&' and the two JS line separators escaped,
 * and valid for any bytes (common/escape.h, PSC_ESC_HTML). */
static void jstr(FILE *f, const char *s)
{
    psc_esc_json(f, s, PSC_ESC_HTML);
}

static void jkey(FILE *f, int *first, const char *k)
{
    if (!*first) fputc(',', f);
    *first = 0;
    jstr(f, k);
    fputc(':', f);
}

static void ju(FILE *f, int *first, const char *k, uint64_t v) { jkey(f, first, k); fprintf(f, "%" PRIu64, v); }
static void jd(FILE *f, int *first, const char *k, double v)
{
    jkey(f, first, k);
    if (isfinite(v)) fprintf(f, "%.6g", v); else fputs("null", f);
}
static void js(FILE *f, int *first, const char *k, const char *v) { jkey(f, first, k); jstr(f, v); }

/* An array of TL_N-strided values: n of them, the field at offset off of
 * each element of size sz (a u64). */
static void jarr_u64(FILE *f, int *first, const char *k, const void *base, size_t n, size_t sz, size_t off)
{
    jkey(f, first, k);
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)base + i * sz + off, sizeof v);
        fprintf(f, i ? ",%" PRIu64 : "%" PRIu64, v);
    }
    fputc(']', f);
}

/* The parsed replay document, back as JSON (strings escaped as above). */
static void jv_write(FILE *f, const az_jv_t *v, int depth)
{
    if (!v || depth > AZ_JSON_MAX_DEPTH) { fputs("null", f); return; }
    switch (v->type) {
    case AZ_JV_NULL: fputs("null", f); break;
    case AZ_JV_BOOL: fputs(v->num != 0 ? "true" : "false", f); break;
    case AZ_JV_NUM:
        if (v->is_int) fprintf(f, "%" PRIu64, v->u);
        else if (isfinite(v->num)) fprintf(f, "%.17g", v->num);
        else fputs("null", f);
        break;
    case AZ_JV_STR: jstr(f, v->str); break;
    case AZ_JV_ARR: case AZ_JV_OBJ:
        fputc(v->type == AZ_JV_ARR ? '[' : '{', f);
        for (const az_jv_t *c = v->child; c; c = c->next) {
            if (c != v->child) fputc(',', f);
            if (v->type == AZ_JV_OBJ) { jstr(f, c->key ? c->key : ""); fputc(':', f); }
            jv_write(f, c, depth + 1);
        }
        fputc(v->type == AZ_JV_ARR ? ']' : '}', f);
        break;
    default: fputs("null", f);
    }
}

/* ---- interned strings (the frames' names, files, modules) ------------------------ */

typedef struct strtab {
    psc_map_t map;               /* hash -> index + 1 (probing on a collision) */
    char **s;
    size_t n, cap;
} strtab_t;

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

/* Index of s in t (added when new); -1 for NULL or out of memory. */
static int64_t intern(strtab_t *t, const char *s)
{
    if (!s) return -1;
    for (uint64_t h = fnv(s);; h++) {
        int is_new;
        uint64_t *v = psc_map_put_sz(&t->map, h, &is_new, sizeof(uint64_t));
        if (!v) return -1;
        if (!is_new) {
            if (!strcmp(t->s[*v - 1], s)) return (int64_t)(*v - 1);
            continue;
        }
        if (t->n == t->cap) {
            size_t c = t->cap ? t->cap * 2 : 256;
            char **a = realloc(t->s, c * sizeof *a);
            if (!a) { psc_map_del(&t->map, h); return -1; }
            t->s = a; t->cap = c;
        }
        if (!(t->s[t->n] = strdup(s))) { psc_map_del(&t->map, h); return -1; }
        *v = ++t->n;
        return (int64_t)(t->n - 1);
    }
}

static void strtab_free(strtab_t *t)
{
    for (size_t i = 0; i < t->n; i++) free(t->s[i]);
    free(t->s);
    psc_map_free(&t->map);
}

/* Frames: one record per distinct (name, short name, file, line, inlined, module,
 * python). A Python frame (symbolize.h) is its qualified name, .py file and
 * line, no module: never an address. */
typedef struct frame_rec { int64_t name, shrt, file, mod; int line, inl, py; } frame_rec_t;

typedef struct frames {
    strtab_t keys;               /* the record as text -> frame index */
    frame_rec_t *r;
    size_t n, cap;
} frames_t;

static int64_t frame_id(frames_t *fr, strtab_t *strs, const az_frame_t *f)
{
    char name[1200], shrt[1200], key[4000];
    const char *nm = f->function ? f->function : az_sym_format(f, f->pc, name, sizeof name);
    if (nm != name) snprintf(name, sizeof name, "%s", nm);
    az_sv_short(name, shrt, sizeof shrt);
    snprintf(key, sizeof key, "%s\x1f%s\x1f%d\x1f%d\x1f%s\x1f%d", name, f->file ? f->file : "", f->line, f->inlined,
             f->module ? f->module : "", f->python);
    size_t before = fr->keys.n;
    int64_t k = intern(&fr->keys, key);
    if (k < 0) return -1;
    if ((size_t)k < before) return k;
    if (fr->n == fr->cap) {
        size_t c = fr->cap ? fr->cap * 2 : 256;
        frame_rec_t *a = realloc(fr->r, c * sizeof *a);
        if (!a) return -1;
        fr->r = a; fr->cap = c;
    }
    fr->r[fr->n] = (frame_rec_t){ intern(strs, name), strcmp(shrt, name) ? intern(strs, shrt) : -1,
                                  intern(strs, f->file), intern(strs, f->module), f->line, f->inlined,
                                  f->python ? 1 : 0 };
    return (int64_t)fr->n++;
}

/* ---- marker lanes ---------------------------------------------------------------- */

typedef struct item { uint64_t t0, t1, inst, n; uint32_t name; uint8_t point; } item_t;

static int item_cmp(const void *a, const void *b)
{
    const item_t *x = a, *y = b;
    if (x->name != y->name) return x->name < y->name ? -1 : 1;
    if (x->point != y->point) return x->point < y->point ? -1 : 1;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    return x->inst < y->inst ? -1 : x->inst > y->inst;
}

typedef struct lane { uint32_t name; uint64_t first; size_t from, n; } lane_t;

static int lane_cmp(const void *a, const void *b)
{
    const lane_t *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* "lanes":[{name, scopes, points, merged, s:[t0,t1,inst,n,...], p:[t,n,...]}]:
 * scopes paired by (name, instance) as marks.h says. More than
 * AZ_HTML_LANE_ITEMS items of a kind in a lane: those closer than
 * span / AZ_HTML_LANE_ITEMS are merged (n = how many). */
static int write_lanes(FILE *f, const az_scan_t *s, size_t *hidden)
{
    size_t n = s->n_markers;
    *hidden = 0;
    fputs("\"lanes\":[", f);
    if (!n) { fputc(']', f); return 0; }
    az_mark_span_t *sp;
    long ns = az_marks_pair(s, &sp);
    item_t *it = malloc(n * sizeof *it);
    lane_t *ln = malloc(n * sizeof *ln);
    if (ns < 0 || !it || !ln) { free(sp); free(it); free(ln); fputc(']', f); return PSC_ENOMEM; }
    size_t ni = (size_t)ns;
    for (size_t i = 0; i < ni; i++)
        it[i] = (item_t){ sp[i].t0, sp[i].t1, sp[i].inst, 1, sp[i].name, sp[i].point };
    free(sp);
    qsort(it, ni, sizeof *it, item_cmp);
    size_t nl = 0;
    for (size_t i = 0; i < ni;) {
        lane_t l = { it[i].name, UINT64_MAX, i, 0 };
        for (; i < ni && it[i].name == l.name; i++, l.n++)
            if (it[i].t0 < l.first) l.first = it[i].t0;
        ln[nl++] = l;
    }
    qsort(ln, nl, sizeof *ln, lane_cmp);
    size_t rows = nl < MAX_LANES ? nl : MAX_LANES;
    *hidden = nl - rows;
    uint64_t span = s->t_last > s->t_first ? s->t_last - s->t_first : 1;
    uint64_t eps = span / AZ_HTML_LANE_ITEMS + 1;
    for (size_t r = 0; r < rows; r++) {
        const item_t *x = it + ln[r].from;
        size_t cnt[2] = { 0, 0 };
        for (size_t i = 0; i < ln[r].n; i++) cnt[x[i].point]++;
        if (r) fputc(',', f);
        fputs("{\"name\":", f);
        jstr(f, az_scan_string(s, ln[r].name));
        fprintf(f, ",\"scopes\":%zu,\"points\":%zu,\"merged\":%s", cnt[0], cnt[1],
                cnt[0] > AZ_HTML_LANE_ITEMS || cnt[1] > AZ_HTML_LANE_ITEMS ? "true" : "false");
        for (int pt = 0; pt < 2; pt++) {
            fputs(pt ? ",\"p\":[" : ",\"s\":[", f);
            int merge = cnt[pt] > AZ_HTML_LANE_ITEMS, first = 1;
            for (size_t i = 0; i < ln[r].n;) {
                if (x[i].point != pt) { i++; continue; }
                item_t a = x[i++];
                while (merge && i < ln[r].n && x[i].point == pt && x[i].t0 <= a.t1 + eps) {
                    if (x[i].t1 > a.t1) a.t1 = x[i].t1;
                    a.n++;
                    i++;
                }
                if (!first) fputc(',', f);
                first = 0;
                if (pt) fprintf(f, "%" PRIu64 ",%" PRIu64, a.t0 - s->t_first, a.n);
                else fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, a.t0 - s->t_first,
                             a.t1 - s->t_first, a.inst, a.n);
            }
            fputc(']', f);
        }
        fputc('}', f);
    }
    fputc(']', f);
    free(it); free(ln);
    return 0;
}

/* ---- site rows --------------------------------------------------------------------- */

static const hb_t *sort_h;
static int row_cmp(const void *a, const void *b)
{
    const row_t *x = &sort_h->rows[*(const uint32_t *)a], *y = &sort_h->rows[*(const uint32_t *)b];
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->pool != y->pool) return x->pool < y->pool ? -1 : 1;
    return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* b added into a. 0, or -1 out of memory with a's figures unchanged (the
 * chunks it lacks are allocated before anything is added). */
static int row_add(row_t *a, const row_t *b)
{
    for (size_t d = 0; d < CH_ROW; d++)
        if (b->ch[d] && !a->ch[d] && !(a->ch[d] = calloc(CH_N, sizeof *a->ch[d]))) return -1;
    a->calls += b->calls; a->bytes += b->bytes; a->live += b->live; a->live_n += b->live_n;
    a->temp += b->temp; a->max_live += b->max_live;
    for (int p = 0; p < P_N; p++) a->snap[p] += b->snap[p];
    for (size_t d = 0; d < CH_ROW; d++)
        if (b->ch[d])
            for (size_t k = 0; k < CH_N; k++) a->ch[d][k] = cell_sum(a->ch[d][k], b->ch[d][k]);
    return 0;
}

/* Site buckets of r with something in them, counted over groups of c. */
static size_t row_cells(const row_t *r, size_t c)
{
    size_t n = 0;
    for (size_t k = 0; k < SB_N; k += c)
        for (size_t q = k; q < k + c && q < SB_N; q++) {
            cell_t x = cell_get(r, q);
            if (x.ab || x.an || x.fb) { n++; break; }
        }
    return n;
}

/* One row of "sites", its site buckets merged by groups of c. */
static void write_row(FILE *f, const row_t *r, az_sv_t *v, frames_t *fr, strtab_t *strs,
                      const pm_pool_t *pools, size_t n_pools, uint64_t merged, size_t c, int *first_row,
                      const az_supp_res_t *supp)
{
    if (!*first_row) fputc(',', f);
    *first_row = 0;
    int first = 1;
    fputc('{', f);
    ju(f, &first, "k", r->kind);
    if (r->kind == K_POOL || r->kind == K_KV)
        js(f, &first, "pool", r->pool < n_pools ? pools[r->pool].name : r->pool == UINT32_MAX ? "(pools)" : "?");
    const char *via = NULL, *label;
    char lb[160];
    if (r->stack == STACK_OVER) label = "(small stacks, merged while reading)";
    else if (r->stack == STACK_OTHER) {
        snprintf(lb, sizeof lb, "(%" PRIu64 " smaller stacks)", merged);
        label = lb;
    } else label = az_sv_label(v, r->stack, &via);
    js(f, &first, "label", label);
    if (via) js(f, &first, "via", via);
    if (r->stack != STACK_OVER && r->stack != STACK_OTHER) ju(f, &first, "stack", r->stack);
    /* displayed frames, outermost first, without the wrappers at the inner end */
    jkey(f, &first, "f");
    fputc('[', f);
    if (r->stack && r->stack != STACK_OVER && r->stack != STACK_OTHER) {
        az_frame_t fb[MAX_FRAMES];
        size_t n = az_sv_frames(v, r->stack, fb, MAX_FRAMES), m = 0;
        while (m < n && az_sv_skipped(v, &fb[m])) m++;
        if (m == n) m = 0;
        int fa = 1;
        for (size_t i = n; i > m; i--) {
            int64_t id = frame_id(fr, strs, &fb[i - 1]);
            if (id < 0) continue;
            fprintf(f, fa ? "%" PRId64 : ",%" PRId64, id);
            fa = 0;
        }
    }
    fputc(']', f);
    ju(f, &first, "calls", r->calls);
    ju(f, &first, "bytes", r->bytes);
    ju(f, &first, "live", r->live);
    ju(f, &first, "live_n", r->live_n);
    /* a stack whose leaks are suppressed (suppress.h): what it holds at the
     * end stays in live (the buckets add up to it) and the page counts it
     * as suppressed, not in the leaks, as report does */
    if (r->kind == K_HEAP && az_supp_stack(supp, r->stack)) ju(f, &first, "sup", 1);
    ju(f, &first, "temp", r->temp);
    ju(f, &first, "max_live", r->max_live);
    jkey(f, &first, "pk");
    fprintf(f, "[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", r->snap[P_HEAP], r->snap[P_RSS],
            r->snap[P_POOL], r->snap[P_KV]);
    /* site buckets with something in them: [delta bucket, allocated bytes, allocations, freed bytes]... */
    jkey(f, &first, "b");
    fputc('[', f);
    size_t prev = 0;
    int fa = 1;
    for (size_t k = 0; k < SB_N; k += c) {
        cell_t m = { 0, 0, 0 };
        for (size_t q = k; q < k + c && q < SB_N; q++) m = cell_sum(m, cell_get(r, q));
        if (!m.ab && !m.an && !m.fb) continue;
        fprintf(f, "%s%zu,%" PRIu64 ",%" PRIu64 ",%" PRIu64, fa ? "" : ",", k / c - prev, m.ab, m.an, m.fb);
        prev = k / c;
        fa = 0;
    }
    fputs("]}", f);
}

static int write_sites(FILE *f, hb_t *h, az_sv_t *v, az_html_out_t *out, const az_supp_res_t *supp)
{
    /* the rows at their latest peaks: those untouched since hold their value now
     * (the rows merged into a STACK_OVER row, and their free slots, have no cells) */
    size_t n = 0;
    uint32_t *ix = malloc((h->n_rows ? h->n_rows : 1) * sizeof *ix);
    strtab_t strs = { 0 };
    frames_t fr = { 0 };
    int rc = 0;
    if (!ix || psc_map_init(&strs.map, sizeof(uint64_t), 1024, 0, NULL) ||
        psc_map_init(&fr.keys.map, sizeof(uint64_t), 1024, 0, NULL)) { rc = PSC_ENOMEM; goto done; }
    for (size_t i = 0; i < h->n_rows; i++)
        if (h->rows[i].ch) { row_touch(h, &h->rows[i]); ix[n++] = (uint32_t)i; }
    sort_h = h;
    qsort(ix, n, sizeof *ix, row_cmp);
    size_t npools = 0;
    const pm_pool_t *pools = pm_pools(h->scan->model, &npools);
    /* the rows past AZ_HTML_ROWS, summed per kind */
    row_t other[K_N];
    uint64_t merged[K_N] = { 0 };
    cell_t *oc[K_N][CH_ROW];
    memset(oc, 0, sizeof oc);
    for (int k = 0; k < K_N; k++) {
        memset(&other[k], 0, sizeof other[k]);
        other[k].kind = (uint8_t)k;
        other[k].stack = STACK_OTHER;
        other[k].ch = oc[k];
    }
    for (size_t i = AZ_HTML_ROWS; i < n; i++) {
        const row_t *r = &h->rows[ix[i]];
        if (row_add(&other[r->kind], r)) { rc = PSC_ENOMEM; break; }
        merged[r->kind]++;
    }
    if (rc) goto done_other;
    /* the widest site buckets that keep the cells written within the budget */
    size_t c = 1;
    for (;; c *= 2) {
        size_t cells = 0;
        for (size_t i = 0; i < n && i < AZ_HTML_ROWS; i++) cells += row_cells(&h->rows[ix[i]], c);
        for (int k = 0; k < K_N; k++) if (merged[k]) cells += row_cells(&other[k], c);
        if (cells <= CELL_BUDGET || c >= SB_N) break;
    }
    fputs("\"sites\":[", f);
    int first_row = 1;
    for (size_t i = 0; i < n && i < AZ_HTML_ROWS; i++)
        write_row(f, &h->rows[ix[i]], v, &fr, &strs, pools, npools, 0, c, &first_row, supp);
    for (int k = 0; k < K_N; k++)
        if (merged[k]) {
            other[k].pool = UINT32_MAX;
            write_row(f, &other[k], v, &fr, &strs, pools, npools, merged[k], c, &first_row, NULL);
        }
    fprintf(f, "],\"site_sb\":%zu", (size_t)SB_PER * c);
done_other:
    for (int k = 0; k < K_N; k++)
        for (size_t d = 0; d < CH_ROW; d++) free(oc[k][d]);
    if (rc) goto done;
    out->rows = n < AZ_HTML_ROWS ? n : AZ_HTML_ROWS;
    out->rows_merged = n > AZ_HTML_ROWS ? n - AZ_HTML_ROWS : 0;
    /* the tables the rows point into */
    fputs(",\"strings\":[", f);
    for (size_t i = 0; i < strs.n; i++) { if (i) fputc(',', f); jstr(f, strs.s[i]); }
    fputs("],\"frames\":[", f);
    for (size_t i = 0; i < fr.n; i++) {
        const frame_rec_t *x = &fr.r[i];
        fprintf(f, "%s[%" PRId64 ",%" PRId64 ",%" PRId64 ",%d,%d,%" PRId64 ",%d]", i ? "," : "", x->name, x->shrt,
                x->file, x->line, x->inl, x->mod, x->py);
    }
    fputc(']', f);
done:
    free(ix);
    strtab_free(&strs);
    strtab_free(&fr.keys);
    free(fr.r);
    return rc;
}

/* ---- the document ------------------------------------------------------------------ */

static uint64_t rel(const az_scan_t *s, uint64_t t) { return t > s->t_first ? t - s->t_first : 0; }

static void write_meta(FILE *f, const az_scan_t *s, const hb_t *h, const char *trace)
{
    const pst_header_t *hd = s->hdr;
    const az_result_t *r = &s->heap_r;
    char wb[300];
    int first = 1;
    fputs("\"meta\":{", f);
    js(f, &first, "tool", "poolscope html");
    js(f, &first, "trace", trace);
    js(f, &first, "program", hd && hd->exe && hd->exe[0] ? hd->exe : NULL);
    jkey(f, &first, "argv");
    fputc('[', f);
    for (uint32_t i = 0; hd && hd->argv && i < hd->argc; i++) { if (i) fputc(',', f); jstr(f, hd->argv[i]); }
    fputc(']', f);
    ju(f, &first, "pid", hd ? hd->pid : 0);
    js(f, &first, "stacks", !hd ? "?" : hd->stacks == PST_STACKS_DWARF ? "dwarf" : hd->stacks == PST_STACKS_FP ? "fp" : "none");
    ju(f, &first, "duration", s->t_last - s->t_first);
    ju(f, &first, "events", s->events);
    ju(f, &first, "lost", s->lost);
    ju(f, &first, "threads", s->threads);
    ju(f, &first, "resolution", s->resolution_ns);
    ju(f, &first, "tracer_bytes", s->tracer_bytes);
    js(f, &first, "warning", az_scan_warning(s, wb, sizeof wb));
    jkey(f, &first, "killed"); fputs(s->status && s->status->end_killed ? "true" : "false", f);
    /* what the live set at the trace's end is: a leak only at the program's end */
    js(f, &first, "live_end", s->writing_pid ? "live now" : s->status && s->status->end_stopped ? "live at stop"
                              : "leaked at exit");
    jkey(f, &first, "incomplete_sites"); fputs(h->err ? "true" : "false", f);
    ju(f, &first, "markers_dropped", s->markers_dropped);
    fputs("},\"peaks\":{", f);
    first = 1;
    ju(f, &first, "heap", r->peak_live_bytes);
    ju(f, &first, "heap_t", rel(s, r->peak_live_t));
    ju(f, &first, "heap_objects", r->peak_live_count);
    ju(f, &first, "rss", s->peak_rss);
    ju(f, &first, "rss_t", rel(s, s->peak_rss_t));
    ju(f, &first, "rss_samples", s->rss_samples);
    ju(f, &first, "mmap_total", s->peak_mmap_total);
    ju(f, &first, "mmap_anon", s->peak_mmap_anon);
    ju(f, &first, "mmap_file", s->peak_mmap_file);
    ju(f, &first, "mmap_committed", s->peak_mmap_committed);
    ju(f, &first, "mmap_reserved", s->peak_mmap_reserved);
    ju(f, &first, "pool_out", s->pool_r.peak_outstanding_bytes);
    ju(f, &first, "pool_cached", s->pool_r.peak_cached_bytes);
    ju(f, &first, "pool_reserved", s->pool_r.peak_reserved_bytes);
    ju(f, &first, "pool_reserved_t", rel(s, s->pool_r.peak_reserved_t));
    ju(f, &first, "total_allocated", r->total_allocated_bytes);
    ju(f, &first, "allocations", r->allocs);
    ju(f, &first, "temporary", r->temporary);
    ju(f, &first, "leaked_bytes", r->leaked_bytes);
    ju(f, &first, "leaked_objects", r->leaked_count);
    /* leaks suppressed (suppress.h): out of the two above, shown apart */
    ju(f, &first, "suppressed_leaked_bytes", s->supp ? s->supp->bytes : 0);
    ju(f, &first, "suppressed_leaked_objects", s->supp ? s->supp->objects : 0);
    ju(f, &first, "unknown_frees", r->unmatched_frees);
    ju(f, &first, "failed_allocs", s->failed_allocs);
    jd(f, &first, "internal_frag", r->internal_frag);
    /* the moments the rows' "pk" describe (heap, RSS, pool outstanding, KV
     * blocks): the page opens its cursor on one of them */
    jkey(f, &first, "pk_t");
    fprintf(f, "[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", rel(s, h->peak_t[P_HEAP]), rel(s, h->peak_t[P_RSS]),
            rel(s, h->peak_t[P_POOL]), rel(s, h->peak_t[P_KV]));
    fputc('}', f);
}

static void write_timeline(FILE *f, const az_scan_t *s, const hb_t *h)
{
    int first = 1;
    fputs("\"tl\":{", f);
    ju(f, &first, "t0", rel(s, h->t0));
    ju(f, &first, "w", 1ull << h->shift);
    ju(f, &first, "n", h->used);
    size_t n = h->used, gs = sizeof(gauge_t), cs = sizeof(count_t);
#define G(name, field) jarr_u64(f, &first, name, h->g, n, gs, offsetof(gauge_t, field))
    G("heap", heap); G("anon", anon); G("file", file); G("committed", committed); G("reserved", reserved);
    G("rss", rss); G("pool_out", pool_out); G("pool_res", pool_res);
    G("kv_blocks", kv_blocks); G("kv_tokens", kv_tokens); G("kv_cap", kv_cap);
#undef G
    jarr_u64(f, &first, "heap_allocs", h->c, n, cs, offsetof(count_t, heap_allocs));
    jarr_u64(f, &first, "heap_bytes", h->c, n, cs, offsetof(count_t, heap_bytes));
    jarr_u64(f, &first, "kv_allocs", h->c, n, cs, offsetof(count_t, kv_allocs));
    fputc('}', f);
}

static void write_pools(FILE *f, const az_scan_t *s, const hb_t *h)
{
    size_t np = 0;
    const pm_pool_t *p = pm_pools(s->model, &np);
    size_t n = h->used, cs = sizeof(count_t);
    fputs("\"pools\":[", f);
    for (size_t i = 0; i < np; i++) {
        int first = 1;
        if (i) fputc(',', f);
        fputc('{', f);
        js(f, &first, "name", p[i].name);
        ju(f, &first, "id", p[i].id);
        jkey(f, &first, "kv"); fputs(p[i].kv ? "true" : "false", f);
        if (p[i].kv) {
            ju(f, &first, "block_size", p[i].block_size);
            ju(f, &first, "n_blocks", p[i].n_blocks);
            ju(f, &first, "block_bytes", p[i].block_bytes);
        } else {
            ju(f, &first, "cap", p[i].cap);
            ju(f, &first, "acquires", p[i].acquires);
            ju(f, &first, "hits", p[i].hits);
            ju(f, &first, "req_bytes", p[i].req_bytes);
            ju(f, &first, "granted_bytes", p[i].granted_bytes);
            ju(f, &first, "oversized", p[i].oversized);
            ju(f, &first, "peak_out", p[i].peak_out);
            ju(f, &first, "peak_cached", p[i].peak_cached);
            if (i < MAX_POOLS) {         /* the last slot also counts the pools past MAX_POOLS */
                jarr_u64(f, &first, "acq", h->c, n, cs, offsetof(count_t, acq) + i * sizeof(uint64_t));
                jarr_u64(f, &first, "miss", h->c, n, cs, offsetof(count_t, miss) + i * sizeof(uint64_t));
                jarr_u64(f, &first, "req", h->c, n, cs, offsetof(count_t, req) + i * sizeof(uint64_t));
                jarr_u64(f, &first, "granted", h->c, n, cs, offsetof(count_t, granted) + i * sizeof(uint64_t));
            }
        }
        fputc('}', f);
    }
    fputc(']', f);
    const az_result_t *r = &s->heap_r, *pr = &s->pool_r;
    int first = 1;
    fputs(",\"pool_totals\":{", f);
    ju(f, &first, "acquires", pr->acquires);
    ju(f, &first, "hits", pr->hits);
    ju(f, &first, "misses", pr->misses);
    ju(f, &first, "backing_allocs", pr->backing_allocs);
    ju(f, &first, "peak_live", pr->peak_live_bytes);
    jd(f, &first, "reserved_over_live", pr->reserved_over_live);
    jd(f, &first, "internal_frag", pr->internal_frag);
    jd(f, &first, "internal_frag_avg", pr->internal_frag_avg);
    fputs("},\"kv\":{", f);
    first = 1;
    jkey(f, &first, "has"); fputs(r->has_kv ? "true" : "false", f);
    ju(f, &first, "peak_blocks", r->peak_kv_blocks);
    ju(f, &first, "peak_t", rel(s, r->peak_kv_t));
    jd(f, &first, "util", r->kv_utilization);
    jd(f, &first, "util_at_peak", r->kv_utilization_at_peak);
    jd(f, &first, "waste", r->kv_waste_ratio);
    if (r->kv_step_samples) jd(f, &first, "util_per_step", r->kv_utilization_per_step);
    ju(f, &first, "decode_steps", r->decode_steps);
    ju(f, &first, "orphans", s->kv_orphans);
    fputs("},\"phases\":[", f);
    for (size_t i = 0; i < r->n_phases; i++) {
        const az_phase_t *x = &r->phases[i];
        first = 1;
        fputs(i ? ",{" : "{", f);
        js(f, &first, "name", x->name);
        ju(f, &first, "count", x->count);
        ju(f, &first, "heap_calls", x->heap_calls);
        ju(f, &first, "heap_bytes", x->heap_bytes);
        ju(f, &first, "time", x->time_ns);
        fputc('}', f);
    }
    fputc(']', f);
}

/* Text of an HTML element (the title): control bytes and bytes that are
 * not UTF-8 as the text escapes of common/escape.h (the page says UTF-8),
 * then the markup characters as entities. */
static void html_text(FILE *f, const char *s)
{
    char *e = psc_esc_text_dup(s);
    for (const char *p = e ? e : ""; *p; p++) {
        if (*p == '<') fputs("&lt;", f);
        else if (*p == '>') fputs("&gt;", f);
        else if (*p == '&') fputs("&amp;", f);
        else fputc(*p, f);
    }
    free(e);
}

static const char *const csp =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'";

static int write_page(FILE *f, const az_scan_t *s, hb_t *h, az_sv_t *v, const az_jdoc_t *replay,
                      const char *trace, az_html_out_t *out)
{
    const pst_header_t *hd = s->hdr;
    const char *exe = hd && hd->exe && hd->exe[0] ? hd->exe : trace;
    const char *base = strrchr(exe, '/');
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"", f);
    fputs(csp, f);
    fputs("\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"poolscope html\">\n<title>poolscope: ", f);
    html_text(f, base ? base + 1 : exe);
    fputs("</title>\n<style>\n", f);
    fputs(az_html_app_css, f);
    fputs("</style>\n</head>\n<body>\n<div id=\"app\"><p class=\"loading\">Loading the report…</p></div>\n"
          "<noscript>This report draws its figures with JavaScript; enable it for this file.</noscript>\n"
          "<script type=\"application/json\" id=\"ps-data\">{", f);
    size_t hidden = 0;
    write_meta(f, s, h, trace);
    fputc(',', f);
    write_timeline(f, s, h);
    fputc(',', f);
    write_pools(f, s, h);
    fputc(',', f);
    int rc = write_lanes(f, s, &hidden);
    fprintf(f, ",\"lanes_hidden\":%zu,", hidden);
    if (!rc) rc = write_sites(f, h, v, out, s->supp);
    fputs(",\"replay\":", f);
    if (replay) jv_write(f, az_json_root(replay), 0); else fputs("null", f);
    fputs("}</script>\n<script>\n", f);
    fputs(az_html_app_js, f);
    fputs("</script>\n</body>\n</html>\n", f);
    return rc;
}

int az_html(const az_html_opts_t *o, az_html_out_t *out, char *msg, size_t msglen)
{
    memset(out, 0, sizeof *out);
    if (!o->trace || !o->out) { snprintf(msg, msglen, "a trace and an output are needed"); return PSC_EINVAL; }
    const char *inputs[2] = { o->trace, o->replay_json };
    int rc = psc_out_check_inputs(o->out, inputs, 2, msg, msglen);
    if (rc) return rc;
    az_jdoc_t *replay = NULL;
    if (o->replay_json) {
        char eb[200];
        if (!(replay = az_json_parse_file(o->replay_json, &rc, eb, sizeof eb))) {
            snprintf(msg, msglen, "%s: %s", o->replay_json, eb);
            return rc ? rc : PSC_ECORRUPT;
        }
        const az_jv_t *pol = az_json_get(az_json_root(replay), "policies");
        if (!pol || pol->type != AZ_JV_ARR) {
            snprintf(msg, msglen, "%s: no \"policies\" array (expected replay --json output)", o->replay_json);
            az_json_free(replay);
            return PSC_ECORRUPT;
        }
    }
    hb_t *h = malloc(sizeof *h);
    if (!h || hb_init(h)) {
        if (h) hb_free(h);
        free(h);
        az_json_free(replay);
        snprintf(msg, msglen, "out of memory");
        return PSC_ENOMEM;
    }
    az_scan_opts_t so = { .keep_markers = MAX_MARKS, .phase_frames = o->phase_frames,
                          .n_phase_frames = o->n_phase_frames, .progress = o->progress,
                          .progress_ctx = o->progress_ctx, .hook = hook, .hook_ctx = h };
    az_scan_t *s = NULL;
    if ((rc = az_scan_file(o->trace, &so, &s, msg, msglen))) goto fail;
    h->scan = s;
    char wb[8];
    out->warning = az_scan_warning(s, wb, sizeof wb) != NULL;
    if (s->writing_pid) az_scan_warning(s, out->live, sizeof out->live);
    out->events = s->events;
    az_sym_t *sym = NULL;
    if (s->hdr->stacks != PST_STACKS_NONE) {
        sym = az_sym_open(s->r);
    }
    az_sv_t *v = az_sv_create(s, sym, &o->sites);
    psc_out_t *po = NULL;
    if (!v) { rc = PSC_ENOMEM; snprintf(msg, msglen, "out of memory"); }
    else rc = psc_out_open(o->out, inputs, 2, o->out_special ? PSC_OUT_SPECIAL : 0, &po, msg, msglen);
    if (!rc) {
        FILE *f = psc_out_stream(po);
        if (!f) { rc = PSC_EIO; snprintf(msg, msglen, "cannot write %s", o->out); psc_out_abort(po); }
        else if ((rc = write_page(f, s, h, v, replay, o->trace, out))) {
            snprintf(msg, msglen, "out of memory");
            psc_out_abort(po);
        } else {
            long pos = ftell(f);
            out->bytes = pos > 0 ? (uint64_t)pos : 0;
            rc = psc_out_commit(po, msg, msglen);
        }
    }
    az_sv_destroy(v);
    az_sym_destroy(sym);
fail:
    az_scan_free(s);
    hb_free(h);
    free(h);
    az_json_free(replay);
    return rc;
}

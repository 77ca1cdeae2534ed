/* sqlite_load.c — the SQLite loader's hook on the scan (see
 * sqlite_internal.h).
 *
 * Each event is stored once, in the table that describes it best (see
 * sqlite.c): heap objects through the ring (an object's row waits for
 * its free, rows go in in id order), every other event as an event_rows
 * row, markers and the scopes they make, pool events, KV block events,
 * RSS samples; the threads' rows after the pass.
 */
#include "sqlite_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/format.h"

thread_t *sqi_thread_of(loader_t *L, uint32_t stream)
{
    if (L->last_thread && stream == L->last_stream) return L->last_thread;
    int is_new;
    /* key stream + 1: the map's key 0 works but is kept apart */
    thread_t *t = psc_map_put_sz(&L->threads, (uint64_t)stream + 1, &is_new, sizeof(thread_t));
    if (!t) { sqi_fail(L, SQLITE_NOMEM); return NULL; }
    L->last_stream = stream;
    L->last_thread = t;
    return t;
}



/* Write the rows at the ring's head that are complete. */
static void heap_drain(loader_t *L)
{
    /* the first rows wait until the ring is full (or the end): the address
     * bases are chosen from them */
    if (!L->base_set && L->tail - L->head < RING) return;
    while (L->head < L->tail) {
        hrow_t *h = &L->ring[L->head & (RING - 1)];
        if (!h->freed) break;
        sqi_heap_emit(L, h);
        L->head++;
    }
}

/* The object o (erased from the live map by the caller) is freed by event
 * id (ev) with kind fk. */
static void heap_close(loader_t *L, const live_t *o, uint64_t addr, const pst_event_t *ev, uint64_t id,
                       unsigned fk, int counted)
{
    int64_t fts = sqi_ts_off(L, id, ev->ts);
    uint64_t gap = id - o->id;
    int xfree = ev->stream != o->stream;
    uint64_t bits = (o->bits & ~LV_RAW_OLD) | fk << HB_FK_SHIFT | (counted ? 0u : HB_FREE_OUT) |
                    (xfree ? ((uint64_t)ev->stream + 1) << HB_XSHIFT : 0);
    thread_t *t = sqi_thread_of(L, ev->stream);
    if (t) { t->frees++; t->xfrees += (uint64_t)xfree; }
    if (o->seq >= L->head) {
        hrow_t *h = &L->ring[o->seq & (RING - 1)];
        h->fts = fts;
        h->gap = gap;
        h->bits = bits;
        h->freed = 1;
        if (o->seq == L->head) heap_drain(L);
        return;
    }
    /* written open (it outlived the ring): complete it in place, its kind
     * now with how it was freed (raw as heap_emit found it); the row may
     * still be in the batch */
    int64_t off;
    int raw = sqi_addr_encode(L, addr, &off) || (o->bits & LV_RAW_OLD);
    int64_t kind = sqi_kind_of(L, o->stack, o->stream, bits, raw);
    if (L->heap.n) sqi_fail(L, sqi_batch_flush(&L->heap));
    sqlite3_stmt *s = L->st[ST_HUPD];
    sqlite3_bind_int64(s, 1, fts);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)gap);
    sqlite3_bind_int64(s, 3, kind);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)o->id);
    sqi_fail(L, sqi_step_reset(s));
    L->stats->heap_updates++;
}

static void heap_free(loader_t *L, const pst_event_t *ev, uint64_t id, uint64_t addr, unsigned fk, int counted)
{
    live_t *p = psc_map_get_sz(&L->live, addr, sizeof(live_t));
    if (!p) return;              /* not live: an unmatched free, as report counts it */
    live_t o = *p;
    psc_map_erase_sz(&L->live, p, sizeof(live_t));
    heap_close(L, &o, addr, ev, id, fk, counted);
}

/* A new object. 1 when the event also needs its own event_rows row. */
static int heap_alloc(loader_t *L, const pst_event_t *ev, uint64_t id, const pm_op_t *op, int counted)
{
    const uint64_t *f = ev->f;
    live_t *p = psc_map_get_sz(&L->live, op->key, sizeof(live_t));
    if (p) {                     /* allocated again without a free: the old object ends here */
        live_t o = *p;
        psc_map_erase_sz(&L->live, p, sizeof(live_t));
        heap_close(L, &o, op->key, ev, id, FK_REUSED, counted);
    }
    if (L->tail - L->head == RING) {
        /* the oldest waiting object outlived RING allocations: write it
         * open, complete it by id when it is freed */
        sqi_heap_emit(L, &L->ring[L->head & (RING - 1)]);
        L->head++;
        heap_drain(L);
    }
    hrow_t *h = &L->ring[L->tail & (RING - 1)];
    memset(h, 0, sizeof *h);
    h->id = id;
    h->ts = sqi_ts_off(L, id, ev->ts);
    h->size = op->bytes;
    h->addr = op->key;
    h->stack = ev->stack;
    h->stream = ev->stream;
    h->bits = (ev->type & HB_TYPE) | (counted ? 0u : HB_ALLOC_OUT);
    switch (ev->type) {
    case PST_EV_CALLOC: case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN:
        h->arg = f[1]; h->has_arg = 1; break;
    case PST_EV_REALLOC: h->old = f[0]; h->has_old = 1; break;
    case PST_EV_REALLOCARRAY: h->old = f[0]; h->has_old = 1; h->bits |= HB_ALLOC_EV; break;
    default: break;
    }
    int is_new;
    live_t *o = psc_map_put_sz(&L->live, op->key, &is_new, sizeof(live_t));
    if (!o) { sqi_fail(L, SQLITE_NOMEM); return 0; }
    *o = (live_t){ .seq = L->tail, .id = id, .size = op->bytes, .stream = ev->stream,
                   .stack = ev->stack,
                   .bits = (uint32_t)h->bits | (h->has_old && sqi_old_overflows(h->addr, h->old) ? LV_RAW_OLD : 0) };
    L->tail++;
    thread_t *t = sqi_thread_of(L, ev->stream);
    if (t) { t->allocs++; t->bytes += op->bytes; }
    return (h->bits & HB_ALLOC_EV) != 0;
}

/* ---- other events ------------------------------------------------------------------------ */

/* One event_rows row: the event's fields as columns (addr: returned /
 * freed address, tensor id; old_addr: realloc / mremap source; size:
 * requested bytes; arg: alignment, mmap flags, calloc nmemb, arm). */
static void other_row(loader_t *L, const pst_event_t *ev, uint64_t id, int counted)
{
    const uint64_t *f = ev->f;
    uint64_t addr = 0, old = 0, size = 0, arg = 0;
    int has_addr = 1, has_old = 0, has_size = 1, has_arg = 0;
    switch (ev->type) {
    case PST_EV_MALLOC: case PST_EV_VALLOC: case PST_EV_PVALLOC: addr = f[0]; size = f[1]; break;
    case PST_EV_CALLOC: addr = f[0]; size = f[1] * f[2]; arg = f[1]; has_arg = 1; break;
    case PST_EV_REALLOC: old = f[0]; addr = f[1]; size = f[2]; has_old = 1; break;
    case PST_EV_REALLOCARRAY: old = f[0]; addr = f[1]; size = f[2] * f[3]; arg = f[2]; has_old = has_arg = 1; break;
    case PST_EV_FREE: addr = f[0]; has_size = 0; break;
    case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN:
        addr = f[0]; size = f[2]; arg = f[1]; has_arg = 1; break;
    case PST_EV_MMAP: addr = f[0]; size = f[1]; arg = f[3]; has_arg = 1; break;
    case PST_EV_MUNMAP: case PST_EV_MADVISE: addr = f[0]; size = f[1]; break;
    case PST_EV_MREMAP: old = f[0]; addr = f[2]; size = f[3]; arg = f[1]; has_old = has_arg = 1; break;
    case PST_EV_TENSOR_ACQUIRE: addr = f[0]; size = f[4]; arg = f[1]; has_arg = 1; break;
    case PST_EV_TENSOR_RELEASE: addr = f[0]; has_size = 0; break;
    default: has_addr = 0; has_size = 0; break;
    }
    batch_t *b = &L->other;
    int64_t *v = b->v[b->n];
    v[0] = (int64_t)id;
    v[1] = (int64_t)ev->ts;
    v[2] = ev->stream;
    v[3] = ev->type;
    v[4] = ev->stack;
    v[5] = (int64_t)addr;
    v[6] = (int64_t)old;
    v[7] = (int64_t)size;
    v[8] = (int64_t)arg;
    v[9] = counted;
    b->null[b->n] = (ev->stack ? 0u : 1u << 4) | (has_addr ? 0u : 1u << 5) | (has_old ? 0u : 1u << 6) |
                    (has_size ? 0u : 1u << 7) | (has_arg ? 0u : 1u << 8);
    if (++b->n == BATCH) sqi_fail(L, sqi_batch_flush(b));
    L->stats->other_rows++;
}

static void scope_row(loader_t *L, const open_scope_t *o, const char *name, int has_end, uint64_t end_id,
                      uint64_t end_ts)
{
    sqlite3_stmt *s = L->st[ST_SCOPE];
    sqi_bind_u64(s, 1, o->id);
    if (has_end) sqi_bind_u64(s, 2, end_id); else sqlite3_bind_null(s, 2);
    sqlite3_bind_text(s, 3, name ? name : "?", -1, SQLITE_TRANSIENT);
    sqi_bind_u64(s, 4, o->instance);
    sqi_bind_u64(s, 5, o->ts);
    if (has_end) { sqi_bind_u64(s, 6, end_ts); sqlite3_bind_int64(s, 7, (sqlite3_int64)(end_ts - o->ts)); }
    else { sqlite3_bind_null(s, 6); sqlite3_bind_null(s, 7); }
    sqi_bind_u64(s, 8, o->tid);
    /* what happened while it was open (to the end of the trace if it never closed) */
    sqi_bind_u64(s, 9, L->calls - o->calls);
    sqi_bind_u64(s, 10, L->allocs - o->allocs);
    sqi_bind_u64(s, 11, L->bytes - o->bytes);
    sqi_fail(L, sqi_step_reset(s));
    L->stats->scopes++;
}

/* Scopes: a begin waits for the latest end of its name and instance. */
static void scope_event(loader_t *L, const pst_event_t *ev, uint64_t id)
{
    if (ev->type == PST_EV_MARK_BEGIN) {
        if (L->n_open == MAX_OPEN_SCOPES) {     /* never closed, most likely: written open */
            scope_row(L, &L->open[0], pst_string(L->scan->r, (uint32_t)L->open[0].name), 0, 0, 0);
            memmove(L->open, L->open + 1, (L->n_open - 1) * sizeof *L->open);
            L->n_open--;
        }
        L->open[L->n_open++] = (open_scope_t){ ev->f[0], ev->f[1], id, ev->ts, ev->tid, L->calls, L->allocs, L->bytes };
        return;
    }
    for (size_t i = L->n_open; i-- > 0;) {
        open_scope_t *o = &L->open[i];
        if (o->name != ev->f[0] || o->instance != ev->f[1]) continue;
        scope_row(L, o, ev->str, 1, id, ev->ts);
        memmove(o, o + 1, (L->n_open - i - 1) * sizeof *o);
        L->n_open--;
        return;
    }
}

/* The heap peak as the metrics take it: the live set after a counted
 * event, and when counting starts, the live set just before it. */
static void peak_take(loader_t *L, uint64_t live, uint64_t count, uint64_t id, uint64_t ts)
{
    if (live > L->peak_bytes || (L->peak_bytes == 0 && count && L->peak_count == 0)) {
        L->peak_bytes = live;
        L->peak_count = count;
        L->peak_id = id;
        L->peak_ts = ts;
    }
}

void sqi_hook(void *ctx, const pst_event_t *ev, const az_scan_t *scan)
{
    loader_t *L = ctx;
    if (L->rc) return;
    L->scan = scan;              /* its reader resolves the strings of scopes */
    uint64_t id = ++L->id;
    const uint64_t *f = ev->f;
    int counted = scan->events_counted != L->counted;     /* the scan counted it: in the selection */
    L->counted = scan->events_counted;
    L->stats->events_in_window += (uint64_t)counted;
    L->stats->events++;
    thread_t *th = sqi_thread_of(L, ev->stream);
    if (th) {
        th->events++;
        th->tid = ev->tid;
        if (ev->type == PST_EV_THREAD_START && !th->started) {
            th->started = 1;
            th->start_ts = ev->ts;
            th->parent = f[1];
            th->has_parent = f[1] != 0;
        } else if (!th->started && th->events == 1) {
            th->start_ts = ev->ts;
        }
        if (ev->type == PST_EV_THREAD_END) { th->ended = 1; th->end_ts = ev->ts; }
        if (ev->type == PST_EV_THREAD_NAME) th->name = (uint32_t)f[0];
    }

    /* heap objects: the model's operations, as the scan applied them */
    int covered = 0;
    const pm_step_t *stp = scan->step;
    if (stp && scan->step_is_call) L->calls++;   /* a thread stack's mapping is not a call */
    for (size_t i = 0; stp && i < stp->n_ops; i++) {
        const pm_op_t *o = &stp->ops[i];
        if (o->kind == PM_HEAP_FREE) {
            unsigned fk = ev->type == PST_EV_FREE ? (ev->stack ? FK_FREE_EV : FK_FREE) :
                          ev->type == PST_EV_REALLOCARRAY ? FK_REALLOCARRAY : FK_REALLOC;
            size_t before = psc_map_count(&L->live);
            heap_free(L, ev, id, o->key, fk, counted);
            if (fk == FK_FREE && psc_map_count(&L->live) < before) covered = 1;
        } else if (o->kind == PM_HEAP_ALLOC) {
            covered = !heap_alloc(L, ev, id, o, counted);
            L->allocs++;
            L->bytes += o->bytes;
        }
    }
    /* pool events: their pools row is their events row */
    if (ev->type >= PST_EV_POOL_CREATE && ev->type <= PST_EV_POOL_DESTROY) covered = 1;
    if (!covered) other_row(L, ev, id, counted);

    const az_state_t *hs = az_state(scan->heap);
    if (counted) {
        if (!L->prev_counted) peak_take(L, L->prev_live, L->prev_count, id - 1, L->prev_ts);
        peak_take(L, hs->live_bytes, hs->live_count, id, ev->ts);
    }
    L->prev_counted = counted;
    L->prev_live = hs->live_bytes;
    L->prev_count = hs->live_count;
    L->prev_ts = ev->ts;

    sqlite3_stmt *s;
    switch (ev->type) {
    case PST_EV_MARK_POINT: case PST_EV_MARK_BEGIN: case PST_EV_MARK_END: {
        s = L->st[ST_MARK];
        sqi_bind_u64(s, 1, id);
        sqi_bind_u64(s, 2, ev->ts);
        sqi_bind_u64(s, 3, ev->tid);
        sqlite3_bind_text(s, 4, ev->str ? ev->str : "?", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 5, ev->type == PST_EV_MARK_POINT ? "point" : ev->type == PST_EV_MARK_BEGIN ? "begin" : "end", -1, SQLITE_STATIC);
        if (ev->type == PST_EV_MARK_POINT) sqlite3_bind_null(s, 6); else sqi_bind_u64(s, 6, f[1]);
        if (ev->n_payload) {
            char pl[256];
            int o = snprintf(pl, sizeof pl, "[");
            for (uint32_t i = 0; i < ev->n_payload && o < 200; i++)
                o += snprintf(pl + o, sizeof pl - (size_t)o, "%s%lld", i ? "," : "", (long long)ev->payload[i]);
            snprintf(pl + o, sizeof pl - (size_t)o, "]");
            sqlite3_bind_text(s, 7, pl, -1, SQLITE_TRANSIENT);
        } else {
            sqlite3_bind_null(s, 7);
        }
        sqi_fail(L, sqi_step_reset(s));
        L->stats->markers++;
        if (ev->type != PST_EV_MARK_POINT) scope_event(L, ev, id);
        break;
    }
    case PST_EV_POOL_CREATE: case PST_EV_POOL_ACQUIRE: case PST_EV_POOL_RECLAIM:
    case PST_EV_POOL_BACKING_ALLOC: case PST_EV_POOL_BACKING_FREE: case PST_EV_POOL_DESTROY: {
        s = L->st[ST_POOL];
        sqlite3_clear_bindings(s);
        sqi_bind_u64(s, 1, id);
        sqi_bind_u64(s, 2, ev->ts);
        sqi_bind_u64(s, 3, f[0]);
        static const char *const kinds[] = { "create", "acquire", "reclaim", "backing_alloc", "backing_free", "destroy" };
        sqlite3_bind_text(s, 4, kinds[ev->type - PST_EV_POOL_CREATE], -1, SQLITE_STATIC);
        if (ev->type == PST_EV_POOL_CREATE) {
            sqlite3_bind_text(s, 13, ev->str ? ev->str : "", -1, SQLITE_TRANSIENT);
            sqi_bind_u64(s, 9, f[3]);                     /* cap bytes in granted_bytes */
            sqi_bind_u64(s, 6, f[2]);                     /* arms */
        } else if (ev->type == PST_EV_POOL_ACQUIRE) {
            sqi_bind_u64(s, 5, f[1]); sqi_bind_u64(s, 6, f[2]); sqi_bind_u64(s, 7, f[3]);
            sqi_bind_u64(s, 8, f[6]); sqi_bind_u64(s, 9, f[7]); sqi_bind_u64(s, 10, f[8]);
        } else if (ev->type == PST_EV_POOL_RECLAIM) {
            sqi_bind_u64(s, 5, f[1]); sqi_bind_u64(s, 6, f[2]); sqi_bind_u64(s, 7, f[3]);
            sqi_bind_u64(s, 9, f[4]); sqi_bind_u64(s, 11, f[5]);
        } else if (ev->type != PST_EV_POOL_DESTROY) {
            sqi_bind_u64(s, 5, f[1]); sqi_bind_u64(s, 12, f[2]); sqi_bind_u64(s, 9, f[3]);
        }
        sqi_bind_u64(s, 14, ev->stream);
        if (ev->stack) sqi_bind_u64(s, 15, ev->stack);
        sqlite3_bind_int(s, 16, counted);
        sqi_fail(L, sqi_step_reset(s));
        L->stats->pool_rows++;
        break;
    }
    case PST_EV_KVB_ALLOC: case PST_EV_KVB_FREE: case PST_EV_KVB_SHRINK: case PST_EV_KVB_TOKENS: {
        s = L->st[ST_BLOCK];
        const char *kind = ev->type == PST_EV_KVB_ALLOC ? "alloc" : ev->type == PST_EV_KVB_FREE ? "free" :
                           ev->type == PST_EV_KVB_SHRINK ? "retire" : "tokens";
        uint32_t n = ev->type == PST_EV_KVB_TOKENS ? 1 : ev->n_ids;
        for (uint32_t i = 0; i < n; i++) {
            sqlite3_clear_bindings(s);
            sqi_bind_u64(s, 1, id);
            sqi_bind_u64(s, 2, ev->ts);
            sqi_bind_u64(s, 3, f[0]);
            sqlite3_bind_text(s, 4, kind, -1, SQLITE_STATIC);
            sqi_bind_u64(s, 5, f[1]);
            if (ev->type == PST_EV_KVB_TOKENS) { sqi_bind_u64(s, 6, f[2]); sqi_bind_u64(s, 7, f[3]); }
            else sqi_bind_u64(s, 6, ev->ids[i]);
            if (ev->type == PST_EV_KVB_ALLOC) {
                /* the tokens the pool put in the block at allocation, as
                 * the scan (which took this event first) models them */
                uint32_t used;
                if (az_scan_kv_used(scan, f[0], ev->ids[i], &used)) sqi_bind_u64(s, 7, used);
                sqlite3_bind_int64(s, 8, (sqlite3_int64)f[3]);
                sqi_bind_u64(s, 9, f[2]);
            }
            sqi_fail(L, sqi_step_reset(s));
            L->stats->block_rows++;
        }
        break;
    }
    case PST_EV_RSS:
        s = L->st[ST_RSS];
        sqi_bind_u64(s, 1, id); sqi_bind_u64(s, 2, ev->ts); sqi_bind_u64(s, 3, f[0]); sqi_bind_u64(s, 4, f[1]); sqi_bind_u64(s, 5, f[2]);
        sqi_fail(L, sqi_step_reset(s));
        L->stats->rss_rows++;
        break;
    default: break;
    }
}

/* After the pass: the objects still waiting (the open ones are leaks),
 * the rows still batched, the scopes never closed. */
void sqi_finish_rows(loader_t *L)
{
    while (L->head < L->tail && !L->rc) {
        sqi_heap_emit(L, &L->ring[L->head & (RING - 1)]);
        L->head++;
    }
    if (!L->rc) sqi_fail(L, sqi_batch_flush(&L->heap));
    if (!L->rc) sqi_fail(L, sqi_batch_flush(&L->other));
    for (size_t i = 0; i < L->n_open && !L->rc; i++)
        scope_row(L, &L->open[i], pst_string(L->scan->r, (uint32_t)L->open[i].name), 0, 0, 0);
    L->n_open = 0;
    /* what each thread leaked */
    size_t it = 0;
    void *val;
    while (psc_map_next(&L->live, &it, NULL, &val)) {
        const live_t *o = val;
        thread_t *t = sqi_thread_of(L, o->stream);
        if (t) { t->leaked++; t->leaked_bytes += o->size; }
    }
}

void sqi_threads_rows(loader_t *L, const az_scan_t *s)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(L->db, "INSERT INTO threads VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", -1, &q, NULL) != SQLITE_OK) {
        sqi_fail(L, SQLITE_ERROR);
        return;
    }
    size_t it = 0;
    uint64_t key;
    void *val;
    while (psc_map_next(&L->threads, &it, &key, &val)) {
        const thread_t *t = val;
        const char *name = t->name ? pst_string(s->r, t->name) : NULL;
        sqi_bind_u64(q, 1, key - 1);
        sqi_bind_u64(q, 2, t->tid);
        if (name) sqlite3_bind_text(q, 3, name, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(q, 3);
        if (t->has_parent) sqi_bind_u64(q, 4, t->parent); else sqlite3_bind_null(q, 4);
        sqi_bind_u64(q, 5, t->start_ts);
        if (t->ended) sqi_bind_u64(q, 6, t->end_ts); else sqlite3_bind_null(q, 6);
        sqi_bind_u64(q, 7, t->events);
        sqi_bind_u64(q, 8, t->allocs);
        sqi_bind_u64(q, 9, t->bytes);
        sqi_bind_u64(q, 10, t->frees);
        sqi_bind_u64(q, 11, t->xfrees);
        sqi_bind_u64(q, 12, t->leaked);
        sqi_bind_u64(q, 13, t->leaked_bytes);
        sqlite3_bind_int(q, 14, s->status->tracer_stream && key - 1 == s->status->tracer_stream);
        sqi_fail(L, sqi_step_reset(q));
        L->stats->threads++;
    }
    sqlite3_finalize(q);
}


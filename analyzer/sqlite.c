/* sqlite.c — trace -> SQLite (see sqlite.h and SCHEMA.md).
 *
 * One pass: the scan driver computes the metrics while its hook writes the
 * rows. Each event is stored once, in the table that describes it best:
 *
 *   heap_rows   one row per heap object (the malloc family), its
 *               allocation and its free together: the pairing is the
 *               scan's own (the model's PM_HEAP_ALLOC / PM_HEAP_FREE ops,
 *               in the reader's merged order, an allocation at a live
 *               address closing the object there as the metrics do), so
 *               the table agrees with `report` (peak, leaks, counts);
 *   pools       a pool event's row is its only row;
 *   event_rows  every other event (and the few heap events no object
 *               row shows: unmatched frees, failed calls, a free with a
 *               stack, realloc(p, 0), reallocarray);
 *   markers, blocks, rss: details; scopes, threads: made by the hook.
 *
 * The analyst reads views over them (`allocations`, `events`, `sites`):
 * the storage is packed (the stack, the stream, the call type, how the
 * object was freed, the selection flags and the freeing thread when it is
 * another one as one small number, heap_kinds; the free as a gap in event
 * ids; addresses as offsets from a few bases; the allocation's and the
 * free's times each from the first heap event of its block of 256 ids,
 * heap_ts), which keeps the database near 3.2x the (compressed) trace
 * instead of 75 bytes per event. SQLite stores an integer in 0 to 8 bytes
 * by its value and every column costs a byte of the row's header, so
 * every packed field is placed where its usual value is 0 or small, and
 * what repeats from row to row is in heap_kinds.
 *
 * A heap row is complete when its object is freed, but rows go in in id
 * order (appends: full pages, no b-tree seeks), so rows wait in a ring of
 * RING rows until every older one is complete. An object that outlives
 * RING younger allocations is written open (lifetime NULL) and updated by
 * id when it is freed: memory stays bounded by the ring and the live set,
 * and the updates are as rare as such long-lived objects.
 *
 * Rows go in through prepared statements, BATCH rows per multi-row INSERT,
 * in one transaction with journal and sync off; the connection is opened
 * without SQLite's mutexes (one thread). Stacks, frames (symbolized with
 * libdw), modules, threads and the metrics table are written after the
 * pass; indexes last, and only those the documented queries use (the
 * rest with az_sql_opts_t.indexes, `sql --indexes`).
 *
 * A selection (--phase, --from/--to) is the scan's own: an event is in the
 * window when the scan counted it (s->events_counted moved), so the
 * in_window columns and the metrics table agree with `report` event by
 * event. Rows outside it are kept: the frees and markers of the selection
 * mean something only with what came before them.
 *
 * The loader is split by concern (sqlite_internal.h): the SQL text in
 * sqlite_schema.c, the packing in sqlite_pack.c, the hook in
 * sqlite_load.c; this file drives them and writes the tables made after
 * the pass.
 */
#include "sqlite.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gate.h"
#include "hashmap.h"
#include "outfile.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "sites.h"
#include "sqlite_internal.h"
#include "symbolize.h"

/* ---- after the pass ---------------------------------------------------------------------- */

static void metrics_rows(sqlite3 *db, sqlite3_stmt *s, const az_jv_t *v, const char *prefix, az_sql_stats_t *st)
{
    for (const az_jv_t *c = v->child; c; c = c->next) {
        if (!c->key) continue;
        char p[256];
        snprintf(p, sizeof p, "%s%s%s", prefix, *prefix ? "." : "", c->key);
        if (c->type == AZ_JV_OBJ && strcmp(p, "sites") != 0) metrics_rows(db, s, c, p, st);
        else if (c->type == AZ_JV_NUM || c->type == AZ_JV_BOOL) {
            sqlite3_bind_text(s, 1, p, -1, SQLITE_TRANSIENT);
            sqlite3_bind_double(s, 2, c->num);
            sqlite3_step(s);
            sqlite3_reset(s);
            st->metrics++;
        }
    }
}

/* One meta row. */
static void meta_put(sqlite3_stmt *q, const char *key, const char *value)
{
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, value, -1, SQLITE_TRANSIENT);
    sqlite3_step(q);
    sqlite3_reset(q);
}

static void meta_u64(sqlite3_stmt *q, const char *key, uint64_t v)
{
    char n[32];
    snprintf(n, sizeof n, "%llu", (unsigned long long)v);
    meta_put(q, key, n);
}

/* What the selection was, for meta: "selection" in words, and each part
 * by itself (phase, from_ns, to_ns) so that a query can use it. */
static void meta_selection(sqlite3_stmt *q, const az_scan_opts_t *so, uint64_t in_window)
{
    char buf[512];
    size_t k = 0;
    buf[0] = 0;
    if (so->phase) k += (size_t)snprintf(buf, sizeof buf, "phase %s", so->phase);
    if (so->window && k < sizeof buf) {
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%sfrom %llu ns", k ? ", " : "",
                              (unsigned long long)so->from);
        if (so->to != UINT64_MAX && k < sizeof buf)
            snprintf(buf + k, sizeof buf - k, " to %llu ns", (unsigned long long)so->to);
    }
    meta_put(q, "selection", buf[0] ? buf : "none");
    if (so->phase) meta_put(q, "phase", so->phase);
    if (so->window) {
        meta_u64(q, "from_ns", so->from);
        if (so->to != UINT64_MAX) meta_u64(q, "to_ns", so->to);
    }
    meta_u64(q, "events_in_window", in_window);
}


int az_sql_write_progress(const char *trace, const char *dbpath, az_sql_stats_t *st, int *warning,
                          void (*progress)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes),
                          void *progress_ctx, char *msg, size_t msglen)
{
    az_sql_opts_t o = { .progress = progress, .progress_ctx = progress_ctx };
    return az_sql_write_opts(trace, dbpath, &o, st, warning, msg, msglen);
}

int az_sql_write_opts(const char *trace, const char *dbpath, const az_sql_opts_t *o, az_sql_stats_t *st,
                      int *warning, char *msg, size_t msglen)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(st, 0, sizeof *st);
    *warning = 0;
    /* The database is built in a temporary file beside DB and renamed over
     * it only when complete (common/outfile.h): DB is never removed, a DB
     * that is the trace is refused, and the trace is read once (a pipe). */
    psc_out_t *dbo;
    const char *inputs[1] = { trace };
    /* an existing DB is replaced only when it is a database: `-o notes.txt`
     * on a file the user wrote is a slip, not a request to lose it */
    struct stat ost;
    FILE *old = stat(dbpath, &ost) == 0 && S_ISREG(ost.st_mode) && ost.st_size > 0 ? fopen(dbpath, "rb") : NULL;
    if (old) {                   /* (a FIFO or device is outfile's matter: never opened here) */
        char magic[16] = { 0 };
        size_t got = fread(magic, 1, sizeof magic, old);
        fclose(old);
        if (got > 0 && (got < sizeof magic || memcmp(magic, "SQLite format 3", 16) != 0)) {
            snprintf(msg, msglen, "%s exists and is not an SQLite database: not replacing it", dbpath);
            return PSC_EINVAL;
        }
    }
    int err = psc_out_open(dbpath, inputs, 1, 0, &dbo, msg, msglen);
    if (err) return err;
    loader_t *L = calloc(1, sizeof *L);
    if (L) {
        L->ring = malloc(RING * sizeof *L->ring);
        L->open = malloc(MAX_OPEN_SCOPES * sizeof *L->open);
    }
    if (!L || !L->ring || !L->open || psc_map_init(&L->live, sizeof(live_t), 4096, 0, NULL) ||
        psc_map_init(&L->threads, sizeof(thread_t), 16, 0, NULL) ||
        psc_map_init(&L->kinds, sizeof(int64_t), 64, 0, NULL) || psc_map_init(&L->pairs, sizeof(uint64_t), 64, 0, NULL)) {
        if (L) {
            free(L->ring); free(L->open);
            psc_map_free(&L->live); psc_map_free(&L->threads); psc_map_free(&L->kinds); psc_map_free(&L->pairs);
        }
        free(L);
        psc_out_abort(dbo);
        snprintf(msg, msglen, "out of memory");
        return PSC_ENOMEM;
    }
    L->stats = st;
    int rc = PSC_EIO;
    az_scan_t *s = NULL;
    if (sqlite3_open_v2(psc_out_path(dbo), &L->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        snprintf(msg, msglen, "cannot create database %s: %s", dbpath, L->db ? sqlite3_errmsg(L->db) : "error");
        goto out;
    }
    /* temp_store stays FILE: with MEMORY, SQLite's sorter (CREATE INDEX)
     * mallocs every record and never spills; with FILE it packs records
     * into one arena and spills sorted runs only beyond cache_size.
     * 16 KiB pages: each heap row's insert seeks its place from the root
     * (SQLite's rowid check), and with 4 KiB pages the tree of a few
     * million rows is one level deeper: 2.8% fewer instructions for the
     * load of the 1.6 M-event stress trace, the same bytes at 10 M events
     * (a small database grows by its few small tables' larger pages) */
    if (sqi_exec(L->db, "PRAGMA page_size=16384; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8192;"
                    "PRAGMA temp_store=FILE; PRAGMA locking_mode=EXCLUSIVE;", msg, msglen) ||
        sqi_exec(L->db, sqi_schema, msg, msglen) || sqi_exec(L->db, "BEGIN", msg, msglen))
        goto out;
    for (int i = 0; i < ST_N; i++)
        if (sqlite3_prepare_v2(L->db, sqi_stmt_sql[i], -1, &L->st[i], NULL) != SQLITE_OK) {
            snprintf(msg, msglen, "sqlite: %s", sqlite3_errmsg(L->db));
            goto out;
        }
    if (sqi_batch_prepare(L->db, &L->heap, "heap_rows", 8) != SQLITE_OK ||
        sqi_batch_prepare(L->db, &L->other, "event_rows", 10) != SQLITE_OK) {
        snprintf(msg, msglen, "sqlite: %s", sqlite3_errmsg(L->db));
        goto out;
    }
    az_scan_opts_t so = { .hook = sqi_hook, .hook_ctx = L };
    if (o) {
        so.progress = o->progress;
        so.progress_ctx = o->progress_ctx;
        so.phase = o->phase;
        so.phase_frames = o->phase_frames;
        so.n_phase_frames = o->n_phase_frames;
        so.window = o->window;
        so.from = o->from;
        so.to = o->to;
    }
    if ((rc = az_scan_file(trace, &so, &s, msg, msglen))) goto out;
    L->scan = s;
    if (!L->rc) sqi_finish_rows(L);

    rc = PSC_EIO;
    if (L->rc) { snprintf(msg, msglen, "sqlite insert failed: %s", sqlite3_errstr(L->rc)); goto out; }
    char wb[8];
    *warning = az_scan_warning(s, wb, sizeof wb) != NULL;

    sqi_threads_rows(L, s);
    /* event types, meta */
    sqlite3_stmt *q;
    sqlite3_prepare_v2(L->db, "INSERT INTO event_types VALUES(?,?)", -1, &q, NULL);
    for (unsigned t = 0; t < PST_EV_MAX; t++) {
        const char *n = pst_event_name(t);
        if (!n) continue;
        sqlite3_bind_int(q, 1, (int)t); sqlite3_bind_text(q, 2, n, -1, SQLITE_STATIC);
        sqlite3_step(q); sqlite3_reset(q);
    }
    sqlite3_finalize(q);
    sqlite3_prepare_v2(L->db, "INSERT INTO meta VALUES(?,?)", -1, &q, NULL);
    meta_put(q, "schema_version", "5");   /* 5: stacks as prefix-tree nodes; 4: frames a view over
                                           * interned rows; 3: frames.python */
    meta_put(q, "trace", trace);
    meta_put(q, "exe", s->hdr->exe ? s->hdr->exe : "");
    meta_u64(q, "pid", s->hdr->pid);
    meta_put(q, "complete", s->status->complete ? "1" : "0");
    meta_selection(q, &so, st->events_in_window);
    /* the heap peak of the selection: the event after which the live set
     * was largest (first reached), as report's peak_live_bytes */
    meta_u64(q, "peak_live_bytes", L->peak_bytes);
    meta_u64(q, "peak_live_objects", L->peak_count);
    meta_u64(q, "peak_live_event_id", L->peak_id);
    meta_u64(q, "peak_live_ts_ns", L->peak_ts);
    {
        char b[MAX_BASES * 24 + 1];
        size_t k = 0;
        b[0] = 0;
        for (int r = 0; r < L->n_base; r++)
            k += (size_t)snprintf(b + k, sizeof b - k, "%s%lld", r ? " " : "", (long long)L->base[r]);
        meta_put(q, "addr_bases", b);     /* heap_rows.addr_off's, by index */
    }
    sqlite3_finalize(q);

    /* modules */
    size_t nm = 0;
    const pst_module_t *mods = pst_modules(s->r, &nm);
    sqlite3_prepare_v2(L->db, "INSERT INTO modules VALUES(?,?,?,?,?,?,?)", -1, &q, NULL);
    for (size_t i = 0; i < nm; i++) {
        char bid[130] = "";
        for (uint32_t k = 0; k < mods[i].build_id_len && k < 64; k++) snprintf(bid + 2 * k, 3, "%02x", mods[i].build_id[k]);
        sqlite3_bind_int64(q, 1, (sqlite3_int64)i + 1);
        sqlite3_bind_text(q, 2, mods[i].path ? mods[i].path : "", -1, SQLITE_TRANSIENT);
        sqi_bind_u64(q, 3, mods[i].base); sqi_bind_u64(q, 4, mods[i].size);
        sqlite3_bind_text(q, 5, bid, -1, SQLITE_TRANSIENT);
        sqi_bind_u64(q, 6, mods[i].load_ts);
        if (mods[i].unload_ts == UINT64_MAX) sqlite3_bind_null(q, 7); else sqi_bind_u64(q, 7, mods[i].unload_ts);
        sqlite3_step(q); sqlite3_reset(q);
        st->modules++;
    }
    sqlite3_finalize(q);

    /* stacks and their symbolized frames, interned (sqlite_frames.c) */
    if ((L->rc = sqi_stack_rows(L, s, st))) {
        snprintf(msg, msglen, "sqlite insert failed: %s", sqlite3_errstr(L->rc));
        goto out;
    }

    /* metrics: the report JSON's numeric leaves by dotted path (of the
     * selection: the scan counted only it) */
    {
        char *jb = NULL;
        size_t jl = 0;
        FILE *m = open_memstream(&jb, &jl);
        if (m) {
            az_report_opts_t ro = { .top = 1, .no_symbols = 1 };
            az_report_json(s, &ro, m);
            fclose(m);
            int e2;
            az_jdoc_t *d = az_json_parse(jb, jl, &e2, NULL, 0);
            if (d) {
                sqlite3_prepare_v2(L->db, "INSERT INTO metrics VALUES(?,?)", -1, &q, NULL);
                metrics_rows(L->db, q, az_json_root(d), "", st);
                sqlite3_finalize(q);
                az_json_free(d);
            }
            free(jb);
        }
    }
    if (L->rc) { snprintf(msg, msglen, "sqlite insert failed: %s", sqlite3_errstr(L->rc)); goto out; }
    if (sqi_exec_template(L, sqi_views, "h.", msg, msglen)) goto out;
    if (sqi_exec(L->db, sqi_indexes, msg, msglen) || (o && o->indexes && sqi_exec_template(L, sqi_extra_indexes, "", msg, msglen)) ||
        sqi_exec(L->db, "COMMIT", msg, msglen))
        goto out;
    rc = 0;
out:
    for (int i = 0; i < ST_N; i++) sqlite3_finalize(L->st[i]);
    sqi_batch_finalize(&L->heap);
    sqi_batch_finalize(&L->other);
    if (L->db && sqlite3_close(L->db) != SQLITE_OK && !rc) {
        snprintf(msg, msglen, "cannot close database %s", dbpath);
        rc = PSC_EIO;
    }
    az_scan_free(s);
    psc_map_free(&L->live);
    psc_map_free(&L->threads);
    psc_map_free(&L->kinds);
    psc_map_free(&L->pairs);
    free(L->far);
    free(L->ring);
    free(L->open);
    free(L);
    if (rc) psc_out_abort(dbo);
    else rc = psc_out_commit(dbo, msg, msglen);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    st->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return rc;
}

int az_sql_write(const char *trace, const char *dbpath, az_sql_stats_t *st, int *warning,
                 char *msg, size_t msglen)
{
    return az_sql_write_progress(trace, dbpath, st, warning, NULL, NULL, msg, msglen);
}


/* sqlite.c — trace -> SQLite (see sqlite.h and SCHEMA.md).
 *
 * One pass: the scan driver computes the metrics while its hook inserts
 * each event (and its pool / block / marker / rss detail rows) through
 * prepared statements inside one transaction, with journal and sync off
 * during the load. `events` rows are buffered and written EV_BATCH at a
 * time by one multi-row INSERT with integers bound (no text, no per-row
 * allocation on our side); the connection is opened without SQLite's
 * mutexes (it is used by this thread only). Stacks, frames (symbolized with libdw), modules and the
 * metrics table are written after the pass; indexes last, so the inserts
 * never maintain a b-tree besides the table's own.
 *
 * A selection (--phase, --from/--to) is the scan's own: the hook marks a
 * row in_window when the scan counted its event (s->events_counted moved),
 * so the column and the metrics table agree with `report` event by event.
 * Rows outside it are kept: the frees and markers of the selection mean
 * something only with what came before them.
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
#include "outfile.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "sites.h"
#include "symbolize.h"

static const char *const schema =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);\n"
    "CREATE TABLE event_types(type INTEGER PRIMARY KEY, name TEXT);\n"
    "CREATE TABLE events(id INTEGER PRIMARY KEY, ts INTEGER, tid INTEGER, stream INTEGER,\n"
    "  type INTEGER, stack INTEGER, addr INTEGER, old_addr INTEGER, size INTEGER, arg INTEGER,\n"
    "  in_window INTEGER);\n"
    "CREATE TABLE modules(id INTEGER PRIMARY KEY, path TEXT, base INTEGER, size INTEGER,\n"
    "  build_id TEXT, load_ts INTEGER, unload_ts INTEGER);\n"
    "CREATE TABLE stacks(id INTEGER PRIMARY KEY, depth INTEGER, site TEXT);\n"
    "CREATE TABLE frames(stack_id INTEGER, level INTEGER, pc INTEGER, function TEXT, file TEXT,\n"
    "  line INTEGER, module TEXT, frame INTEGER, inlined INTEGER, PRIMARY KEY(stack_id, level)) WITHOUT ROWID;\n"
    "CREATE TABLE markers(event_id INTEGER PRIMARY KEY, ts INTEGER, tid INTEGER, name TEXT,\n"
    "  kind TEXT, instance INTEGER, payload TEXT);\n"
    "CREATE TABLE pools(event_id INTEGER PRIMARY KEY, ts INTEGER, pool_id INTEGER, kind TEXT,\n"
    "  pool_seq INTEGER, arm INTEGER, buf_id INTEGER, req_bytes INTEGER, granted_bytes INTEGER,\n"
    "  hit INTEGER, cached INTEGER, ptr INTEGER, name TEXT);\n"
    "CREATE TABLE blocks(event_id INTEGER, ts INTEGER, pool_id INTEGER, kind TEXT,\n"
    "  pool_seq INTEGER, block_id INTEGER, n_used INTEGER, owner INTEGER, stream INTEGER);\n"
    "CREATE TABLE rss(event_id INTEGER PRIMARY KEY, ts INTEGER, rss INTEGER, anon INTEGER, file INTEGER);\n"
    "CREATE TABLE metrics(name TEXT PRIMARY KEY, value REAL);\n";

static const char *const indexes =
    "CREATE INDEX events_type_ts ON events(type, ts);\n"
    "CREATE INDEX events_addr ON events(addr);\n"
    "CREATE INDEX events_stack ON events(stack);\n"
    "CREATE INDEX markers_name_ts ON markers(name, ts);\n"
    "CREATE INDEX pools_pool_ts ON pools(pool_id, ts);\n"
    "CREATE INDEX blocks_pool_block ON blocks(pool_id, block_id, ts);\n"
    "CREATE INDEX frames_function ON frames(function);\n";

enum { ST_EV, ST_MARK, ST_POOL, ST_BLOCK, ST_RSS, ST_N };
static const char *const stmt_sql[ST_N] = {
    "INSERT INTO events VALUES(?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO markers VALUES(?,?,?,?,?,?,?)",
    "INSERT INTO pools VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO blocks VALUES(?,?,?,?,?,?,?,?,?)",
    "INSERT INTO rss VALUES(?,?,?,?,?)",
};

/* `events` rows go in batches: one multi-row INSERT of EV_BATCH rows
 * (the rest at the end row by row), which spares SQLite its per-statement
 * work (cursor open, seek, halt, reset) on all but one row in EV_BATCH. */
#define EV_COLS  11
#define EV_BATCH 64

typedef struct ev_row {
    int64_t  v[EV_COLS];
    uint32_t null;               /* bit c: column c + 1 is NULL */
} ev_row_t;

typedef struct loader {
    sqlite3 *db;
    sqlite3_stmt *st[ST_N];
    sqlite3_stmt *ev_batch;      /* INSERT INTO events VALUES (...) x EV_BATCH */
    az_sql_stats_t *stats;
    int rc;                      /* first SQLite error */
    uint64_t id;
    uint64_t counted;            /* the scan's events_counted after the latest event */
    size_t n_rows;
    ev_row_t rows[EV_BATCH];
} loader_t;

static void bind_u64(sqlite3_stmt *s, int i, uint64_t v) { sqlite3_bind_int64(s, i, (sqlite3_int64)v); }

static void step(loader_t *L, sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE && !L->rc) L->rc = rc;
    sqlite3_reset(s);
}

static void bind_row(sqlite3_stmt *s, int first, const ev_row_t *r)
{
    for (int c = 0; c < EV_COLS; c++) {
        if (r->null & (1u << c)) sqlite3_bind_null(s, first + c);
        else sqlite3_bind_int64(s, first + c, r->v[c]);
    }
}

/* Write the buffered events rows: one statement for a full batch, row by
 * row otherwise (the end of the trace). */
static void flush_rows(loader_t *L)
{
    if (L->n_rows == EV_BATCH && L->ev_batch) {
        for (size_t i = 0; i < L->n_rows; i++) bind_row(L->ev_batch, (int)(i * EV_COLS) + 1, &L->rows[i]);
        step(L, L->ev_batch);
    } else {
        for (size_t i = 0; i < L->n_rows; i++) {
            bind_row(L->st[ST_EV], 1, &L->rows[i]);
            step(L, L->st[ST_EV]);
        }
    }
    L->n_rows = 0;
}

static char *batch_sql(void)
{
    static const char head[] = "INSERT INTO events VALUES", row[] = "(?,?,?,?,?,?,?,?,?,?,?)";
    size_t len = sizeof head + EV_BATCH * sizeof row + 1;
    char *q = malloc(len), *o = q;
    if (!q) return NULL;
    memcpy(o, head, sizeof head - 1);
    o += sizeof head - 1;
    for (int i = 0; i < EV_BATCH; i++) {
        if (i) *o++ = ',';
        memcpy(o, row, sizeof row - 1);
        o += sizeof row - 1;
    }
    *o = 0;
    return q;
}

static void hook(void *ctx, const pst_event_t *ev, const az_scan_t *scan)
{
    loader_t *L = ctx;
    if (L->rc) return;
    uint64_t id = ++L->id;
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
    ev_row_t *row = &L->rows[L->n_rows++];
    row->v[0] = (int64_t)id;
    row->v[1] = (int64_t)ev->ts;
    row->v[2] = (int64_t)ev->tid;
    row->v[3] = (int64_t)ev->stream;
    row->v[4] = ev->type;
    row->v[5] = (int64_t)ev->stack;
    row->v[6] = (int64_t)addr;
    row->v[7] = (int64_t)old;
    row->v[8] = (int64_t)size;
    row->v[9] = (int64_t)arg;
    row->v[10] = scan->events_counted != L->counted;   /* the scan counted it: in the selection */
    L->counted = scan->events_counted;
    L->stats->events_in_window += (uint64_t)row->v[10];
    /* id NULL: SQLite assigns max(id) + 1, which is `id` (rows go in in
     * order from 1), and appends without a seek */
    row->null = 1u | (ev->stack ? 0u : 1u << 5) | (has_addr ? 0u : 1u << 6) | (has_old ? 0u : 1u << 7) |
                (has_size ? 0u : 1u << 8) | (has_arg ? 0u : 1u << 9);
    if (L->n_rows == EV_BATCH) flush_rows(L);
    L->stats->events++;
    sqlite3_stmt *s;

    switch (ev->type) {
    case PST_EV_MARK_POINT: case PST_EV_MARK_BEGIN: case PST_EV_MARK_END: {
        s = L->st[ST_MARK];
        bind_u64(s, 1, id);
        bind_u64(s, 2, ev->ts);
        bind_u64(s, 3, ev->tid);
        sqlite3_bind_text(s, 4, ev->str ? ev->str : "?", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 5, ev->type == PST_EV_MARK_POINT ? "point" : ev->type == PST_EV_MARK_BEGIN ? "begin" : "end", -1, SQLITE_STATIC);
        if (ev->type == PST_EV_MARK_POINT) sqlite3_bind_null(s, 6); else bind_u64(s, 6, f[1]);
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
        step(L, s);
        L->stats->markers++;
        break;
    }
    case PST_EV_POOL_CREATE: case PST_EV_POOL_ACQUIRE: case PST_EV_POOL_RECLAIM:
    case PST_EV_POOL_BACKING_ALLOC: case PST_EV_POOL_BACKING_FREE: case PST_EV_POOL_DESTROY: {
        s = L->st[ST_POOL];
        sqlite3_clear_bindings(s);
        bind_u64(s, 1, id);
        bind_u64(s, 2, ev->ts);
        bind_u64(s, 3, f[0]);
        static const char *const kinds[] = { "create", "acquire", "reclaim", "backing_alloc", "backing_free", "destroy" };
        sqlite3_bind_text(s, 4, kinds[ev->type - PST_EV_POOL_CREATE], -1, SQLITE_STATIC);
        if (ev->type == PST_EV_POOL_CREATE) {
            sqlite3_bind_text(s, 13, ev->str ? ev->str : "", -1, SQLITE_TRANSIENT);
            bind_u64(s, 9, f[3]);                     /* cap bytes in granted_bytes */
            bind_u64(s, 6, f[2]);                     /* arms */
        } else if (ev->type == PST_EV_POOL_ACQUIRE) {
            bind_u64(s, 5, f[1]); bind_u64(s, 6, f[2]); bind_u64(s, 7, f[3]);
            bind_u64(s, 8, f[6]); bind_u64(s, 9, f[7]); bind_u64(s, 10, f[8]);
        } else if (ev->type == PST_EV_POOL_RECLAIM) {
            bind_u64(s, 5, f[1]); bind_u64(s, 6, f[2]); bind_u64(s, 7, f[3]);
            bind_u64(s, 9, f[4]); bind_u64(s, 11, f[5]);
        } else if (ev->type != PST_EV_POOL_DESTROY) {
            bind_u64(s, 5, f[1]); bind_u64(s, 12, f[2]); bind_u64(s, 9, f[3]);
        }
        step(L, s);
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
            bind_u64(s, 1, id);
            bind_u64(s, 2, ev->ts);
            bind_u64(s, 3, f[0]);
            sqlite3_bind_text(s, 4, kind, -1, SQLITE_STATIC);
            bind_u64(s, 5, f[1]);
            if (ev->type == PST_EV_KVB_TOKENS) { bind_u64(s, 6, f[2]); bind_u64(s, 7, f[3]); }
            else bind_u64(s, 6, ev->ids[i]);
            if (ev->type == PST_EV_KVB_ALLOC) {
                /* the tokens the pool put in the block at allocation, as
                 * the scan (which took this event first) models them */
                uint32_t used;
                if (az_scan_kv_used(scan, f[0], ev->ids[i], &used)) bind_u64(s, 7, used);
                sqlite3_bind_int64(s, 8, (sqlite3_int64)f[3]);
                bind_u64(s, 9, f[2]);
            }
            step(L, s);
            L->stats->block_rows++;
        }
        break;
    }
    case PST_EV_RSS:
        s = L->st[ST_RSS];
        bind_u64(s, 1, id); bind_u64(s, 2, ev->ts); bind_u64(s, 3, f[0]); bind_u64(s, 4, f[1]); bind_u64(s, 5, f[2]);
        step(L, s);
        L->stats->rss_rows++;
        break;
    default: break;
    }
}

static int exec(sqlite3 *db, const char *sql, char *msg, size_t msglen)
{
    char *e = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK) {
        snprintf(msg, msglen, "sqlite: %s", e ? e : "error");
        sqlite3_free(e);
        return PSC_EIO;
    }
    return 0;
}

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

/* What the selection was, for meta: "selection" in words, and each part
 * by itself (phase, from_ns, to_ns) so that a query can use it. */
static void meta_selection(sqlite3_stmt *q, const az_scan_opts_t *so, uint64_t in_window)
{
    char buf[512], n[32];
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
        snprintf(n, sizeof n, "%llu", (unsigned long long)so->from);
        meta_put(q, "from_ns", n);
        if (so->to != UINT64_MAX) {
            snprintf(n, sizeof n, "%llu", (unsigned long long)so->to);
            meta_put(q, "to_ns", n);
        }
    }
    snprintf(n, sizeof n, "%llu", (unsigned long long)in_window);
    meta_put(q, "events_in_window", n);
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
    loader_t L = { .stats = st };
    if (sqlite3_open_v2(psc_out_path(dbo), &L.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        snprintf(msg, msglen, "cannot create database %s: %s", dbpath, L.db ? sqlite3_errmsg(L.db) : "error");
        sqlite3_close(L.db);
        psc_out_abort(dbo);
        return PSC_EIO;
    }
    int rc = PSC_EIO;
    az_scan_t *s = NULL;
    /* temp_store stays FILE: with MEMORY, SQLite's sorter (CREATE INDEX)
     * mallocs every record and never spills; with FILE it packs records
     * into one arena and spills sorted runs only beyond cache_size */
    if (exec(L.db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;"
                   "PRAGMA temp_store=FILE; PRAGMA locking_mode=EXCLUSIVE;", msg, msglen) ||
        exec(L.db, schema, msg, msglen) || exec(L.db, "BEGIN", msg, msglen))
        goto out;
    for (int i = 0; i < ST_N; i++)
        if (sqlite3_prepare_v2(L.db, stmt_sql[i], -1, &L.st[i], NULL) != SQLITE_OK) {
            snprintf(msg, msglen, "sqlite: %s", sqlite3_errmsg(L.db));
            goto out;
        }
    {
        char *q = batch_sql();
        int prc = q ? sqlite3_prepare_v2(L.db, q, -1, &L.ev_batch, NULL) : SQLITE_NOMEM;
        free(q);
        if (prc != SQLITE_OK) { snprintf(msg, msglen, "sqlite: %s", sqlite3_errmsg(L.db)); goto out; }
    }
    az_scan_opts_t so = { .hook = hook, .hook_ctx = &L };
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
    if (!L.rc) flush_rows(&L);

    rc = PSC_EIO;
    if (L.rc) { snprintf(msg, msglen, "sqlite insert failed: %s", sqlite3_errstr(L.rc)); goto out; }
    char wb[8];
    *warning = az_scan_warning(s, wb, sizeof wb) != NULL;

    /* event types, meta */
    sqlite3_stmt *q;
    sqlite3_prepare_v2(L.db, "INSERT INTO event_types VALUES(?,?)", -1, &q, NULL);
    for (unsigned t = 0; t < PST_EV_MAX; t++) {
        const char *n = pst_event_name(t);
        if (!n) continue;
        sqlite3_bind_int(q, 1, (int)t); sqlite3_bind_text(q, 2, n, -1, SQLITE_STATIC);
        sqlite3_step(q); sqlite3_reset(q);
    }
    sqlite3_finalize(q);
    sqlite3_prepare_v2(L.db, "INSERT INTO meta VALUES(?,?)", -1, &q, NULL);
    char buf[64];
    const char *kv[][2] = {
        { "trace", trace }, { "exe", s->hdr->exe ? s->hdr->exe : "" },
        { "pid", (snprintf(buf, sizeof buf, "%llu", (unsigned long long)s->hdr->pid), buf) },
    };
    for (size_t i = 0; i < 3; i++) {
        sqlite3_bind_text(q, 1, kv[i][0], -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, kv[i][1], -1, SQLITE_TRANSIENT);
        sqlite3_step(q); sqlite3_reset(q);
    }
    meta_put(q, "complete", s->status->complete ? "1" : "0");
    meta_selection(q, &so, st->events_in_window);
    sqlite3_finalize(q);

    /* modules */
    size_t nm = 0;
    const pst_module_t *mods = pst_modules(s->r, &nm);
    sqlite3_prepare_v2(L.db, "INSERT INTO modules VALUES(?,?,?,?,?,?,?)", -1, &q, NULL);
    for (size_t i = 0; i < nm; i++) {
        char bid[130] = "";
        for (uint32_t k = 0; k < mods[i].build_id_len && k < 64; k++) snprintf(bid + 2 * k, 3, "%02x", mods[i].build_id[k]);
        sqlite3_bind_int64(q, 1, (sqlite3_int64)i + 1);
        sqlite3_bind_text(q, 2, mods[i].path ? mods[i].path : "", -1, SQLITE_TRANSIENT);
        bind_u64(q, 3, mods[i].base); bind_u64(q, 4, mods[i].size);
        sqlite3_bind_text(q, 5, bid, -1, SQLITE_TRANSIENT);
        bind_u64(q, 6, mods[i].load_ts);
        if (mods[i].unload_ts == UINT64_MAX) sqlite3_bind_null(q, 7); else bind_u64(q, 7, mods[i].unload_ts);
        sqlite3_step(q); sqlite3_reset(q);
        st->modules++;
    }
    sqlite3_finalize(q);

    /* stacks and symbolized frames: one row per displayed frame (inline
     * chains expanded, innermost first), `frame` the recorded frame it
     * belongs to; the site as report names it */
    az_sym_t *sym = az_sym_create(mods, nm);
    az_sv_t *sv = az_sv_create(s, sym, NULL);
    az_frame_t *dfr = malloc(4096 * sizeof *dfr);
    sqlite3_stmt *qs, *qf;
    sqlite3_prepare_v2(L.db, "INSERT INTO stacks VALUES(?,?,?)", -1, &qs, NULL);
    sqlite3_prepare_v2(L.db, "INSERT INTO frames VALUES(?,?,?,?,?,?,?,?,?)", -1, &qf, NULL);
    for (uint32_t id = 1;; id++) {
        uint32_t depth = 0;
        const uint64_t *fr = pst_stack(s->r, id, &depth);
        if (!fr) break;
        char site[1400];
        const char *via = NULL, *lab = sv ? az_sv_label(sv, id, &via) : "(out of memory)";
        if (via) snprintf(site, sizeof site, "%s via %s", lab, via);
        else snprintf(site, sizeof site, "%s", lab);
        sqlite3_bind_int64(qs, 1, id); sqlite3_bind_int64(qs, 2, depth);
        sqlite3_bind_text(qs, 3, site, -1, SQLITE_TRANSIENT);
        sqlite3_step(qs); sqlite3_reset(qs);
        st->stacks++;
        size_t n = sv && dfr ? az_sv_frames(sv, id, dfr, 4096) : 0;
        for (size_t k = 0; k < n; k++) {
            const az_frame_t *fi = &dfr[k];
            sqlite3_bind_int64(qf, 1, id); sqlite3_bind_int64(qf, 2, (sqlite3_int64)k); bind_u64(qf, 3, fi->pc);
            if (fi->function) sqlite3_bind_text(qf, 4, fi->function, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(qf, 4);
            if (fi->file) sqlite3_bind_text(qf, 5, fi->file, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(qf, 5);
            if (fi->line) sqlite3_bind_int(qf, 6, fi->line); else sqlite3_bind_null(qf, 6);
            if (fi->module) sqlite3_bind_text(qf, 7, fi->module, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(qf, 7);
            sqlite3_bind_int64(qf, 8, fi->level);
            sqlite3_bind_int(qf, 9, fi->inlined);
            sqlite3_step(qf); sqlite3_reset(qf);
            st->frames++;
        }
    }
    sqlite3_finalize(qs);
    sqlite3_finalize(qf);
    free(dfr);
    az_sv_destroy(sv);
    az_sym_destroy(sym);

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
                sqlite3_prepare_v2(L.db, "INSERT INTO metrics VALUES(?,?)", -1, &q, NULL);
                metrics_rows(L.db, q, az_json_root(d), "", st);
                sqlite3_finalize(q);
                az_json_free(d);
            }
            free(jb);
        }
    }
    if (exec(L.db, indexes, msg, msglen) || exec(L.db, "COMMIT", msg, msglen)) goto out;
    rc = 0;
out:
    for (int i = 0; i < ST_N; i++) sqlite3_finalize(L.st[i]);
    sqlite3_finalize(L.ev_batch);
    if (sqlite3_close(L.db) != SQLITE_OK && !rc) { snprintf(msg, msglen, "cannot close database %s", dbpath); rc = PSC_EIO; }
    az_scan_free(s);
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

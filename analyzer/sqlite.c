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
#include "symbolize.h"

/* ---- schema ------------------------------------------------------------------- */

/* heap_kinds.bits: the allocating call (PST_EV_* 1..10), how the object was
 * freed, the selection flags inverted (0 = in the window) and the freeing
 * thread. A row names its (stack, stream, bits) by one small number,
 * heap_rows.kind: a program has few such triples, so one column of one
 * byte takes the place of three (and of the per-row bits SQLite would
 * store: a bits column cost 1.7 bytes a row). */
#define HB_TYPE      0x0fu
#define HB_FK_SHIFT  4
#define HB_ALLOC_OUT 0x80u       /* the allocation is outside the selection */
#define HB_FREE_OUT  0x100u      /* the free is outside the selection */
/* 0x200 is free: "addresses stored as they are" is the sign of heap_rows.kind
 * (a kind < 0), which the address expression of the views and of the
 * --indexes index reads from the row itself (an index takes no subquery) */
#define HB_ALLOC_EV  0x400u      /* the allocating event has its own event_rows row (a
                                  * reallocarray: old address and nmemb do not both fit) */
#define HB_XSHIFT    11          /* above: the freeing stream + 1 when it is not the
                                  * allocating one (a cross-thread free), else 0 */
enum {
    FK_FREE = 0,                 /* a FREE event, shown by the row itself in `events` */
    FK_FREE_EV = 1,              /* a FREE event with a stack: its row is in event_rows */
    FK_REALLOC = 2,              /* by a realloc (moved, resized or realloc(p, 0)) */
    FK_REALLOCARRAY = 3,
    FK_REUSED = 4,               /* its address was allocated again with no free between
                                  * (a free the trace lost): closed there, as report does */
};

static const char *const schema =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);\n"
    "CREATE TABLE event_types(type INTEGER PRIMARY KEY, name TEXT);\n"
    "CREATE TABLE heap_rows(id INTEGER PRIMARY KEY, ts INTEGER, fts INTEGER, size INTEGER, addr_off INTEGER,\n"
    "  kind INTEGER, gap INTEGER, extra INTEGER);\n"
    "CREATE TABLE heap_ts(blk INTEGER PRIMARY KEY, ts INTEGER);\n"
    "CREATE TABLE heap_kinds(kind INTEGER PRIMARY KEY, stack INTEGER, stream INTEGER, bits INTEGER);\n"
    "CREATE TABLE event_rows(id INTEGER PRIMARY KEY, ts INTEGER, stream INTEGER, type INTEGER, stack INTEGER,\n"
    "  addr INTEGER, old_addr INTEGER, size INTEGER, arg INTEGER, in_window INTEGER);\n"
    "CREATE TABLE threads(stream INTEGER PRIMARY KEY, tid INTEGER, name TEXT, parent_stream INTEGER,\n"
    "  start_ts_ns INTEGER, end_ts_ns INTEGER, events INTEGER, allocations INTEGER, allocated_bytes INTEGER,\n"
    "  frees INTEGER, cross_thread_frees INTEGER, leaked INTEGER, leaked_bytes INTEGER, tracer INTEGER);\n"
    "CREATE TABLE modules(id INTEGER PRIMARY KEY, path TEXT, base INTEGER, size_bytes INTEGER,\n"
    "  build_id TEXT, load_ts_ns INTEGER, unload_ts_ns INTEGER);\n"
    "CREATE TABLE stacks(id INTEGER PRIMARY KEY, depth INTEGER, site TEXT);\n"
    "CREATE TABLE frames(stack_id INTEGER, level INTEGER, pc INTEGER, function TEXT, file TEXT,\n"
    "  line INTEGER, module TEXT, frame INTEGER, inlined INTEGER, python INTEGER,\n"
    "  PRIMARY KEY(stack_id, level)) WITHOUT ROWID;\n"
    "CREATE TABLE markers(event_id INTEGER PRIMARY KEY, ts_ns INTEGER, tid INTEGER, name TEXT,\n"
    "  kind TEXT, instance INTEGER, payload TEXT);\n"
    "CREATE TABLE scopes(begin_id INTEGER PRIMARY KEY, end_id INTEGER, name TEXT, instance INTEGER,\n"
    "  begin_ts_ns INTEGER, end_ts_ns INTEGER, duration_ns INTEGER, tid INTEGER, heap_calls INTEGER,\n"
    "  allocations INTEGER, allocated_bytes INTEGER);\n"
    "CREATE TABLE pools(event_id INTEGER PRIMARY KEY, ts_ns INTEGER, pool_id INTEGER, kind TEXT,\n"
    "  pool_seq INTEGER, arm INTEGER, buf_id INTEGER, req_bytes INTEGER, granted_bytes INTEGER,\n"
    "  hit INTEGER, cached INTEGER, ptr INTEGER, name TEXT, stream INTEGER, stack INTEGER, in_window INTEGER);\n"
    "CREATE TABLE blocks(event_id INTEGER, ts_ns INTEGER, pool_id INTEGER, kind TEXT,\n"
    "  pool_seq INTEGER, block_id INTEGER, n_used INTEGER, owner INTEGER, stream INTEGER);\n"
    "CREATE TABLE rss(event_id INTEGER PRIMARY KEY, ts_ns INTEGER, rss_bytes INTEGER, anon_bytes INTEGER,\n"
    "  file_bytes INTEGER);\n"
    "CREATE TABLE metrics(name TEXT PRIMARY KEY, value REAL);\n";

/* The views SCHEMA.md documents, made after the rows: @A stands for the
 * address that heap_rows.addr_off encodes (offset from the base of its
 * region, see choose_bases and addr_encode), written in by exec_based.
 * A row's time, stack and stream are in small tables (heap_ts by block of
 * ids, heap_kinds by kind): looked up only when a query uses them. */
#define BITS   "(SELECT k.bits FROM heap_kinds k WHERE k.kind = h.kind)"
#define ADDR_OF(h) "(CASE WHEN " h "kind < 0 THEN " h "addr_off ELSE @A END)"
#define ADDR ADDR_OF("h.")
#define OLD  "(CASE WHEN " BITS " & 15 NOT IN (3, 4) THEN NULL WHEN h.kind < 0 THEN h.extra\n" \
             "    ELSE @A + h.extra END)"
#define ARG  "(CASE WHEN " BITS " & 15 IN (2, 6, 7, 8) THEN h.extra END)"
#define TS     "((SELECT b.ts FROM heap_ts b WHERE b.blk = h.id >> 8) + h.ts)"
/* the free's time, from the base of its own block: an offset from a base
 * near it takes 1.2 bytes where the lifetime took 2.4 */
#define FTS    "((SELECT b.ts FROM heap_ts b WHERE b.blk = (h.id + h.gap) >> 8) + h.fts)"
/* within one block (most short-lived objects) no lookup */
#define LIFE   "(CASE WHEN h.gap IS NULL THEN NULL WHEN (h.id + h.gap) >> 8 = h.id >> 8 THEN h.fts - h.ts\n" \
               "    ELSE " FTS " - " TS " END)"
#define STACK  "(SELECT k.stack FROM heap_kinds k WHERE k.kind = h.kind)"
#define STREAM "(SELECT k.stream FROM heap_kinds k WHERE k.kind = h.kind)"
#define FREE_STREAM "(CASE WHEN " BITS " >> 11 THEN (" BITS " >> 11) - 1 ELSE " STREAM " END)"
#define POOL_TYPE "(CASE p.kind WHEN 'create' THEN 24 WHEN 'acquire' THEN 25 WHEN 'reclaim' THEN 26\n" \
                  "    WHEN 'backing_alloc' THEN 27 WHEN 'backing_free' THEN 28 ELSE 29 END)"
#define TID(stream) "(SELECT t.tid FROM threads t WHERE t.stream = " stream ")"
static const char *const views =
    "CREATE VIEW allocations AS SELECT\n"
    "  h.id AS id, " BITS " & 15 AS type,\n"
    "  CASE " BITS " & 15 WHEN 1 THEN 'malloc' WHEN 2 THEN 'calloc' WHEN 3 THEN 'realloc'\n"
    "    WHEN 4 THEN 'reallocarray' WHEN 6 THEN 'posix_memalign' WHEN 7 THEN 'aligned_alloc'\n"
    "    WHEN 8 THEN 'memalign' WHEN 9 THEN 'valloc' WHEN 10 THEN 'pvalloc' END AS call,\n"
    "  " TS " AS ts_ns, " FTS " AS free_ts_ns, " LIFE " AS lifetime_ns,\n"
    "  h.size AS size_bytes,\n"
    "  CASE WHEN h.size >= 131072 THEN ((h.size + 4111) & ~4095) - 16\n"
    "    ELSE max((h.size + 23) & ~15, 32) - 8 END AS granted_bytes,\n"
    "  " ADDR " AS addr, " STACK " AS stack, (SELECT s.site FROM stacks s WHERE s.id = " STACK ") AS site,\n"
    "  " STREAM " AS stream, " TID(STREAM) " AS tid,\n"
    "  h.id + h.gap AS free_id,\n"
    "  CASE WHEN h.gap IS NULL THEN NULL ELSE CASE (" BITS " >> 4) & 7 WHEN 0 THEN 'free' WHEN 1 THEN 'free'\n"
    "    WHEN 2 THEN 'realloc' WHEN 3 THEN 'reallocarray' ELSE 'reused' END END AS freed_by,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN " FREE_STREAM " END AS free_stream,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN " TID(FREE_STREAM) " END AS free_tid,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN " BITS " >> 11 != 0 END AS cross_thread,\n"
    "  1 - ((" BITS " >> 7) & 1) AS in_window,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN 1 - ((" BITS " >> 8) & 1) END AS free_in_window,\n"
    "  " OLD " AS old_addr\n"
    "FROM heap_rows h;\n"
    "CREATE VIEW events AS\n"
    "SELECT h.id AS id, " TS " AS ts_ns, " STREAM " AS stream, " TID(STREAM) " AS tid,\n"
    "  " BITS " & 15 AS type, (SELECT n.name FROM event_types n WHERE n.type = " BITS " & 15) AS type_name,\n"
    "  " STACK " AS stack, " ADDR " AS addr, " OLD " AS old_addr, h.size AS size_bytes, " ARG " AS arg,\n"
    "  1 - ((" BITS " >> 7) & 1) AS in_window\n"
    "FROM heap_rows h WHERE " BITS " & 1024 = 0\n"
    "UNION ALL\n"
    "SELECT h.id + h.gap, " FTS ", " FREE_STREAM ",\n"
    "  " TID(FREE_STREAM) ", 5, 'free',\n"
    "  NULL, " ADDR ", NULL, NULL, NULL, 1 - ((" BITS " >> 8) & 1)\n"
    "FROM heap_rows h WHERE h.gap IS NOT NULL AND " BITS " & 112 = 0\n"
    "UNION ALL\n"
    "SELECT e.id, e.ts, e.stream, " TID("e.stream") ", e.type,\n"
    "  (SELECT n.name FROM event_types n WHERE n.type = e.type),\n"
    "  e.stack, e.addr, e.old_addr, e.size, e.arg, e.in_window\n"
    "FROM event_rows e\n"
    "UNION ALL\n"
    "SELECT p.event_id, p.ts_ns, p.stream, " TID("p.stream") ", " POOL_TYPE ",\n"
    "  (SELECT n.name FROM event_types n WHERE n.type = " POOL_TYPE "),\n"
    "  p.stack, NULL, NULL, NULL, NULL, p.in_window\n"
    "FROM pools p;\n"
    /* by kind first (integers, no lookup per row), then by stack, then by
     * label: a few rows to sort by text */
    "CREATE VIEW sites AS SELECT coalesce(s.site, '(no stack)') AS site, count(*) AS stacks,\n"
    "  sum(h.n) AS allocations, sum(h.bytes) AS bytes, max(h.max_size) AS max_size_bytes,\n"
    "  sum(h.leaked) AS leaked, total(h.leaked_bytes) AS leaked_bytes,\n"
    "  sum(h.life) * 1.0 / sum(h.freed) AS avg_lifetime_ns, max(h.max_life) AS max_lifetime_ns,\n"
    "  sum(h.xfree) AS cross_thread_frees\n"
    "FROM (SELECT k.stack AS stack, sum(g.n) AS n, sum(g.bytes) AS bytes, max(g.max_size) AS max_size,\n"
    "        sum(g.leaked) AS leaked, total(g.leaked_bytes) AS leaked_bytes, sum(g.life) AS life,\n"
    "        sum(g.freed) AS freed, max(g.max_life) AS max_life, sum(CASE WHEN k.bits >= 2048 THEN g.n ELSE 0 END) AS xfree\n"
    "      FROM (SELECT kind, count(*) AS n, sum(size) AS bytes, max(size) AS max_size, sum(gap IS NULL) AS leaked,\n"
    "              total(CASE WHEN gap IS NULL THEN size END) AS leaked_bytes, sum(life) AS life, count(life) AS freed,\n"
    "              max(life) AS max_life FROM (SELECT kind, size, gap, " LIFE " AS life FROM heap_rows h) GROUP BY kind) g\n"
    "      JOIN heap_kinds k ON k.kind = g.kind GROUP BY k.stack) h\n"
    "LEFT JOIN stacks s ON s.id = h.stack GROUP BY 1;\n";

/* the indexes the documented queries use (small tables) */
static const char *const indexes =
    "CREATE INDEX markers_name_ts ON markers(name, ts_ns);\n"
    "CREATE INDEX scopes_name ON scopes(name, begin_id);\n"
    "CREATE INDEX frames_function ON frames(function);\n";
/* more (--indexes), on the tables that grow with the trace: heap objects
 * by address and by kind (stack), other events by type and time, pool and block
 * events by pool */
static const char *const extra_indexes =
    /* the views' expressions, so that `allocations WHERE addr = ?` and
     * `events WHERE id BETWEEN ?` (the frees) use them */
    "CREATE INDEX heap_rows_addr ON heap_rows(" ADDR_OF("") ");\n"
    "CREATE INDEX heap_rows_free ON heap_rows(id + gap);\n"
    "CREATE INDEX heap_rows_kind ON heap_rows(kind);\n"
    "CREATE INDEX event_rows_type_ts ON event_rows(type, ts);\n"
    "CREATE INDEX pools_pool_ts ON pools(pool_id, ts_ns);\n"
    "CREATE INDEX blocks_pool_block ON blocks(pool_id, block_id, ts_ns);\n";

enum { ST_MARK, ST_POOL, ST_BLOCK, ST_RSS, ST_SCOPE, ST_HUPD, ST_TS, ST_KIND, ST_N };
static const char *const stmt_sql[ST_N] = {
    "INSERT INTO markers VALUES(?,?,?,?,?,?,?)",
    "INSERT INTO pools VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO blocks VALUES(?,?,?,?,?,?,?,?,?)",
    "INSERT INTO rss VALUES(?,?,?,?,?)",
    "INSERT INTO scopes VALUES(?,?,?,?,?,?,?,?,?,?,?)",
    "UPDATE heap_rows SET fts = ?1, gap = ?2, kind = ?3 WHERE id = ?4",
    "INSERT INTO heap_ts VALUES(?,?)",
    "INSERT INTO heap_kinds VALUES(?,?,?,?)",
};

/* ---- batched inserts ------------------------------------------------------------ */

/* Rows of one table go in BATCH at a time by one multi-row INSERT (the
 * rest at the end row by row): SQLite's per-statement work (cursor open,
 * seek, halt, reset) is paid once per BATCH rows. Integers only. */
#define BATCH    64
#define MAX_COLS 12

typedef struct batch {
    sqlite3_stmt *one, *many;
    int cols, n;
    int64_t v[BATCH][MAX_COLS];
    uint32_t null[BATCH];        /* bit c: column c is NULL */
} batch_t;

static int batch_prepare(sqlite3 *db, batch_t *b, const char *table, int cols)
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

static void batch_finalize(batch_t *b)
{
    sqlite3_finalize(b->one);
    sqlite3_finalize(b->many);
    b->one = b->many = NULL;
}

static int step_reset(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : rc;
}

static int batch_flush(batch_t *b)
{
    int rc = 0;
    if (b->n == BATCH) {
        int k = 1;
        for (int r = 0; r < BATCH; r++)
            for (int c = 0; c < b->cols; c++, k++) {
                if (b->null[r] & (1u << c)) sqlite3_bind_null(b->many, k);
                else sqlite3_bind_int64(b->many, k, b->v[r][c]);
            }
        rc = step_reset(b->many);
    } else {
        for (int r = 0; r < b->n && !rc; r++) {
            for (int c = 0; c < b->cols; c++) {
                if (b->null[r] & (1u << c)) sqlite3_bind_null(b->one, c + 1);
                else sqlite3_bind_int64(b->one, c + 1, b->v[r][c]);
            }
            rc = step_reset(b->one);
        }
    }
    b->n = 0;
    return rc;
}

/* ---- the loader's state ---------------------------------------------------------- */

/* A heap object waiting in the ring for its row to be written. */
typedef struct hrow {
    uint64_t id, size, addr, old, arg;
    int64_t  ts, fts;            /* the allocation's and the free's time, each from the base of its
                                  * block of ids (heap_ts; negative only if two threads' clocks disagree) */
    uint64_t gap;                /* free event id - id */
    uint64_t bits;               /* heap_rows.bits */
    uint32_t stack, stream;
    uint8_t  freed, has_old, has_arg;
} hrow_t;

/* A live heap object, by address. */
typedef struct live {
    uint64_t seq;                /* its allocation's place in the ring's order */
    uint64_t id, size;
    uint32_t stream;
    uint32_t bits;               /* the allocation's part of heap_kinds.bits, and LV_RAW_OLD */
    uint32_t stack;
} live_t;

/* live_t.bits: a realloc whose source address does not come back from
 * addr + (old - addr) in 64 bits: its row stores the addresses as they are */
#define LV_RAW_OLD 0x80000000u

typedef struct thread {
    uint64_t tid, parent, start_ts, end_ts;
    uint64_t events, allocs, bytes, frees, xfrees, leaked, leaked_bytes;
    uint32_t name;               /* THREAD_NAME string id, 0 none */
    uint8_t  started, ended, has_parent;
} thread_t;

/* An open marker scope (begin seen, end not yet). */
typedef struct open_scope {
    uint64_t name, instance, id, ts, tid;
    uint64_t calls, allocs, bytes;       /* the loader's running counts at the begin */
} open_scope_t;

#define MAX_BASES 15             /* address regions (heap_rows.addr_off's low 4 bits; 15 = none) */
#define RING (1u << 16)          /* heap rows waiting for older ones; power of two */
#define MAX_OPEN_SCOPES 65536
#define TS_SHIFT 8               /* heap_rows.ts is the time since heap_ts.ts of block id >> TS_SHIFT */

typedef struct loader {
    sqlite3 *db;
    sqlite3_stmt *st[ST_N];
    batch_t heap, other;
    az_sql_stats_t *stats;
    const az_scan_t *scan;
    int rc;                      /* first SQLite error (or SQLITE_NOMEM) */
    uint64_t id;
    uint64_t counted;            /* the scan's events_counted after the latest event */

    hrow_t *ring;
    int64_t base[MAX_BASES];     /* heap_rows.addr_off = (addr - base[r]) | r (see choose_bases) */
    int n_base, base_set;
    int last_base;               /* the base the latest address was nearest to */
    int base_shift;              /* bits of the base's index in addr_off (0 with one base) */
    uint64_t ts_blk, ts_base;    /* the latest heap_ts row: block, time */
    int ts_have;
    psc_map_t pairs;             /* stack << 32 | stream -> its index, from 0 (uint64_t) */
    psc_map_t kinds;             /* pair << 40 | bits << 1 | raw -> heap_kinds.kind (int64_t) */
    int64_t n_kinds, n_raw_kinds;        /* kinds handed out: 0, 1, ... and -1, -2, ... */
    struct far_kind { uint64_t pair, bits; int raw; int64_t kind; } *far;  /* keys too wide for */
    size_t n_far;                        /*   the map (crafted streams, millions of stacks) */
    uint64_t head, tail;         /* ring rows [head, tail) wait; ring[seq % RING] */
    psc_map_t live;              /* address -> live_t */
    psc_map_t threads;           /* stream -> thread_t */
    uint32_t last_stream;
    thread_t *last_thread;

    /* the heap peak, as the metrics take it (az_state of the scan's heap) */
    int prev_counted;
    uint64_t prev_live, prev_count, prev_ts;
    uint64_t peak_bytes, peak_count, peak_id, peak_ts;

    open_scope_t *open;
    size_t n_open;
    uint64_t calls, allocs, bytes;       /* running counts: hooked calls, heap objects, their bytes */
} loader_t;

static void fail(loader_t *L, int rc) { if (rc && !L->rc) L->rc = rc; }

static thread_t *thread_of(loader_t *L, uint32_t stream)
{
    if (L->last_thread && stream == L->last_stream) return L->last_thread;
    int is_new;
    /* key stream + 1: the map's key 0 works but is kept apart */
    thread_t *t = psc_map_put_sz(&L->threads, (uint64_t)stream + 1, &is_new, sizeof(thread_t));
    if (!t) { fail(L, SQLITE_NOMEM); return NULL; }
    L->last_stream = stream;
    L->last_thread = t;
    return t;
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
        int64_t b = a[run[r].at + run[r].len / 2] & ~(int64_t)15;
        if (b > 0 && b < INT64_MAX / 2) base[nb++] = b;
    }
    return nb;
}

static int addr_encode(const loader_t *L, uint64_t addr, int64_t *off);

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
            cost += addr_encode(&t, (uint64_t)a[i], &off) ? 8u : (uint64_t)int_bytes(off);
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
static int addr_encode(const loader_t *L, uint64_t addr, int64_t *off)
{
    /* the bases are sorted: the nearest is found from the latest one by a
     * step or two (a row's address is usually in the region of the last
     * row's), not by a scan of all of them */
    int64_t a = (int64_t)addr, d;
    int r = L->last_base, n = L->n_base;
    if ((addr & 15) || n == 0) return -1;
    if (r >= n) r = 0;
    while (r > 0 && a < L->base[r - 1] + (L->base[r] - L->base[r - 1]) / 2) r--;
    while (r + 1 < n && a >= L->base[r] + (L->base[r + 1] - L->base[r]) / 2) r++;
    ((loader_t *)L)->last_base = r;
    if (__builtin_sub_overflow(a, L->base[r], &d)) return -1;
    uint64_t hi = (uint64_t)(d >> 4);
    /* the view computes ((off >> S) << 4) + base: it must not overflow */
    if ((int64_t)(hi << L->base_shift) >> L->base_shift != d >> 4) return -1;
    *off = (int64_t)(hi << L->base_shift) | r;
    return 0;
}

/* A row's (stack, stream, bits) as one small integer, heap_kinds.kind:
 * a program has few such triples, and one column of one byte takes the
 * place of three (SQLite stores 0 and 1 in no byte at all, and the first
 * kinds are the common ones). raw: the row stores its addresses as they
 * are, told by a negative kind (-1, -2, ...), so that the views' address
 * expression reads the row alone. */
static int64_t kind_of(loader_t *L, uint32_t stack, uint32_t stream, uint64_t bits, int raw)
{
    int is_new;
    uint64_t *pp = psc_map_put_sz(&L->pairs, (uint64_t)stack << 32 | stream, &is_new, sizeof(uint64_t));
    if (!pp) { fail(L, SQLITE_NOMEM); return 0; }
    if (is_new) *pp = psc_map_count(&L->pairs) - 1;
    uint64_t pair = *pp;
    int64_t *k = NULL, kv = 0;
    if (pair < (1u << 23) && bits < ((uint64_t)1 << 39)) {
        k = psc_map_put_sz(&L->kinds, pair << 40 | bits << 1 | (uint64_t)raw, &is_new, sizeof(int64_t));
        if (!k) { fail(L, SQLITE_NOMEM); return 0; }
        if (!is_new) return *k;
    } else {
        for (size_t i = 0; i < L->n_far; i++)
            if (L->far[i].pair == pair && L->far[i].bits == bits && L->far[i].raw == raw) return L->far[i].kind;
        struct far_kind *f = realloc(L->far, (L->n_far + 1) * sizeof *f);
        if (!f) { fail(L, SQLITE_NOMEM); return 0; }
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
    fail(L, step_reset(s));
    return kv;
}

/* A realloc's source as heap_rows.extra, old - addr: 1 when that would not
 * come back from addr + extra in SQLite's 64-bit integers (the row then
 * stores both addresses as they are). */
static int old_overflows(uint64_t addr, uint64_t old)
{
    int64_t d, back;
    return __builtin_sub_overflow((int64_t)old, (int64_t)addr, &d) || __builtin_add_overflow((int64_t)addr, d, &back);
}

/* The time ts of heap event id (an allocation or a free) as an offset
 * from the base of its block of 256 ids, a few bytes instead of six:
 * heap_ts has one row per block with a heap event, the time of its first
 * one (the hook sees ids in order, so the rows go in as appends). */
static int64_t ts_off(loader_t *L, uint64_t id, uint64_t ts)
{
    uint64_t blk = id >> TS_SHIFT;
    if (!L->ts_have || blk != L->ts_blk) {
        sqlite3_stmt *s = L->st[ST_TS];
        sqlite3_bind_int64(s, 1, (sqlite3_int64)blk);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)ts);
        fail(L, step_reset(s));
        L->ts_have = 1;
        L->ts_blk = blk;
        L->ts_base = ts;
    }
    return (int64_t)(ts - L->ts_base);
}

static void heap_emit(loader_t *L, const hrow_t *h)
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
    int raw = addr_encode(L, h->addr, &off) || (h->has_old && old_overflows(h->addr, h->old));
    if (raw) {
        off = addr;
        old_off = old;
    }
    v[0] = (int64_t)h->id;
    v[1] = h->ts;
    v[2] = h->fts;
    v[3] = (int64_t)h->size;
    v[4] = off;
    v[5] = kind_of(L, h->stack, h->stream, h->bits, raw);
    v[6] = (int64_t)h->gap;
    v[7] = h->has_old ? old_off : (int64_t)h->arg;      /* extra: old address or arg */
    b->null[b->n] = (h->freed ? 0u : 1u << 2 | 1u << 6) | (h->has_old || h->has_arg ? 0u : 1u << 7);
    if (++b->n == BATCH) fail(L, batch_flush(b));
    L->stats->allocations++;
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
        heap_emit(L, h);
        L->head++;
    }
}

/* The object o (erased from the live map by the caller) is freed by event
 * id (ev) with kind fk. */
static void heap_close(loader_t *L, const live_t *o, uint64_t addr, const pst_event_t *ev, uint64_t id,
                       unsigned fk, int counted)
{
    int64_t fts = ts_off(L, id, ev->ts);
    uint64_t gap = id - o->id;
    int xfree = ev->stream != o->stream;
    uint64_t bits = (o->bits & ~LV_RAW_OLD) | fk << HB_FK_SHIFT | (counted ? 0u : HB_FREE_OUT) |
                    (xfree ? ((uint64_t)ev->stream + 1) << HB_XSHIFT : 0);
    thread_t *t = thread_of(L, ev->stream);
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
    int raw = addr_encode(L, addr, &off) || (o->bits & LV_RAW_OLD);
    int64_t kind = kind_of(L, o->stack, o->stream, bits, raw);
    if (L->heap.n) fail(L, batch_flush(&L->heap));
    sqlite3_stmt *s = L->st[ST_HUPD];
    sqlite3_bind_int64(s, 1, fts);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)gap);
    sqlite3_bind_int64(s, 3, kind);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)o->id);
    fail(L, step_reset(s));
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
        heap_emit(L, &L->ring[L->head & (RING - 1)]);
        L->head++;
        heap_drain(L);
    }
    hrow_t *h = &L->ring[L->tail & (RING - 1)];
    memset(h, 0, sizeof *h);
    h->id = id;
    h->ts = ts_off(L, id, ev->ts);
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
    if (!o) { fail(L, SQLITE_NOMEM); return 0; }
    *o = (live_t){ .seq = L->tail, .id = id, .size = op->bytes, .stream = ev->stream,
                   .stack = ev->stack,
                   .bits = (uint32_t)h->bits | (h->has_old && old_overflows(h->addr, h->old) ? LV_RAW_OLD : 0) };
    L->tail++;
    thread_t *t = thread_of(L, ev->stream);
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
    if (++b->n == BATCH) fail(L, batch_flush(b));
    L->stats->other_rows++;
}

static void bind_u64(sqlite3_stmt *s, int i, uint64_t v) { sqlite3_bind_int64(s, i, (sqlite3_int64)v); }

static void scope_row(loader_t *L, const open_scope_t *o, const char *name, int has_end, uint64_t end_id,
                      uint64_t end_ts)
{
    sqlite3_stmt *s = L->st[ST_SCOPE];
    bind_u64(s, 1, o->id);
    if (has_end) bind_u64(s, 2, end_id); else sqlite3_bind_null(s, 2);
    sqlite3_bind_text(s, 3, name ? name : "?", -1, SQLITE_TRANSIENT);
    bind_u64(s, 4, o->instance);
    bind_u64(s, 5, o->ts);
    if (has_end) { bind_u64(s, 6, end_ts); sqlite3_bind_int64(s, 7, (sqlite3_int64)(end_ts - o->ts)); }
    else { sqlite3_bind_null(s, 6); sqlite3_bind_null(s, 7); }
    bind_u64(s, 8, o->tid);
    /* what happened while it was open (to the end of the trace if it never closed) */
    bind_u64(s, 9, L->calls - o->calls);
    bind_u64(s, 10, L->allocs - o->allocs);
    bind_u64(s, 11, L->bytes - o->bytes);
    fail(L, step_reset(s));
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

static void hook(void *ctx, const pst_event_t *ev, const az_scan_t *scan)
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
    thread_t *th = thread_of(L, ev->stream);
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
        fail(L, step_reset(s));
        L->stats->markers++;
        if (ev->type != PST_EV_MARK_POINT) scope_event(L, ev, id);
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
        bind_u64(s, 14, ev->stream);
        if (ev->stack) bind_u64(s, 15, ev->stack);
        sqlite3_bind_int(s, 16, counted);
        fail(L, step_reset(s));
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
            fail(L, step_reset(s));
            L->stats->block_rows++;
        }
        break;
    }
    case PST_EV_RSS:
        s = L->st[ST_RSS];
        bind_u64(s, 1, id); bind_u64(s, 2, ev->ts); bind_u64(s, 3, f[0]); bind_u64(s, 4, f[1]); bind_u64(s, 5, f[2]);
        fail(L, step_reset(s));
        L->stats->rss_rows++;
        break;
    default: break;
    }
}

/* After the pass: the objects still waiting (the open ones are leaks),
 * the rows still batched, the scopes never closed. */
static void finish_rows(loader_t *L)
{
    while (L->head < L->tail && !L->rc) {
        heap_emit(L, &L->ring[L->head & (RING - 1)]);
        L->head++;
    }
    if (!L->rc) fail(L, batch_flush(&L->heap));
    if (!L->rc) fail(L, batch_flush(&L->other));
    for (size_t i = 0; i < L->n_open && !L->rc; i++)
        scope_row(L, &L->open[i], pst_string(L->scan->r, (uint32_t)L->open[i].name), 0, 0, 0);
    L->n_open = 0;
    /* what each thread leaked */
    size_t it = 0;
    void *val;
    while (psc_map_next(&L->live, &it, NULL, &val)) {
        const live_t *o = val;
        thread_t *t = thread_of(L, o->stream);
        if (t) { t->leaked++; t->leaked_bytes += o->size; }
    }
}

static void threads_rows(loader_t *L, const az_scan_t *s)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(L->db, "INSERT INTO threads VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", -1, &q, NULL) != SQLITE_OK) {
        fail(L, SQLITE_ERROR);
        return;
    }
    size_t it = 0;
    uint64_t key;
    void *val;
    while (psc_map_next(&L->threads, &it, &key, &val)) {
        const thread_t *t = val;
        const char *name = t->name ? pst_string(s->r, t->name) : NULL;
        bind_u64(q, 1, key - 1);
        bind_u64(q, 2, t->tid);
        if (name) sqlite3_bind_text(q, 3, name, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(q, 3);
        if (t->has_parent) bind_u64(q, 4, t->parent); else sqlite3_bind_null(q, 4);
        bind_u64(q, 5, t->start_ts);
        if (t->ended) bind_u64(q, 6, t->end_ts); else sqlite3_bind_null(q, 6);
        bind_u64(q, 7, t->events);
        bind_u64(q, 8, t->allocs);
        bind_u64(q, 9, t->bytes);
        bind_u64(q, 10, t->frees);
        bind_u64(q, 11, t->xfrees);
        bind_u64(q, 12, t->leaked);
        bind_u64(q, 13, t->leaked_bytes);
        sqlite3_bind_int(q, 14, s->status->tracer_stream && key - 1 == s->status->tracer_stream);
        fail(L, step_reset(q));
        L->stats->threads++;
    }
    sqlite3_finalize(q);
}

/* ---- after the pass ---------------------------------------------------------------------- */

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

/* Run sql with @A, the address heap_rows.addr_off encodes (of a row
 * named by prefix: "h." in the views, "" in an index), written in. */
static int exec_based(loader_t *L, const char *sql, const char *prefix, char *msg, size_t msglen)
{
    char base[128 + MAX_BASES * 48];
    int bl = snprintf(base, sizeof base, "(((%saddr_off >> %d) << 4) + ", prefix, L->base_shift);
    if (L->n_base <= 1)
        bl += snprintf(base + bl, sizeof base - (size_t)bl, "%lld)", L->n_base ? (long long)L->base[0] : 0ll);
    else {
        bl += snprintf(base + bl, sizeof base - (size_t)bl, "(CASE %saddr_off & %d", prefix, (1 << L->base_shift) - 1);
        for (int r = 0; r < L->n_base; r++)
            bl += snprintf(base + bl, sizeof base - (size_t)bl, " WHEN %d THEN %lld", r, (long long)L->base[r]);
        bl += snprintf(base + bl, sizeof base - (size_t)bl, " END))");
    }
    size_t n = 0;
    for (const char *p = sql; (p = strstr(p, "@A")); p += 2) n++;
    char *q = malloc(strlen(sql) + n * (size_t)bl + 1), *o = q;
    if (!q) { snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
    for (const char *p = sql;;) {
        const char *at = strstr(p, "@A");
        size_t k = at ? (size_t)(at - p) : strlen(p);
        memcpy(o, p, k);
        o += k;
        if (!at) break;
        memcpy(o, base, (size_t)bl);
        o += bl;
        p = at + 2;
    }
    *o = 0;
    int rc = exec(L->db, q, msg, msglen);
    free(q);
    return rc;
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
    if (exec(L->db, "PRAGMA page_size=16384; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8192;"
                    "PRAGMA temp_store=FILE; PRAGMA locking_mode=EXCLUSIVE;", msg, msglen) ||
        exec(L->db, schema, msg, msglen) || exec(L->db, "BEGIN", msg, msglen))
        goto out;
    for (int i = 0; i < ST_N; i++)
        if (sqlite3_prepare_v2(L->db, stmt_sql[i], -1, &L->st[i], NULL) != SQLITE_OK) {
            snprintf(msg, msglen, "sqlite: %s", sqlite3_errmsg(L->db));
            goto out;
        }
    if (batch_prepare(L->db, &L->heap, "heap_rows", 8) != SQLITE_OK ||
        batch_prepare(L->db, &L->other, "event_rows", 10) != SQLITE_OK) {
        snprintf(msg, msglen, "sqlite: %s", sqlite3_errmsg(L->db));
        goto out;
    }
    az_scan_opts_t so = { .hook = hook, .hook_ctx = L };
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
    if (!L->rc) finish_rows(L);

    rc = PSC_EIO;
    if (L->rc) { snprintf(msg, msglen, "sqlite insert failed: %s", sqlite3_errstr(L->rc)); goto out; }
    char wb[8];
    *warning = az_scan_warning(s, wb, sizeof wb) != NULL;

    threads_rows(L, s);
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
    meta_put(q, "schema_version", "3");   /* 3: frames.python */
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
     * belongs to; the site as report names it. A Python frame (format.h,
     * PST_PYFRAME) is no address: pc NULL, python 1, its qualified name,
     * .py file and line */
    az_sym_t *sym = az_sym_open(s->r);
    az_sv_t *sv = az_sv_create(s, sym, NULL);
    az_frame_t *dfr = malloc(4096 * sizeof *dfr);
    sqlite3_stmt *qs, *qf;
    sqlite3_prepare_v2(L->db, "INSERT INTO stacks VALUES(?,?,?)", -1, &qs, NULL);
    sqlite3_prepare_v2(L->db, "INSERT INTO frames VALUES(?,?,?,?,?,?,?,?,?,?)", -1, &qf, NULL);
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
            sqlite3_bind_int64(qf, 1, id); sqlite3_bind_int64(qf, 2, (sqlite3_int64)k);
            if (fi->python) sqlite3_bind_null(qf, 3); else bind_u64(qf, 3, fi->pc);
            if (fi->function) sqlite3_bind_text(qf, 4, fi->function, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(qf, 4);
            if (fi->file) sqlite3_bind_text(qf, 5, fi->file, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(qf, 5);
            if (fi->line) sqlite3_bind_int(qf, 6, fi->line); else sqlite3_bind_null(qf, 6);
            if (fi->module) sqlite3_bind_text(qf, 7, fi->module, -1, SQLITE_TRANSIENT); else sqlite3_bind_null(qf, 7);
            sqlite3_bind_int64(qf, 8, fi->level);
            sqlite3_bind_int(qf, 9, fi->inlined);
            sqlite3_bind_int(qf, 10, fi->python ? 1 : 0);
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
                sqlite3_prepare_v2(L->db, "INSERT INTO metrics VALUES(?,?)", -1, &q, NULL);
                metrics_rows(L->db, q, az_json_root(d), "", st);
                sqlite3_finalize(q);
                az_json_free(d);
            }
            free(jb);
        }
    }
    if (L->rc) { snprintf(msg, msglen, "sqlite insert failed: %s", sqlite3_errstr(L->rc)); goto out; }
    if (exec_based(L, views, "h.", msg, msglen)) goto out;
    if (exec(L->db, indexes, msg, msglen) || (o && o->indexes && exec_based(L, extra_indexes, "", msg, msglen)) ||
        exec(L->db, "COMMIT", msg, msglen))
        goto out;
    rc = 0;
out:
    for (int i = 0; i < ST_N; i++) sqlite3_finalize(L->st[i]);
    batch_finalize(&L->heap);
    batch_finalize(&L->other);
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

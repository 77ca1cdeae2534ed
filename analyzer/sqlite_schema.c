/* sqlite_schema.c — the database's tables, views and indexes as SQL
 * (see sqlite_internal.h, SCHEMA.md).
 *
 * The views unpack what sqlite_pack.c packs, so they must use its numbers:
 * the bit positions and masks of heap_kinds.bits (HB_*), how an object was
 * freed (FK_*), the block of ids heap_ts keys on (TS_SHIFT), the address
 * unit (ADDR_SHIFT) and the event types. The SQL names them as @NAME holes
 * and sqi_exec_template writes each in from its constant when the views
 * are made, so a changed constant changes both sides; a hole with no
 * value is an error, not a silent empty string.
 */
#include "sqlite_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/format.h"

const char *const sqi_schema =
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
    /* stacks, stack_frames and frames are views over these: each text,
     * site label and displayed frame once, and a stack as its innermost
     * node in a prefix tree of frames shared with other stacks
     * (sqlite_frames.c) */
    "CREATE TABLE site_labels(id INTEGER PRIMARY KEY, site TEXT);\n"
    "CREATE TABLE stack_rows(id INTEGER PRIMARY KEY, depth INTEGER, node INTEGER, site INTEGER);\n"
    "CREATE TABLE stack_nodes(id INTEGER PRIMARY KEY, parent INTEGER, frame_def INTEGER, outer_frame INTEGER);\n"
    "CREATE TABLE names(id INTEGER PRIMARY KEY, name TEXT);\n"
    "CREATE TABLE frame_defs(id INTEGER PRIMARY KEY, pc INTEGER, function INTEGER, file INTEGER, line INTEGER,\n"
    "  module INTEGER, inlined INTEGER, python INTEGER);\n"
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
 * region, see choose_bases and sqi_addr_encode), the other @NAMEs for the
 * layout's numbers (holes[] below), all written in by sqi_exec_template.
 * A row's time, stack and stream are in small tables (heap_ts by block of
 * ids, heap_kinds by kind): looked up only when a query uses them. */
#define BITS   "(SELECT k.bits FROM heap_kinds k WHERE k.kind = h.kind)"
#define ADDR_OF(h) "(CASE WHEN " h "kind < 0 THEN " h "addr_off ELSE @A END)"
#define ADDR ADDR_OF("h.")
#define OLD  "(CASE WHEN " BITS " & @TYPE NOT IN (@EV_REALLOC, @EV_REALLOCARRAY) THEN NULL WHEN h.kind < 0 THEN h.extra\n" \
             "    ELSE @A + h.extra END)"
#define ARG  "(CASE WHEN " BITS " & @TYPE IN (@EV_CALLOC, @EV_POSIX_MEMALIGN, @EV_ALIGNED_ALLOC, @EV_MEMALIGN)" \
             " THEN h.extra END)"
#define TS     "((SELECT b.ts FROM heap_ts b WHERE b.blk = h.id >> @TS_SHIFT) + h.ts)"
/* the free's time, from the base of its own block: an offset from a base
 * near it takes 1.2 bytes where the lifetime took 2.4 */
#define FTS    "((SELECT b.ts FROM heap_ts b WHERE b.blk = (h.id + h.gap) >> @TS_SHIFT) + h.fts)"
/* within one block (most short-lived objects) no lookup */
#define LIFE   "(CASE WHEN h.gap IS NULL THEN NULL WHEN (h.id + h.gap) >> @TS_SHIFT = h.id >> @TS_SHIFT THEN h.fts - h.ts\n" \
               "    ELSE " FTS " - " TS " END)"
#define STACK  "(SELECT k.stack FROM heap_kinds k WHERE k.kind = h.kind)"
#define STREAM "(SELECT k.stream FROM heap_kinds k WHERE k.kind = h.kind)"
#define FREE_STREAM "(CASE WHEN " BITS " >> @XSHIFT THEN (" BITS " >> @XSHIFT) - 1 ELSE " STREAM " END)"
#define POOL_TYPE "(CASE p.kind WHEN 'create' THEN @EV_POOL_CREATE WHEN 'acquire' THEN @EV_POOL_ACQUIRE" \
                  " WHEN 'reclaim' THEN @EV_POOL_RECLAIM\n" \
                  "    WHEN 'backing_alloc' THEN @EV_POOL_BACKING_ALLOC WHEN 'backing_free' THEN @EV_POOL_BACKING_FREE" \
                  " ELSE @EV_POOL_DESTROY END)"
#define TID(stream) "(SELECT t.tid FROM threads t WHERE t.stream = " stream ")"
const char *const sqi_views =
    "CREATE VIEW allocations AS SELECT\n"
    "  h.id AS id, " BITS " & @TYPE AS type,\n"
    "  CASE " BITS " & @TYPE WHEN @EV_MALLOC THEN 'malloc' WHEN @EV_CALLOC THEN 'calloc'"
    " WHEN @EV_REALLOC THEN 'realloc'\n"
    "    WHEN @EV_REALLOCARRAY THEN 'reallocarray' WHEN @EV_POSIX_MEMALIGN THEN 'posix_memalign'"
    " WHEN @EV_ALIGNED_ALLOC THEN 'aligned_alloc'\n"
    "    WHEN @EV_MEMALIGN THEN 'memalign' WHEN @EV_VALLOC THEN 'valloc' WHEN @EV_PVALLOC THEN 'pvalloc'"
    " END AS call,\n"
    "  " TS " AS ts_ns, " FTS " AS free_ts_ns, " LIFE " AS lifetime_ns,\n"
    "  h.size AS size_bytes,\n"
    "  CASE WHEN h.size >= 131072 THEN ((h.size + 4111) & ~4095) - 16\n"
    "    ELSE max((h.size + 23) & ~15, 32) - 8 END AS granted_bytes,\n"
    "  " ADDR " AS addr, " STACK " AS stack, (SELECT s.site FROM stacks s WHERE s.id = " STACK ") AS site,\n"
    "  " STREAM " AS stream, " TID(STREAM) " AS tid,\n"
    "  h.id + h.gap AS free_id,\n"
    "  CASE WHEN h.gap IS NULL THEN NULL ELSE CASE (" BITS " >> @FK_SHIFT) & @FK_BITS"
    " WHEN @FK_FREE THEN 'free' WHEN @FK_FREE_EV THEN 'free'\n"
    "    WHEN @FK_REALLOC THEN 'realloc' WHEN @FK_REALLOCARRAY THEN 'reallocarray' ELSE 'reused' END END"
    " AS freed_by,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN " FREE_STREAM " END AS free_stream,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN " TID(FREE_STREAM) " END AS free_tid,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN " BITS " >> @XSHIFT != 0 END AS cross_thread,\n"
    "  1 - ((" BITS " >> @ALLOC_OUT_BIT) & 1) AS in_window,\n"
    "  CASE WHEN h.gap IS NOT NULL THEN 1 - ((" BITS " >> @FREE_OUT_BIT) & 1) END AS free_in_window,\n"
    "  " OLD " AS old_addr\n"
    "FROM heap_rows h;\n"
    "CREATE VIEW events AS\n"
    "SELECT h.id AS id, " TS " AS ts_ns, " STREAM " AS stream, " TID(STREAM) " AS tid,\n"
    "  " BITS " & @TYPE AS type, (SELECT n.name FROM event_types n WHERE n.type = " BITS " & @TYPE) AS type_name,\n"
    "  " STACK " AS stack, " ADDR " AS addr, " OLD " AS old_addr, h.size AS size_bytes, " ARG " AS arg,\n"
    "  1 - ((" BITS " >> @ALLOC_OUT_BIT) & 1) AS in_window\n"
    "FROM heap_rows h WHERE " BITS " & @ALLOC_EV = 0\n"
    "UNION ALL\n"
    "SELECT h.id + h.gap, " FTS ", " FREE_STREAM ",\n"
    "  " TID(FREE_STREAM) ", @EV_FREE, 'free',\n"
    "  NULL, " ADDR ", NULL, NULL, NULL, 1 - ((" BITS " >> @FREE_OUT_BIT) & 1)\n"
    "FROM heap_rows h WHERE h.gap IS NOT NULL AND " BITS " & @FK_MASK = @FK_FREE_BITS\n"
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
    "        sum(g.freed) AS freed, max(g.max_life) AS max_life, sum(CASE WHEN k.bits >= @XFIRST THEN g.n ELSE 0 END)"
    " AS xfree\n"
    "      FROM (SELECT kind, count(*) AS n, sum(size) AS bytes, max(size) AS max_size, sum(gap IS NULL) AS leaked,\n"
    "              total(CASE WHEN gap IS NULL THEN size END) AS leaked_bytes, sum(life) AS life, count(life) AS freed,\n"
    "              max(life) AS max_life FROM (SELECT kind, size, gap, " LIFE " AS life FROM heap_rows h) GROUP BY kind) g\n"
    "      JOIN heap_kinds k ON k.kind = g.kind GROUP BY k.stack) h\n"
    "LEFT JOIN stacks s ON s.id = h.stack GROUP BY 1;\n"
    /* a subquery, not a join: the view stays one table that a query's
     * `s.id = ?` or join seeks into */
    "CREATE VIEW stacks AS SELECT s.id AS id, s.depth AS depth,\n"
    "  (SELECT l.site FROM site_labels l WHERE l.id = s.site) AS site, s.node AS node\n"
    "FROM stack_rows s;\n"
    /* a stack's rows: the walk from its node to the root, one stack at a
     * time. A view over a recursive CTE walks every stack before any
     * WHERE applies (SQLite does not push one into it), so `WHERE
     * stack_id = ?` and joins on stack_id took the whole walk; here the
     * walk is a subquery correlated with one stack_rows row, its node ids
     * handed to json_each as an array, and the stack is an ordinary
     * table that a WHERE or a join seeks into */
    "CREATE VIEW stack_frames AS SELECT s.id AS stack_id, w.key AS level, n.frame_def AS frame_def,\n"
    "  s.depth - 1 - n.outer_frame AS frame\n"
    "FROM stack_rows s,\n"
    "  json_each((WITH RECURSIVE up(node) AS (SELECT s.node UNION ALL\n"
    "      SELECT p.parent FROM up JOIN stack_nodes p ON p.id = up.node WHERE p.parent IS NOT NULL)\n"
    "    SELECT json_group_array(node) FROM up)) w\n"
    "  JOIN stack_nodes n ON n.id = w.value;\n"
    /* the columns frames had as a table, the names joined back */
    "CREATE VIEW frames AS SELECT sf.stack_id AS stack_id, sf.level AS level, d.pc AS pc,\n"
    "  fn.name AS function, fl.name AS file, d.line AS line, md.name AS module,\n"
    "  sf.frame AS frame, d.inlined AS inlined, d.python AS python\n"
    "FROM stack_frames sf JOIN frame_defs d ON d.id = sf.frame_def\n"
    "  LEFT JOIN names fn ON fn.id = d.function LEFT JOIN names fl ON fl.id = d.file\n"
    "  LEFT JOIN names md ON md.id = d.module;\n";

/* the indexes the documented queries use (small tables) */
const char *const sqi_indexes =
    "CREATE INDEX markers_name_ts ON markers(name, ts_ns);\n"
    "CREATE INDEX scopes_name ON scopes(name, begin_id);\n"
    /* a function's frames: the name, its frame_defs (then their nodes) */
    "CREATE INDEX names_name ON names(name);\n"
    "CREATE INDEX frame_defs_function ON frame_defs(function);\n";
/* more (--indexes), on the tables that grow with the trace: heap objects
 * by address and by kind (stack), other events by type and time, pool and block
 * events by pool */
const char *const sqi_extra_indexes =
    /* the views' expressions, so that `allocations WHERE addr = ?` and
     * `events WHERE id BETWEEN ?` (the frees) use them */
    "CREATE INDEX heap_rows_addr ON heap_rows(" ADDR_OF("") ");\n"
    "CREATE INDEX heap_rows_free ON heap_rows(id + gap);\n"
    "CREATE INDEX heap_rows_kind ON heap_rows(kind);\n"
    "CREATE INDEX event_rows_type_ts ON event_rows(type, ts);\n"
    "CREATE INDEX pools_pool_ts ON pools(pool_id, ts_ns);\n"
    "CREATE INDEX blocks_pool_block ON blocks(pool_id, block_id, ts_ns);\n"
    /* the stacks that pass through a frame without a walk of every
     * stack: its nodes, their descendants, the stacks that end in one */
    "CREATE INDEX stack_nodes_def ON stack_nodes(frame_def);\n"
    "CREATE INDEX stack_nodes_parent ON stack_nodes(parent);\n"
    "CREATE INDEX stack_rows_node ON stack_rows(node);\n";

const char *const sqi_stmt_sql[ST_N] = {
    "INSERT INTO markers VALUES(?,?,?,?,?,?,?)",
    "INSERT INTO pools VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO blocks VALUES(?,?,?,?,?,?,?,?,?)",
    "INSERT INTO rss VALUES(?,?,?,?,?)",
    "INSERT INTO scopes VALUES(?,?,?,?,?,?,?,?,?,?,?)",
    "UPDATE heap_rows SET fts = ?1, gap = ?2, kind = ?3 WHERE id = ?4",
    "INSERT INTO heap_ts VALUES(?,?)",
    "INSERT INTO heap_kinds VALUES(?,?,?,?)",
};

int sqi_exec(sqlite3 *db, const char *sql, char *msg, size_t msglen)
{
    char *e = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK) {
        snprintf(msg, msglen, "sqlite: %s", e ? e : "error");
        sqlite3_free(e);
        return PSC_EIO;
    }
    return 0;
}

/* The holes' numbers: each from the constant the packer or the format uses. */
#define BIT_OF(mask) __builtin_ctz(mask)
static const struct hole { const char *name; long long v; } holes[] = {
    { "TYPE", HB_TYPE },
    { "FK_SHIFT", HB_FK_SHIFT },
    { "FK_BITS", HB_FK_MASK >> HB_FK_SHIFT },
    { "FK_MASK", HB_FK_MASK },
    { "FK_FREE", FK_FREE },
    { "FK_FREE_BITS", (long long)FK_FREE << HB_FK_SHIFT },
    { "FK_FREE_EV", FK_FREE_EV },
    { "FK_REALLOC", FK_REALLOC },
    { "FK_REALLOCARRAY", FK_REALLOCARRAY },
    { "ALLOC_OUT_BIT", BIT_OF(HB_ALLOC_OUT) },
    { "FREE_OUT_BIT", BIT_OF(HB_FREE_OUT) },
    { "ALLOC_EV", HB_ALLOC_EV },
    { "XSHIFT", HB_XSHIFT },
    { "XFIRST", 1ll << HB_XSHIFT },
    { "TS_SHIFT", TS_SHIFT },
    { "EV_MALLOC", PST_EV_MALLOC },
    { "EV_CALLOC", PST_EV_CALLOC },
    { "EV_REALLOC", PST_EV_REALLOC },
    { "EV_REALLOCARRAY", PST_EV_REALLOCARRAY },
    { "EV_FREE", PST_EV_FREE },
    { "EV_POSIX_MEMALIGN", PST_EV_POSIX_MEMALIGN },
    { "EV_ALIGNED_ALLOC", PST_EV_ALIGNED_ALLOC },
    { "EV_MEMALIGN", PST_EV_MEMALIGN },
    { "EV_VALLOC", PST_EV_VALLOC },
    { "EV_PVALLOC", PST_EV_PVALLOC },
    { "EV_POOL_CREATE", PST_EV_POOL_CREATE },
    { "EV_POOL_ACQUIRE", PST_EV_POOL_ACQUIRE },
    { "EV_POOL_RECLAIM", PST_EV_POOL_RECLAIM },
    { "EV_POOL_BACKING_ALLOC", PST_EV_POOL_BACKING_ALLOC },
    { "EV_POOL_BACKING_FREE", PST_EV_POOL_BACKING_FREE },
    { "EV_POOL_DESTROY", PST_EV_POOL_DESTROY },
};
_Static_assert(HB_TYPE + 1 == 1u << BIT_OF(HB_TYPE + 1), "HB_TYPE is a low mask");
_Static_assert(PST_EV_PVALLOC <= HB_TYPE, "the allocating calls fit in HB_TYPE");

/* The text the hole at p (after its '@') stands for, its name's length in
 * *len; NULL for a name with no value. a: @A's text. */
static const char *hole_text(const char *p, size_t *len, const char *a, char num[static 24])
{
    size_t n = 0;
    while ((p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9') || p[n] == '_') n++;
    *len = n;
    if (n == 1 && p[0] == 'A') return a;
    for (size_t i = 0; i < sizeof holes / sizeof *holes; i++)
        if (strlen(holes[i].name) == n && memcmp(holes[i].name, p, n) == 0) {
            snprintf(num, 24, "%lld", holes[i].v);
            return num;
        }
    return NULL;
}

/* sql with its holes filled, malloc'd; NULL with msg and *err set on failure. */
static char *fill(const char *sql, const char *a, int *err, char *msg, size_t msglen)
{
    size_t cap = 0;
    char num[24];
    for (int pass = 0; pass < 2; pass++) {   /* 0: measure, 1: write */
        char *q = pass ? malloc(cap + 1) : NULL;
        if (pass && !q) { *err = PSC_ENOMEM; snprintf(msg, msglen, "out of memory"); return NULL; }
        size_t o = 0;
        for (const char *p = sql; *p;) {
            if (*p != '@') {
                if (pass) q[o] = *p;
                o++, p++;
                continue;
            }
            size_t len;
            const char *t = hole_text(p + 1, &len, a, num);
            if (!t) {
                *err = PSC_EINVAL;
                snprintf(msg, msglen, "sqlite schema: no value for @%.*s", (int)len, p + 1);
                free(q);
                return NULL;
            }
            size_t tl = strlen(t);
            if (pass) memcpy(q + o, t, tl);
            o += tl;
            p += 1 + len;
        }
        if (pass) { q[o] = 0; return q; }
        cap = o;
    }
    return NULL;
}

int sqi_exec_template(loader_t *L, const char *sql, const char *prefix, char *msg, size_t msglen)
{
    char base[128 + MAX_BASES * 48];
    int bl = snprintf(base, sizeof base, "(((%saddr_off >> %d) << %d) + ", prefix, L->base_shift, ADDR_SHIFT);
    if (L->n_base <= 1)
        snprintf(base + bl, sizeof base - (size_t)bl, "%lld)", L->n_base ? (long long)L->base[0] : 0ll);
    else {
        bl += snprintf(base + bl, sizeof base - (size_t)bl, "(CASE %saddr_off & %d", prefix, (1 << L->base_shift) - 1);
        for (int r = 0; r < L->n_base; r++)
            bl += snprintf(base + bl, sizeof base - (size_t)bl, " WHEN %d THEN %lld", r, (long long)L->base[r]);
        snprintf(base + bl, sizeof base - (size_t)bl, " END))");
    }
    int err = 0;
    char *q = fill(sql, base, &err, msg, msglen);
    if (!q) return err;
    int rc = sqi_exec(L->db, q, msg, msglen);
    free(q);
    return rc;
}

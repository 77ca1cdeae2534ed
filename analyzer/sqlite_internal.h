/* sqlite_internal.h — what the SQLite loader's files share (prefix sqi_).
 *
 * The loader is five files, one concern each:
 *   sqlite_schema.c  the tables, the views and the indexes as SQL; the
 *                    views' numbers (bit positions, masks, event types)
 *                    are filled in from the constants below when the
 *                    views are made, so the packer and the views cannot
 *                    disagree on the layout
 *   sqlite_pack.c    the packed storage: batched inserts, the address
 *                    bases and offsets, heap_kinds, heap_ts offsets, a
 *                    heap row's columns
 *   sqlite_load.c    the scan's hook: heap objects through the ring,
 *                    other events, markers and scopes, pools, blocks, RSS,
 *                    threads
 *   sqlite_frames.c  stacks and their symbolized frames, each text,
 *                    displayed frame and shared outer path stored once
 *   sqlite.c         az_sql_write*: the database file, the pass, the
 *                    tables made after it (meta, modules, stacks, frames,
 *                    metrics), the views and indexes last
 * See sqlite.c for why the storage is packed the way it is.
 */
#ifndef POOLSCOPE_SQLITE_INTERNAL_H
#define POOLSCOPE_SQLITE_INTERNAL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "hashmap.h"
#include "scan.h"
#include "sqlite.h"

/* heap_kinds.bits: the allocating call (PST_EV_* 1..10), how the object was
 * freed, the selection flags inverted (0 = in the window) and the freeing
 * thread. A row names its (stack, stream, bits) by one small number,
 * heap_rows.kind: a program has few such triples, so one column of one
 * byte takes the place of three (and of the per-row bits SQLite would
 * store: a bits column cost 1.7 bytes a row). */
#define HB_TYPE      0x0fu
#define HB_FK_SHIFT  4           /* how it was freed (FK_*), 3 bits: */
#define HB_FK_MASK   (7u << HB_FK_SHIFT)
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

/* the prepared statements (sqi_stmt_sql) */
enum { ST_MARK, ST_POOL, ST_BLOCK, ST_RSS, ST_SCOPE, ST_HUPD, ST_TS, ST_KIND, ST_N };

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
#define ADDR_SHIFT 4             /* heap addresses are 16-byte aligned: offsets in 16-byte units */
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

static inline void sqi_fail(loader_t *L, int rc) { if (rc && !L->rc) L->rc = rc; }
static inline void sqi_bind_u64(sqlite3_stmt *s, int i, uint64_t v) { sqlite3_bind_int64(s, i, (sqlite3_int64)v); }

/* ---- sqlite_schema.c ---- */
extern const char *const sqi_schema;         /* the tables */
extern const char *const sqi_views;          /* template: see sqi_exec_template */
extern const char *const sqi_indexes;        /* the documented queries' indexes */
extern const char *const sqi_extra_indexes;  /* template: --indexes */
extern const char *const sqi_stmt_sql[ST_N];
/* Run sql; PSC_EIO with "sqlite: ..." in msg on failure. */
int sqi_exec(sqlite3 *db, const char *sql, char *msg, size_t msglen);
/* Run a template with its @NAME holes filled: @A, the address
 * heap_rows.addr_off encodes (of a row named by prefix: "h." in the views,
 * "" in an index), and the layout's numbers (HB_*, FK_*, TS_SHIFT, the
 * event types). */
int sqi_exec_template(loader_t *L, const char *sql, const char *prefix, char *msg, size_t msglen);

/* ---- sqlite_pack.c ---- */
int sqi_batch_prepare(sqlite3 *db, batch_t *b, const char *table, int cols);
void sqi_batch_finalize(batch_t *b);
int sqi_batch_flush(batch_t *b);
/* sqlite3_step then reset: 0, or the SQLite error */
int sqi_step_reset(sqlite3_stmt *s);
/* addr as heap_rows.addr_off; -1: stored as it is */
int sqi_addr_encode(const loader_t *L, uint64_t addr, int64_t *off);
/* (stack, stream, bits, raw) as heap_kinds.kind, the row made when new */
int64_t sqi_kind_of(loader_t *L, uint32_t stack, uint32_t stream, uint64_t bits, int raw);
/* 1: old - addr would not come back from addr + extra in 64 bits */
int sqi_old_overflows(uint64_t addr, uint64_t old);
/* ts of heap event id as an offset from its heap_ts block's base */
int64_t sqi_ts_off(loader_t *L, uint64_t id, uint64_t ts);
/* h's heap_rows row into the batch (the address bases chosen first) */
void sqi_heap_emit(loader_t *L, const hrow_t *h);

/* ---- sqlite_load.c ---- */
thread_t *sqi_thread_of(loader_t *L, uint32_t stream);
/* the scan's hook (az_scan_opts_t.hook), ctx a loader_t */
void sqi_hook(void *ctx, const pst_event_t *ev, const az_scan_t *scan);
/* after the pass: waiting rows, batches, open scopes, leaks per thread */
void sqi_finish_rows(loader_t *L);
void sqi_threads_rows(loader_t *L, const az_scan_t *s);

/* ---- sqlite_frames.c ---- */
/* stack_rows, stack_nodes, site_labels, frame_defs, names: each text,
 * site label, displayed frame and shared path of frames once; 0 or the
 * SQLite error */
int sqi_stack_rows(loader_t *L, const az_scan_t *s, az_sql_stats_t *st);

#endif

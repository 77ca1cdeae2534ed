/* sqlite.h — load a trace into an SQLite database (prefix az_sql_).
 * The schema is documented in analyzer/SCHEMA.md: views `allocations` (one
 * row per heap object, paired with its free as report pairs them),
 * `events` (every event once) and `sites`, tables `threads`, `scopes`,
 * `stacks`, `frames`, `markers`, `pools`, `blocks`, `rss`, `metrics`,
 * `meta`, ...
 */
#ifndef POOLSCOPE_SQLITE_H
#define POOLSCOPE_SQLITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct az_sql_stats {
    uint64_t events, stacks, frames, modules, markers, pool_rows, block_rows, rss_rows, metrics;
    uint64_t allocations;        /* heap objects (rows of `allocations`) */
    uint64_t other_rows;         /* events stored apart from the heap objects (event_rows) */
    uint64_t heap_updates;       /* objects written before their free and completed later */
    uint64_t threads, scopes;
    uint64_t events_in_window;   /* rows with in_window = 1 (all of them without a selection) */
    double seconds;              /* wall time of the load */
} az_sql_stats_t;

/* Write `trace` into a new database at `db` (an existing SQLite database
 * or empty file is replaced; it is written beside and renamed over).
 * One transaction, prepared statements, indexes built after the load.
 * 0, or a negative PS_E* code with a message. A damaged trace is loaded up
 * to the damage (returns 0; *warning set to 1). */
int az_sql_write(const char *trace, const char *db, az_sql_stats_t *st, int *warning,
                 char *msg, size_t msglen);
/* The same with progress reports while reading (see az_scan_opts_t). */
int az_sql_write_progress(const char *trace, const char *db, az_sql_stats_t *st, int *warning,
                          void (*progress)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes),
                          void *progress_ctx, char *msg, size_t msglen);

/* A selection, as report's --phase / --from --to (az_scan_opts_t): every
 * event is still loaded (a free in the selection needs its allocation
 * from before it, a phase its markers), `events.in_window` says which
 * rows are in it, the `metrics` table holds the report's numbers for the
 * selection alone (what `report --json` with the same options gives), and
 * `meta` records it. A phase that never occurs is PSC_ENOENT (the message
 * lists the phases) and leaves no database. */
typedef struct az_sql_opts {
    const char *phase;           /* NULL: no phase selection */
    int window;                  /* 1: only from <= ts <= to (ns since trace start) */
    uint64_t from, to;           /* to UINT64_MAX: to the end */
    const char *const *phase_frames;   /* --phase-frame scopes (phase_frame.h): in metrics */
    size_t n_phase_frames;
    void (*progress)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes);
    void *progress_ctx;
    int indexes;                 /* 1: also the indexes on the big tables (by address, stack,
                                    type and time); they cost load time and size */
} az_sql_opts_t;
int az_sql_write_opts(const char *trace, const char *db, const az_sql_opts_t *o, az_sql_stats_t *st,
                      int *warning, char *msg, size_t msglen);

#endif

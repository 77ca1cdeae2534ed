/* reader.h — the streaming .pst reader shared by every tool (prefix pst_,
 * pst_reader_).
 *
 *   int err;
 *   pst_reader_t *r = pst_open("run.pst", &err);
 *   if (!r) { fprintf(stderr, "run.pst: %s\n", psc_strerror(err)); ... }
 *   pst_event_t ev;
 *   int rc;
 *   while ((rc = pst_next(r, &ev)) > 0) { ... ev.type, ev.ts, ev.f[], ev.str ... }
 *   const pst_status_t *st = pst_status(r);   // truncated? corrupt? lost?
 *   pst_close(r);
 *
 * Events come out in one merged order over all streams (threads): by time,
 * ties by stream id, with pool events of one pool in pool_seq order and an
 * allocation of an address after the free of that address in another
 * thread (FORMAT.md, "Merge order", has the algorithm). TS records are
 * consumed: they set ev.ts. ev.tid comes from the stream's THREAD_START;
 * ev.str is the resolved S field (NULL if the layout has none or the id is
 * undefined). ev.ids and ev.str stay valid until the next pst_next (str:
 * until pst_close).
 *
 * A damaged file is not an error of pst_next: a file cut short (partial
 * chunk, or no END chunk) or a corrupt chunk (CRC mismatch, stream offset
 * gap, undecodable event) ends the iteration normally after every event
 * from the good chunks before it; pst_status() says what happened. pst_next
 * returns a negative code only for I/O errors and allocation failures.
 *
 * Memory is bounded by the merge window (queued events), live addresses and
 * the distinct strings, stacks, modules and streams — never by the length of
 * the trace. Reading is through one buffer of read() blocks (at most one
 * chunk, <= PST_MAX_CHUNK, plus a block), or straight from memory.
 */
#ifndef POOLSCOPE_READER_H
#define POOLSCOPE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pst_reader pst_reader_t;

/* Open a trace file / a trace in memory (not copied: keep buf alive until
 * pst_close). Reads and checks the header. NULL on failure with *err:
 * PSC_EIO (open/read failed; errno kept), PSC_ETRUNC (header cut short),
 * PSC_ECORRUPT (not a trace: wrong magic, malformed header), PSC_EVERSION
 * (a major version this build does not read), PSC_ENOMEM. */
pst_reader_t *pst_open(const char *path, int *err);
pst_reader_t *pst_open_mem(const void *buf, size_t len, int *err);
/* Accepts NULL. */
void pst_close(pst_reader_t *r);

/* ---- header ------------------------------------------------------------- */
typedef struct pst_header {
    uint16_t major, minor;
    uint64_t pid, ppid;
    uint64_t parent_pid;           /* fork child: the parent's pid, else 0 */
    uint64_t exec_gen;
    uint64_t start_real_ns;        /* CLOCK_REALTIME at trace start */
    uint64_t start_mono_ns;        /* CLOCK_MONOTONIC at trace start (event times are relative) */
    uint32_t stacks;               /* PST_STACKS_* */
    uint32_t depth;
    uint64_t page_size;
    const char *exe;               /* "" when absent; all strings NUL-terminated */
    const char *tool;
    const char *host;
    const char *argv_raw;          /* the NUL-separated arguments as recorded */
    size_t      argv_len;
    uint32_t    argc;
    const char *const *argv;       /* argc entries, then NULL */
    const char *scope_funcs;       /* "FUNC=NAME\0" entries: calls recorded as scopes (record --scope-function) */
    size_t      scope_funcs_len;
    uint32_t    attach;            /* 1: an attach window (poolscope attach): frees of blocks allocated
                                      before it, blocks live at its end are live at detach */
} pst_header_t;

const pst_header_t *pst_header(const pst_reader_t *r);

/* ---- iteration ------------------------------------------------------------ */

/* Next event in merged order: 1 with *ev filled, 0 at the end, negative
 * PSC_EIO / PSC_ENOMEM. ev->f holds the layout's fields only; n_ids and
 * n_payload are 0 for layouts without L/P. */
int pst_next(pst_reader_t *r, pst_event_t *ev);

/* Merge window, ns of trace time (default 1 s; set before the first
 * pst_next): an event this much older than the newest time read is handed
 * out even if a quiet stream could still deliver an earlier one. */
#define PST_DEFAULT_WINDOW_NS 1000000000ull
void pst_reader_set_window(pst_reader_t *r, uint64_t ns);

/* ---- definitions (as far as read so far; all of them after the end) ----- */
const char *pst_string(const pst_reader_t *r, uint32_t id);            /* NULL if undefined */
size_t pst_string_count(const pst_reader_t *r);                        /* strings defined */
const char *pst_string_at(const pst_reader_t *r, size_t i);            /* the i-th defined, i < count */
/* A stack's frames, innermost first (NULL if undefined). The reader keeps
 * stacks as a tree of shared frames and builds the array per call: it is
 * valid until the next pst_stack or pst_stack_at on the same reader, so
 * copy it to keep two at once. */
const uint64_t *pst_stack(const pst_reader_t *r, uint32_t id, uint32_t *depth);
size_t pst_stack_count(const pst_reader_t *r);                         /* stacks defined */
const uint64_t *pst_stack_at(const pst_reader_t *r, size_t i, uint32_t *depth); /* the i-th defined, i < count */

typedef struct pst_module {
    const char *path;
    uint64_t base, size;
    const uint8_t *build_id;
    uint32_t build_id_len;
    uint64_t load_ts;              /* ns since trace start */
    uint64_t unload_ts;            /* UINT64_MAX while still mapped */
} pst_module_t;
/* Every map seen so far, in file order (an unmap sets unload_ts of the
 * latest mapped module at that base). */
const pst_module_t *pst_modules(const pst_reader_t *r, size_t *n);

/* ---- status -------------------------------------------------------------- */
typedef struct pst_status {
    int      complete;             /* END chunk seen and nothing wrong */
    int      end_seen;
    int      truncated;            /* no END chunk, or the file ends in a partial chunk */
    uint64_t unread_bytes;         /* bytes after the last complete chunk */
    int      corrupt;              /* reading stopped at a bad chunk */
    uint64_t corrupt_offset;       /* file offset of that chunk's header */
    const char *corrupt_reason;    /* "crc mismatch", "stream offset gap", ... */
    int      error;                /* 0, or PSC_ETRUNC / PSC_ECORRUPT matching the above */

    uint64_t events;               /* handed out so far */
    uint64_t lost;                 /* sum of LOST records + the END chunk's lost count */
    uint64_t streams;              /* distinct streams seen */
    uint64_t end_events, end_lost, end_streams;   /* the END chunk's numbers */
    uint64_t chunks;               /* complete chunks read */
    uint64_t skipped_chunks;       /* chunks of unknown kind */
    uint64_t bytes;                /* bytes consumed (header + complete chunks) */

    /* merge */
    uint64_t causal_reordered;     /* events handed out early so a free precedes a reuse */
    uint64_t pool_reordered;       /* events handed out early to keep pool_seq order */
    uint64_t unordered;            /* allocations of a live address with no pending free */
    uint64_t pool_unordered;       /* pool events whose pool_seq is below one already out */
    uint64_t late;                 /* events with ts below an event already handed out */
    uint64_t queued;               /* events decoded, not yet handed out */
    uint64_t peak_queued;
    uint64_t live;                 /* addresses live in the reader's view */

    /* format 1.2 (0 for older traces) */
    uint64_t unknown_frees;        /* frees of addresses never allocated under the tracer */
    int      end_killed;           /* END written by `poolscope record` after a SIGKILL (PST_END_KILLED) */
    int      sync_fields;          /* SYNC chunks carry the fields below */
    uint64_t tick_gap_max_ns;      /* the time base's longest interval: the trace's time resolution */
    uint64_t tracer_bytes_peak;    /* most memory the tracer itself had mapped */
    uint32_t tracer_stream;        /* the tracer's own thread (0: none), not one of the program's */
    /* format 1.3 */
    uint64_t ver_gaps;             /* events handed out ahead of their address's version: an event
                                      of that address never came (lost) */
    int      end_stopped;          /* END says recording stopped before the process ended
                                      (PST_END_STOPPED): live at END is live at the stop */
} pst_status_t;

const pst_status_t *pst_status(const pst_reader_t *r);

/* ---- the END chunk alone (no events read) ---------------------------------- */
/* What a complete trace says about itself without reading its events: the
 * file header's fields and the END chunk's counts. pst_read_end reads the
 * header and the last bytes of the file only (one pread from the end), and
 * checks that they are an END chunk: kind, version, stream 0, length, CRC
 * and a payload of three varints (four since format 1.2: the flags). It does not check the chunks in
 * between (a damaged middle chunk goes unnoticed: read the trace for that).
 *
 * Returns 0 with *out filled; PSC_ENOENT when the header is good but the
 * file does not end in a valid END chunk (cut short, killed, still being
 * written): the header fields are filled, the counts are 0, and only
 * reading the trace can tell more; otherwise pst_open's codes (PSC_EIO,
 * PSC_ETRUNC header cut short, PSC_ECORRUPT not a trace, PSC_EVERSION,
 * PSC_ENOMEM) with *out zeroed. Strings are cut to fit, NUL-terminated. */
typedef struct pst_end_info {
    uint64_t events;               /* END: event records written (TS not counted) */
    uint64_t lost;                 /* END: events lost that no LOST record reports */
    uint64_t streams;              /* END: streams (the highest stream id) */
    uint16_t major, minor;
    uint64_t pid, ppid, parent_pid, exec_gen;
    uint64_t start_real_ns, start_mono_ns;
    uint32_t stacks, depth;
    uint64_t header_bytes;         /* the file header: fixed part + TLV fields */
    uint64_t end_offset;           /* file offset of the END chunk's header (0 if none) */
    uint64_t file_bytes;           /* size of the file when it was read */
    char exe[4096];                /* PST_HDR_EXE, "" when absent */
    char argv0[256];               /* the first argument of PST_HDR_ARGV, "" when absent */
    uint32_t flags;                /* END's flags (PST_END_*, format 1.2), 0 when absent */
} pst_end_info_t;

int pst_read_end(const char *path, pst_end_info_t *out);

/* ---- a trace still being written ------------------------------------------- */
/* Whether process `pid` (the trace header's PID) has the file at `path`
 * open now: a trace without END whose writer is alive is being written,
 * not cut short. Read from /proc/PID/fd (the same file: device and inode),
 * so it needs the rights to read that directory (the recording user's);
 * without them, or after the writer died, the answer is 0. A reused pid
 * does not hold this file open. 1 or 0. */
int pst_being_written(const char *path, uint64_t pid);

#ifdef __cplusplus
}
#endif

#endif

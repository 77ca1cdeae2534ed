/* writer.h — a simple .pst file writer for tools and tests (prefix
 * pst_writer_).
 *
 * Single-threaded and allowed to allocate: it is NOT the interposer's writer
 * (that one lives in libtrace/preload/ and uses the malloc-free helpers of
 * format.h). It writes exactly what format.h describes, so hand-built traces
 * exercise the reader the way recorded ones do.
 *
 *   pst_writer_cfg_t cfg = { .pid = 100, .exe = "/bin/demo" };
 *   pst_writer_t *w = pst_writer_open("t.pst", &cfg, &err);
 *   pst_writer_time(w, 1000);                      // ns since trace start
 *   PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 64);     // stream 1: THREAD_START, TS, MALLOC
 *   pst_writer_time(w, 2000);
 *   PST_EMIT(w, 2, PST_EV_FREE, 0x1000);           // stream 2
 *   uint32_t s = pst_writer_string(w, "decode");
 *   PST_EMIT(w, 1, PST_EV_MARK_END, s, 7);
 *   pst_writer_close(w);                            // flush, END chunk
 *
 * Time. Each event takes the writer's current time. By default (tick_ns 0)
 * times are exact: a stream gets a TS record before its first event, every
 * PST_TS_EVERY events, and whenever the time changed since its last TS. With
 * tick_ns > 0 the clock advances by tick_ns per event and TS records come
 * only first and every PST_TS_EVERY events, as the interposer writes them
 * (events between two TS records share the earlier time).
 *
 * Streams are numbered by the caller (>= 1). The first event on a stream
 * is preceded by THREAD_START(tid, parent); the tid defaults to
 * pid + stream - 1 (or the stream id when pid is 0), or set it with
 * pst_writer_thread() before the first event.
 *
 * Chunks. Events collect in a buffer per stream; a stream's buffer becomes
 * an EVENTS chunk when it reaches chunk_bytes, on pst_writer_flush_stream()
 * or pst_writer_flush() (streams in id order), or at close. Pending META
 * records (strings, stacks, modules) are always written before an EVENTS
 * chunk, so a definition precedes its first use in file order. Tests that
 * need a particular file order of chunks call pst_writer_flush_stream().
 *
 * Errors are sticky: after a failure every call returns the same error
 * (0 ids from the interning calls), and pst_writer_close() returns it.
 */
#ifndef POOLSCOPE_WRITER_H
#define POOLSCOPE_WRITER_H

#include <stdint.h>
#include <stdio.h>

#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pst_writer pst_writer_t;

typedef struct pst_writer_cfg {
    uint64_t pid, ppid;
    uint64_t parent_pid;          /* fork child: the parent's pid; 0 = none */
    uint64_t exec_gen;
    uint64_t start_real_ns, start_mono_ns;
    uint32_t stacks;              /* PST_STACKS_* */
    uint32_t depth;
    uint64_t page_size;           /* 0: 4096 */
    const char *exe;              /* may be NULL */
    const char *const *argv;      /* NULL-terminated array, may be NULL */
    const char *tool;             /* may be NULL */
    const char *host;             /* may be NULL */
    uint32_t chunk_bytes;         /* EVENTS chunk target size; 0: 64 KiB */
    uint64_t tick_ns;             /* 0: exact times; > 0: synthetic clock (see above) */
    uint16_t minor;               /* 0: PST_MINOR. 1: the file claims minor 1, whose times were not
                                     causal across streams (tests of how older traces read) */
    int      zstd_level;          /* minor >= 5: 0 chunks as they are; > 0 META and EVENTS chunks
                                     compressed at this zstd level (PST_CHUNK_ZSTD) where it saves bytes */
} pst_writer_cfg_t;

/* Create (truncate) `path` and write the header. NULL on failure, *err set
 * (PSC_EIO, PSC_ENOMEM, PSC_EINVAL). */
pst_writer_t *pst_writer_open(const char *path, const pst_writer_cfg_t *cfg, int *err);
/* The same onto an open stream (e.g. open_memstream); fp is not closed. */
pst_writer_t *pst_writer_open_fp(FILE *fp, const pst_writer_cfg_t *cfg, int *err);

/* Set the current time, ns since trace start. */
void pst_writer_time(pst_writer_t *w, uint64_t ns);
uint64_t pst_writer_now(const pst_writer_t *w);

/* Intern a string / a stack (innermost frame first, depth <= PST_MAX_DEPTH);
 * equal inputs give the same id. Returns the id (>= 1), or 0 on failure. */
uint32_t pst_writer_string(pst_writer_t *w, const char *s);
uint32_t pst_writer_stack(pst_writer_t *w, const uint64_t *frames, uint32_t depth);
/* A module map (map = 1) or unmap (map = 0) at the current time. */
int pst_writer_module(pst_writer_t *w, int map, uint64_t base, uint64_t size, const char *path,
                      const uint8_t *build_id, size_t bid_len);

/* Kernel tid and parent stream for a stream not used yet (PSC_EINVAL after). */
int pst_writer_thread(pst_writer_t *w, uint32_t stream, uint32_t tid, uint32_t parent_stream);

/* Append one event to a stream. Fields as in pst_event_t (ev->f in layout
 * order, ids/payload for L/P, stack id); an S field that is 0 while ev->str
 * is set is interned from ev->str. Types PST_EV_TS, PST_EV_VER and
 * PST_EV_CYC are refused (the writer writes TS records itself; ev->n_ver,
 * at most 2, asks for VER records before the event, written only in a file
 * of minor >= 3; ev->cyc past the stream's count asks for a CYC record,
 * written only in a file of minor >= 8). Returns 0 or a negative PS_E* code. */
int pst_writer_event(pst_writer_t *w, uint32_t stream, const pst_event_t *ev);
/* The same from a list of field values in layout order (no L/P contents). */
int pst_writer_emitv(pst_writer_t *w, uint32_t stream, unsigned type,
                     const uint64_t *f, unsigned nf);
/* PST_EMIT(w, stream, type, field...): pst_writer_emitv with the fields as
 * arguments, each converted to uint64_t. C++ has no compound literals, so
 * there the macro calls a function template (after the extern "C" block). */
#ifndef __cplusplus
#define PST_EMIT(w, stream, type, ...) \
    pst_writer_emitv((w), (stream), (type), (const uint64_t[]){ __VA_ARGS__ }, \
                     (unsigned)(sizeof((const uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t)))
#else
#define PST_EMIT(w, stream, type, ...) pst__emit_cxx((w), (stream), (type), __VA_ARGS__)
#endif
/* An event with no fields (THREAD_END, TRACE_ON, TRACE_OFF). */
#define PST_EMIT0(w, stream, type) pst_writer_emitv((w), (stream), (type), NULL, 0)

/* Count events lost outside LOST records (written in the END chunk). */
void pst_writer_add_lost(pst_writer_t *w, uint64_t n);

/* Write pending META, then the stream's buffered events as one chunk. */
int pst_writer_flush_stream(pst_writer_t *w, uint32_t stream);
/* Write pending META and every stream's buffer (in stream id order), then a
 * SYNC chunk at the writer's current time (pst_writer_now): readers may hand
 * out everything stamped earlier without waiting for more. */
int pst_writer_flush(pst_writer_t *w);
/* Write an arbitrary chunk (after pending META), version 1 and the payload
 * as given: for tests of unknown kinds and hand-made damage. */
int pst_writer_raw_chunk(pst_writer_t *w, unsigned kind, uint32_t stream,
                         const void *payload, uint32_t len);

/* Flush everything, write the END chunk, close the file; frees w.
 * Returns 0 or the first error. Accepts NULL. */
int pst_writer_close(pst_writer_t *w);
/* Flush everything but write no END chunk (a trace of a killed process);
 * frees w. Accepts NULL. */
int pst_writer_abandon(pst_writer_t *w);

#ifdef __cplusplus
} /* extern "C" */

/* internal: not a stable API. What PST_EMIT expands to in C++: the fields
 * converted as C converts them in the compound literal, then one call.
 * extern "C++" keeps it a template even when this header is included
 * inside someone's extern "C" block. */
extern "C++" {
template <typename... Fields>
inline int pst__emit_cxx(pst_writer_t *w, uint32_t stream, unsigned type, Fields... fields)
{
    const uint64_t f[] = { static_cast<uint64_t>(fields)... };
    return pst_writer_emitv(w, stream, type, f, static_cast<unsigned>(sizeof...(Fields)));
}
}
#endif

#endif

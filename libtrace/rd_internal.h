/* rd_internal.h — the whole inside of the streaming .pst reader (see
 * include/poolscope/reader.h for the API, FORMAT.md "Reading: the merge
 * order" for the algorithm), for the file that assembles it (reader.c:
 * pst_open, pst_close) and white-box tests. Internal to libtrace: nothing
 * outside libtrace/reader.c, libtrace/rd_*.c and tests includes it. A
 * stage includes only its own header and the earlier stages'.
 *
 * The stages, in their order: each pulls from the one before it (a call
 * goes down this list, never up; scripts/check-layers.sh checks the
 * includes and, with nm, the calls). Shared types: rd_types.h.
 *   rd_chunk     source (read() blocks into one buffer, or memory) -> file
 *                header -> chunks (framing, CRC, validation; META
 *                definitions stored; END counts checked; SYNC watermark);
 *                an EVENTS chunk goes back to its caller
 *   rd_decode    EVENTS chunks: validated by one decoding pass that notes
 *                pending frees and pool events, then their raw event bytes
 *                appended to the stream's byte queue; the record decoder
 *   rd_tables    the merge's tables: live sets, pending-free chains, pool
 *                heaps, the heap of streams
 *   rd_version   versions (1.3) and the scans of other streams' queues
 *   rd_merge     pst_next: pull a chunk (rd_decode_chunk) and index what it
 *                queued; pick the queued head with the smallest
 *                (ts, stream) once it is safe (older than the SYNC
 *                watermark or the newest time read minus the window, or the
 *                input has ended); before handing it out, let a pool event
 *                with a smaller pool_seq, an event of the same address with
 *                an earlier version (1.3), or a queued free of the address
 *                it allocates (older traces) go first -> pst_event_t
 *   reader.c     pst_open / pst_close, status: creates and frees what every
 *                stage keeps
 *
 *
 * Queued events are kept as the stream's raw event bytes (a few bytes per
 * event), not as decoded records: each stream keeps a second decoder state
 * at the head of its byte queue and decodes its head event again when the
 * one before it is handed out. Validation happens once, when the chunk is
 * read, so the second decode cannot fail. A stream's byte queue is one
 * buffer reused in place (compacted when the queued bytes fill at most half
 * of it, grown only when they need it), so steady reading allocates nothing
 * per event or per chunk.
 *
 * Fast paths: the common records (malloc, free, calloc, realloc, with or
 * without a stack id, and TS) are decoded inline with short varints (one
 * byte first, two or three without branches; the head decoder without end
 * checks, each byte queue having RD_QPAD zeroed bytes after its end); the
 * validating pass of a stream that has had versions checks its A codes
 * without resolving them (nothing it decides needs them any more); when
 * nothing is forced and the top head is safe and alone at its time,
 * pst_next hands out a malloc, calloc, free or realloc whose implicit
 * versions are next with one live-set probe per address, decision and
 * effect in one (rd_fast_heap, rd_merge.c), and the stream stays on top of
 * the heap without sifting while its next head is below both children (a
 * run). With a single stream there is
 * no other stream whose free could be waited for, so frees are not indexed
 * until a second stream appears (then the first one's queued frees are
 * indexed in order, which gives the chains the order they would have had).
 */
#ifndef RD_INTERNAL_H
#define RD_INTERNAL_H

#include "rd_merge.h"

#endif

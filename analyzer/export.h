/* export.h — trace exports for other viewers (prefix az_export_).
 *
 * chrome  Chrome trace-event JSON (Perfetto, chrome://tracing): counter
 *         tracks ("C") for live heap bytes, mmap'd bytes, RSS, each pool's
 *         outstanding and cached bytes and KV blocks in use; instant events
 *         ("i") for point markers; async slices ("b"/"e" with the instance
 *         id, since scopes of one name overlap under batching) for scopes;
 *         thread names as metadata. Counters are written at most once per
 *         microsecond of trace time per track (the format's unit), plus
 *         their final value, so the file stays proportional to activity;
 *         allocations of 64 KiB or more as instants ("alloc 4.00 MiB", at
 *         most 100,000) whose args name the site and the displayed stack.
 * folded  one line per displayed stack: "outer;...;inner WEIGHT", frames
 *         symbolized with libdw and demangled, inlined ones marked "_[i]",
 *         the wrapper frames report skips dropped at the inner end (stacks
 *         that then read the same are one line), weight the
 *         bytes requested or the number of allocations (flamegraph.pl,
 *         speedscope, inferno). A Python frame (symbolize.h) is its
 *         qualified name, with lines "qualname (file.py:LINE)".
 */
#ifndef POOLSCOPE_EXPORT_H
#define POOLSCOPE_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "sites.h"

enum { AZ_EXPORT_CHROME, AZ_EXPORT_FOLDED, AZ_EXPORT_PPROF };
enum { AZ_WEIGHT_BYTES, AZ_WEIGHT_CALLS };

/* 0, or a negative PS_E* code with a message. *warning 1 for a damaged
 * trace exported up to the damage. */
int az_export(const char *trace, int format, int weight, const char *out_path, int *warning,
              char *msg, size_t msglen);

/* The same with options (NULL: the defaults).
 *
 * A selection (report's --phase NAME, --from T --to T; az_scan_opts_t
 * says exactly which events it holds) restricts the whole output: folded
 * weighs only the allocations made inside it; chrome writes only what
 * happens inside it: counter samples, allocation instants, markers and
 * scopes. Each time the selection opens, every counter seen so far gets a
 * sample of its value then (a counter holds its value until the next
 * one), and a scope that crosses an edge of the selection is cut at it
 * (a "b" at the first event inside, an "e" at the last, args {"cut":
 * true}). Times stay trace times. Thread and process names are written
 * whatever the selection; the selection itself is in otherData. A phase
 * that never occurs is PSC_ENOENT (the message lists the phases) and
 * leaves no output. */
typedef struct az_export_opts {
    az_sv_opts_t sites;          /* wrapper skipping: the folded leaf, chrome's site names */
    int lines;                   /* folded: frames as "fn (file:line)" */
    const char *phase;           /* NULL: no phase selection */
    int window;                  /* 1: only from <= ts <= to (ns since trace start) */
    uint64_t from, to;
    int allocations;             /* chrome: every allocation an instant (else those of 64 KiB and more) */
} az_export_opts_t;
int az_export_ex(const char *trace, int format, int weight, const az_export_opts_t *eo,
                 const char *out_path, int *warning, char *msg, size_t msglen);

/* pprof.c: the heap's sites as a gzipped pprof profile (sample types
 * alloc_objects, alloc_space, inuse_objects, inuse_space) on out. */
struct az_sym;
int az_pprof_write(const az_scan_t *s, struct az_sym *sym, const az_export_opts_t *eo, FILE *out, char *msg,
                   size_t msglen);

#endif

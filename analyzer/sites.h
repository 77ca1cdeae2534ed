/* sites.h — allocation sites as a person reads them (prefix az_sv_).
 *
 * A site is named by its first *meaningful* frame and its callers: the
 * frames of allocation wrappers at the inner end of a stack are skipped
 * (the allocator, operator new, the std::allocator / std::vector
 * machinery, c10::alloc_cpu, ggml's aligned malloc and buffer allocators,
 * CPython's PyMem_* / PyObject_Malloc, our own pool library and the
 * reference engine's tensor layer — the list is az_sv_default_skip), and the row says which wrapper it went through
 * ("via std::vector<int>::push_back"). Stacks that read the same are one
 * row: the tables aggregate by the displayed label, not by stack id.
 *
 * Patterns (az_sv_default_skip, --skip-frame): a shell glob (fnmatch)
 * matched against the demangled function name, or "file:GLOB" against the
 * frame's source path. The tracer's own frames never show.
 */
#ifndef POOLSCOPE_SITES_H
#define POOLSCOPE_SITES_H

#include <stddef.h>
#include <stdint.h>

#include "scan.h"
#include "symbolize.h"

typedef struct az_sv_opts {
    unsigned depth;              /* meaningful frames in a label; 0: 2 (the frame and its caller) */
    int no_skip;                 /* 1: skip no frame (--no-skip) */
    const char *const *skip;     /* patterns added to the defaults (--skip-frame) */
    size_t n_skip;
} az_sv_opts_t;

extern const char *const az_sv_default_skip[];   /* NULL-terminated */

/* One displayed row: every stack with this label and via. */
typedef struct az_dsite {
    const char *label;           /* "fn (file:line) < caller" */
    const char *via;             /* the outermost skipped wrapper (short name), NULL when none */
    uint32_t stack;              /* the member stack with the most bytes (for the full stack) */
    uint32_t n_stacks;           /* stack ids merged into the row */
    uint64_t calls, bytes, live_bytes, live_count, peak_bytes, temporary;
} az_dsite_t;

typedef struct az_sv az_sv_t;

/* The view of one scanned trace; sym NULL: stacks are named by their
 * innermost address. NULL on allocation failure. */
az_sv_t *az_sv_create(const az_scan_t *s, az_sym_t *sym, const az_sv_opts_t *o);
void az_sv_destroy(az_sv_t *v);                      /* accepts NULL */

/* What a site hands out: heap blocks, pool acquires, KV blocks, anonymous
 * and file-backed mappings (committed bytes). Each kind has rows of its
 * own: their bytes are not one currency to add up. */
enum { AZ_SV_HEAP, AZ_SV_POOL, AZ_SV_KV, AZ_SV_MMAP_ANON, AZ_SV_MMAP_FILE, AZ_SV_KINDS };
/* "heap", "pool acquires", "KV blocks", "mmap anonymous", "mmap file-backed" */
extern const char *const az_sv_kind_names[AZ_SV_KINDS];

/* The rows of a kind, merged from its sites: az_sites() of the heap or
 * pool accumulator, az_ks_sites() of the scan's kinds for KV and mmap. */
const az_dsite_t *az_sv_kind_sites(az_sv_t *v, int kind, size_t *n);
/* The heap's: az_sv_kind_sites(v, AZ_SV_HEAP, n). */
const az_dsite_t *az_sv_sites(az_sv_t *v, size_t *n);

/* Label of one stack id ("(no stack)" for 0); *via (may be NULL) gets
 * the wrapper or NULL. Strings valid until az_sv_destroy. */
const char *az_sv_label(az_sv_t *v, uint32_t stack, const char **via);
/* The whole path and line of the Python line a stack's label names (the
 * label shows the path's shortest unique tail); NULL for any other label. */
const char *az_sv_file(az_sv_t *v, uint32_t stack, int *line);

/* Does frame f match a skip pattern of v (defaults unless no_skip, then
 * the added ones)? */
int az_sv_skipped(const az_sv_t *v, const az_frame_t *f);

/* A short form of a demangled name: the top-level parameter list and
 * trailing qualifiers dropped ("ns::f(int) const" -> "ns::f"). */
const char *az_sv_short(const char *name, char *buf, size_t len);

/* A long C++ name as people read it (heaptrack's habit): every template
 * argument list folded to "<…>" (U+2026), parameters and scopes kept:
 * "std::map<…>::operator[](std::__cxx11::basic_string<…> const&)".
 * operator<, operator<< and the like are not taken for brackets, nor a
 * label's " < " between a frame and its caller. The text
 * report shows labels so unless --full; JSON, sql and the page's data keep
 * the whole name (the page folds it for display and shows it whole on
 * hover and click). */
const char *az_sv_fold(const char *name, char *buf, size_t len);

/* The displayed frames of a stack (az_sym_stack's, the tracer's dropped):
 * count (at most max written). */
size_t az_sv_frames(az_sv_t *v, uint32_t stack, az_frame_t *out, size_t max);

#endif

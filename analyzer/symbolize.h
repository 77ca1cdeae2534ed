/* symbolize.h — offline symbolization of trace addresses with elfutils'
 * libdw (prefix az_sym_). The one symbolizer of report, sql, export and
 * diff (diff reads report's JSON).
 *
 * The trace's module maps (path, lowest mapped address) are reported to a
 * dwfl session as ELF files placed at those addresses. An address becomes
 * its inline chain from DWARF: the innermost inlined function with the
 * line-table's file:line, then each function it was inlined into with the
 * call site's DW_AT_call_file:DW_AT_call_line, up to the physical
 * function — what `addr2line -f -i` prints. Without DWARF: the symbol
 * table's name; without that, "module+0xoffset". Names are demangled
 * (demangle.h).
 *
 * Which address is looked up: the recorded frames are all return
 * addresses (the interposer drops its own frames; libtrace/preload/
 * stacks.c), so every frame is looked up at pc - 1 — the call itself, not
 * the instruction after it, which may be on the next line or, after a call
 * to a noreturn function, in the next function. The one exception is a
 * frame interrupted by a signal: the frame above a signal trampoline
 * (__restore_rt) holds the interrupted instruction itself and is looked up
 * at its pc, as is the trampoline (its "return address" is its first
 * instruction).
 *
 * Python frames (format 1.7, PST_PYFRAME) are no addresses: each is one
 * displayed frame, its function's qualified name, .py file and line, from
 * the trace's strings (az_sym_open), marked `python`.
 *
 * Results are cached per looked-up address; the strings stay valid until
 * az_sym_destroy.
 */
#ifndef POOLSCOPE_SYMBOLIZE_H
#define POOLSCOPE_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#include "poolscope/reader.h"

typedef struct az_sym az_sym_t;

/* One displayed frame: a function of the inline chain of one recorded
 * (physical) frame. */
typedef struct az_frame {
    const char *function;        /* demangled; NULL when unknown */
    const char *file;            /* path as in the debug info, NULL when unknown */
    int line;                    /* 0 when unknown */
    const char *module;          /* basename of the module, NULL when outside every module */
    uint64_t offset;             /* pc - module base */
    uint64_t pc;                 /* the recorded address */
    uint64_t addr;               /* the address looked up (pc - 1 for a return address) */
    uint32_t level;              /* index of the recorded frame (0 innermost) */
    int inlined;                 /* 1: inlined into the next frame of the same level */
    int python;                  /* 1: a Python frame (format.h, PST_PYFRAME): function is its
                                    qualified name, file its .py path, line the line it ran */
    const char *shown_file;      /* Python frames: the tail of file labels show, unique among the
                                    trace's .py files (a/__init__.py beside b/__init__.py);
                                    NULL: file's base name */
} az_frame_t;

/* Modules as pst_modules() gives them (unmapped ones included: later maps
 * at the same place win). NULL only on allocation failure. */
az_sym_t *az_sym_create(const pst_module_t *mods, size_t n);
void az_sym_destroy(az_sym_t *s);                   /* accepts NULL */
/* The symbolizer of a trace: its modules, and its strings for the Python
 * frames (read lazily: r must outlive the result). */
az_sym_t *az_sym_open(const pst_reader_t *r);
/* The symbolizer closes r when it is destroyed (r stays in use until then). */
void az_sym_adopt(az_sym_t *s, pst_reader_t *r);

/* A recorded stack (innermost first) as displayed frames, innermost first:
 * each recorded frame expanded to its inline chain. Writes at most max
 * frames; returns how many there are in all (may exceed max). */
size_t az_sym_stack(az_sym_t *s, const uint64_t *pcs, uint32_t depth, az_frame_t *out, size_t max);

/* One address: its inline chain at pc (ret_addr 0) or pc - 1 (ret_addr 1),
 * innermost first, as az_sym_stack. */
size_t az_sym_chain(az_sym_t *s, uint64_t pc, int ret_addr, az_frame_t *out, size_t max);

/* The innermost function of the chain (for callers wanting one name). */
void az_sym_lookup(az_sym_t *s, uint64_t pc, int ret_addr, az_frame_t *out);

/* "function (file:line)" / "function" / "module+0x1a2b" / "0x7f..." into
 * buf (file as its basename, or shown_file); returns buf. */
const char *az_sym_format(const az_frame_t *f, uint64_t pc, char *buf, size_t len);

/* Is this frame inside the tracer itself (the preload library)? Such
 * frames are never shown. */
int az_sym_is_tracer(const az_frame_t *f);

#endif

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
 * Which file is read for a module (az_sym_create): the trace's module
 * records carry each module's GNU build-id (libtrace/FORMAT.md, MODULE),
 * and a file is used only when it is that build. In order: the file given
 * for the module's path with az_sym_add_binary (`--binary PATH=FILE`); the
 * file at the recorded path; DIR/.build-id/xx/yyyy.debug in each
 * az_sym_add_debug_dir directory (`--debug-dir DIR`), then in
 * /usr/lib/debug. A file without the recorded build-id is not used. A
 * module recorded without one is checked by the extent of its PT_LOAD
 * segments (the recorded size) and, for the file at the recorded path, by
 * its mtime: changed after the module was loaded, it is not used. A
 * module none of whose candidates fits is said once per process and
 * module (az_sym_set_warn; default stderr) and kept in az_sym_note; its
 * frames come out as "module+0xoffset [binary changed]" (the offset is
 * into the recorded build: `addr2line -e RIGHT_FILE`). A file that is used
 * but has no DWARF of its own (stripped) gets it by build-id from the same
 * directories, or by .gnu_debuglink (libdwfl's standard search).
 *
 * C++ names: a function's DW_AT_linkage_name, demangled. A physical
 * function of a C++ unit without one (GCC gives none to static functions
 * and those in an anonymous namespace) takes the symbol table's name when
 * a mangled symbol starts exactly at the function's entry, as binutils'
 * and LLVM's addr2line -C do: "work(int, int)", "(anonymous
 * namespace)::f(int)", not DW_AT_name's bare "work". Inlined copies have no
 * symbol of their own and keep DW_AT_name (as llvm-addr2line prints them;
 * binutils names the innermost one after the function it was inlined
 * into).
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
    int stale;                   /* 1: its module's file is not the recorded build and no
                                    right one was found: module+offset only */
} az_frame_t;

/* ---- where files come from: settings of the process ----------------------
 * Process-wide, not per symbolizer, because the symbolizer is opened deep
 * inside each analyzer (report, sql, export, html, replay, phase frames)
 * while the options come from the command line once: main() sets them
 * before any trace is read. Not thread-safe against a concurrent set. */

/* A directory holding .build-id/xx/yyyy.debug files, searched before
 * /usr/lib/debug (repeatable). 0, PSC_EINVAL for an empty name, PSC_ENOMEM. */
int az_sym_add_debug_dir(const char *dir);
/* "PATH=FILE": read FILE for the module recorded as PATH (the whole
 * recorded path, or its base name when PATH has no '/'). 0, PSC_EINVAL
 * when spec has no '=' or an empty side, PSC_ENOMEM. */
int az_sym_add_binary(const char *spec);
/* Where the one-per-module messages go (msg has no newline and is safe
 * text: psc_esc_text'd). NULL fn: "poolscope: MSG" on stderr. */
void az_sym_set_warn(void (*fn)(void *ctx, const char *msg), void *ctx);
/* Forget every setting above and the messages given (tests). */
void az_sym_reset_settings(void);

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

/* The i-th message about this symbolizer's modules (a file not the
 * recorded build, a --binary file refused), NULL past the last: for a
 * report to show what az_sym_set_warn said once. */
const char *az_sym_note(const az_sym_t *s, size_t i);

/* "function (file:line)" / "function" / "module+0x1a2b" / "0x7f..." into
 * buf (file as its basename, or shown_file); a stale frame's module form
 * ends " [binary changed]". Returns buf. */
const char *az_sym_format(const az_frame_t *f, uint64_t pc, char *buf, size_t len);

/* Is this frame inside the tracer itself (the preload library)? Such
 * frames are never shown. */
int az_sym_is_tracer(const az_frame_t *f);

#endif

/* symbolize.h — offline symbolization of trace addresses with elfutils'
 * libdw (prefix az_sym_).
 *
 * The trace's module maps (path, lowest mapped address) are reported to a
 * dwfl session as ELF files placed at those addresses; an address becomes
 * function + file:line when the file (or its separate debug info) has it,
 * function only from the symbol table otherwise, and "module+0xoffset" when
 * nothing is known. Stack frames other than the innermost are return
 * addresses: look up pc - 1 so a call at the end of a function or before a
 * line change is attributed to the call's own line.
 *
 * Results are cached per address; the strings stay valid until
 * az_sym_destroy.
 */
#ifndef POOLSCOPE_SYMBOLIZE_H
#define POOLSCOPE_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#include "poolscope/reader.h"

typedef struct az_sym az_sym_t;

typedef struct az_frame {
    const char *function;        /* NULL when unknown */
    const char *file;            /* basename-free path as in the debug info, NULL when unknown */
    int line;                    /* 0 when unknown */
    const char *module;          /* basename of the module, NULL when outside every module */
    uint64_t offset;             /* pc - module base */
} az_frame_t;

/* Modules as pst_modules() gives them (unmapped ones included: later maps
 * at the same place win). NULL only on allocation failure. */
az_sym_t *az_sym_create(const pst_module_t *mods, size_t n);
void az_sym_destroy(az_sym_t *s);                   /* accepts NULL */

/* Resolve pc; `ret_addr` 1 for a return address (looks up pc - 1).
 * Always fills *out (unknown parts NULL / 0). */
void az_sym_lookup(az_sym_t *s, uint64_t pc, int ret_addr, az_frame_t *out);

/* "function (file:line)" / "function" / "module+0x1a2b" / "0x7f..." into
 * buf; returns buf. */
const char *az_sym_format(const az_frame_t *f, uint64_t pc, char *buf, size_t len);

/* Is this frame inside the tracer or the allocator itself (the preload
 * library, libc's malloc family)? Such frames are skipped when naming an
 * allocation site. */
int az_sym_is_allocator(const az_frame_t *f);

#endif

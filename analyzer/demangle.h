/* demangle.h — names as a person reads them (prefix az_dm_).
 *
 * C++ (Itanium ABI, "_Z...") names are demangled with the C++ runtime's
 * abi::__cxa_demangle, parameters included ("ns::f(int)", as
 * `addr2line -C` and `c++filt` print them). A symbol-version suffix from
 * the dynamic symbol table ("__libc_start_main@@GLIBC_2.34") is dropped.
 * Anything else comes back as it was.
 */
#ifndef POOLSCOPE_DEMANGLE_H
#define POOLSCOPE_DEMANGLE_H

#include <stddef.h>

/* The readable form of name into buf (truncated to len); returns buf, or
 * NULL for a NULL name. */
const char *az_dm_name(const char *name, char *buf, size_t len);

#endif

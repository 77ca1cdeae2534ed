/* demangle.c — C++ demangling through the C++ runtime (see demangle.h).
 *
 * Why __cxa_demangle and not libiberty's cplus_demangle: it is the C++
 * ABI's documented entry point, shipped in libstdc++.so (present wherever
 * g++ is, and loaded by every C++ program we trace), with a stable soname;
 * Debian ships libiberty only as a static archive without a stable API.
 * Both are the same demangler (libstdc++ compiles libiberty's
 * cp-demangle.c), so names read as binutils' addr2line -C prints them.
 */
#include "demangle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libstdc++'s abi::__cxa_demangle, declared here for C (cxxabi.h is C++). */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

const char *az_dm_name(const char *name, char *buf, size_t len)
{
    if (!name) return NULL;
    if (!len) return buf;
    char tmp[1024];
    size_t n = strlen(name);
    const char *at = strchr(name, '@');
    if (at && at != name) n = (size_t)(at - name);   /* "sym@@VERSION" / "sym@VERSION" */
    if (n >= sizeof tmp) n = sizeof tmp - 1;
    memcpy(tmp, name, n);
    tmp[n] = 0;
    if (tmp[0] == '_' && tmp[1] == 'Z') {
        int status = -1;
        char *d = __cxa_demangle(tmp, NULL, NULL, &status);
        if (d && status == 0) {
            snprintf(buf, len, "%s", d);
            free(d);
            return buf;
        }
        free(d);
    }
    snprintf(buf, len, "%s", tmp);
    return buf;
}

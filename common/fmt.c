/* fmt.c — the number formatters of fmt.h (the report's and the replay
 * table's, moved here unchanged so every output stays byte-identical). */
#include "fmt.h"

#include <inttypes.h>
#include <stdio.h>

const char *psc_fmt_bytes(uint64_t v, char *buf, size_t len)
{
    static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    if (v < 1024) { snprintf(buf, len, "%" PRIu64 " B", v); return buf; }
    double d = (double)v;
    int i = 0;
    while (d >= 1024 && i < 5) { d /= 1024; i++; }
    snprintf(buf, len, d < 10 ? "%.2f %s" : d < 100 ? "%.1f %s" : "%.0f %s", d, u[i]);
    return buf;
}

const char *psc_fmt_bytes_1f(uint64_t v, char *buf, size_t len)
{
    static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double d = (double)v;
    int i = 0;
    while (d >= 1024 && i < 4) { d /= 1024; i++; }
    if (i == 0) snprintf(buf, len, "%" PRIu64 " B", v);
    else snprintf(buf, len, "%.1f %s", d, u[i]);
    return buf;
}

const char *psc_fmt_ns(uint64_t ns, char *buf, size_t len)
{
    if (ns < 1000) snprintf(buf, len, "%" PRIu64 " ns", ns);
    else if (ns < 1000000) snprintf(buf, len, "%.1f us", (double)ns / 1e3);
    else if (ns < 1000000000) snprintf(buf, len, "%.1f ms", (double)ns / 1e6);
    else snprintf(buf, len, "%.3f s", (double)ns / 1e9);
    return buf;
}

const char *psc_fmt_count(uint64_t v, char *buf, size_t len)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v), o = 0;
    if (!len) return buf;
    for (int i = 0; i < n && (size_t)o + 2 < len; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

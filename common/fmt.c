/* fmt.c — the number formatters of fmt.h: one byte formatter for every
 * output (report, replay, gate, plot), shares that never round to the
 * whole while something is missing. */
#include "fmt.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *psc_fmt_bytes(uint64_t v, char *buf, size_t len)
{
    static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    if (v < 1024) { snprintf(buf, len, "%" PRIu64 " B", v); return buf; }
    double d = (double)v;
    int i = 0;
    while (d >= 1024 && i < 6) { d /= 1024; i++; }
    /* three significant digits; a value that rounds up to 1024 of a unit
     * is 1.00 of the next ("1.00 MiB", never "1024 KiB") */
    if (d >= 1023.5 && i < 6) { d /= 1024; i++; }
    snprintf(buf, len, d < 9.995 ? "%.2f %s" : d < 99.95 ? "%.1f %s" : "%.0f %s", d, u[i]);
    return buf;
}

const char *psc_fmt_share(uint64_t part, uint64_t whole, double scale, int decimals, char *buf, size_t len)
{
    if (decimals < 0) decimals = 0;
    if (decimals > 6) decimals = 6;
    if (!whole) { snprintf(buf, len, "%.*f", decimals, 0.0); return buf; }
    double v = (double)part / (double)whole * scale;
    snprintf(buf, len, "%.*f", decimals, v);
    if (part < whole) {
        /* rounding must not reach the whole: 62,033 of 62,040 is 99.9%, not
         * 100.0%; cut the digits off instead (the largest printable value
         * below the whole) */
        double step = 1;
        for (int k = 0; k < decimals; k++) step /= 10;
        char whole_s[48];
        snprintf(whole_s, sizeof whole_s, "%.*f", decimals, scale);
        if (!strcmp(buf, whole_s)) snprintf(buf, len, "%.*f", decimals, scale - step);
    }
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

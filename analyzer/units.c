/* units.c — numbers with units (see units.h). */
#include "units.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>

#include "poolscope/error.h"

static const char *skip(const char *p) { while (*p && isspace((unsigned char)*p)) p++; return p; }

int az_parse_bytes(const char *s, double *out)
{
    char *end;
    if (!s || !*s) return PSC_EINVAL;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v)) return PSC_EINVAL;
    const char *u = skip(end);
    static const struct { const char *name; double mul; } units[] = {
        { "", 1 }, { "B", 1 }, { "KiB", 1024.0 }, { "MiB", 1048576.0 }, { "GiB", 1073741824.0 },
        { "TiB", 1099511627776.0 }, { "KB", 1024.0 }, { "MB", 1048576.0 }, { "GB", 1073741824.0 },
        { "K", 1024.0 }, { "M", 1048576.0 }, { "G", 1073741824.0 },
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(u, units[i].name) == 0) { *out = v * units[i].mul; return 0; }
    return PSC_EINVAL;
}

int az_parse_time_ns(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s) return PSC_EINVAL;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0) return PSC_EINVAL;
    const char *u = skip(end);
    double mul;
    if (!*u || !strcasecmp(u, "s")) mul = 1e9;
    else if (!strcasecmp(u, "ms")) mul = 1e6;
    else if (!strcasecmp(u, "us")) mul = 1e3;
    else if (!strcasecmp(u, "ns")) mul = 1;
    else return PSC_EINVAL;
    *out = (uint64_t)llround(v * mul);
    return 0;
}

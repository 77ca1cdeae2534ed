/* units.h — parsing numbers with units on command lines (prefix az_parse_).
 *
 * Bytes: "64MiB", "1.5 GiB", "512KiB", "4096", "0" (KiB MiB GiB TiB, also
 * KB MB GB as the same binary units, and a plain B). Times: "1.5s",
 * "200ms", "30us", "100ns"; a plain number is seconds. Both return 0 or
 * PSC_EINVAL.
 */
#ifndef POOLSCOPE_UNITS_H
#define POOLSCOPE_UNITS_H

#include <stdint.h>

int az_parse_bytes(const char *s, double *out);
int az_parse_time_ns(const char *s, uint64_t *out);

#endif

/* fmt.h — numbers for people: bytes in binary units, nanoseconds in
 * ns/us/ms/s, counts with thousands separators (internal, prefix psc_fmt_).
 *
 * Every function writes a NUL-terminated string into buf (truncated to
 * len) and returns buf, so calls nest inside printf arguments.
 */
#ifndef PSC_FMT_H
#define PSC_FMT_H

#include <stddef.h>
#include <stdint.h>

/* "512 B", "1.50 KiB", "12.3 MiB", "512 GiB": binary units up to PiB,
 * three significant digits (report, gate, plot). */
const char *psc_fmt_bytes(uint64_t v, char *buf, size_t len);
/* "512 B", "1.5 KiB", "12.3 MiB", "512.0 GiB": binary units up to TiB,
 * always one decimal (the replay table). Kept apart from psc_fmt_bytes
 * because existing outputs differ; to be unified later. */
const char *psc_fmt_bytes_1f(uint64_t v, char *buf, size_t len);
/* "830 ns", "12.5 us", "12.5 ms", "1.234 s". */
const char *psc_fmt_ns(uint64_t ns, char *buf, size_t len);
/* "1,234,567". */
const char *psc_fmt_count(uint64_t v, char *buf, size_t len);

#endif

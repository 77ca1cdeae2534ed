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

/* "512 B", "1.50 KiB", "12.3 MiB", "512 GiB", "8.00 EiB": binary units up
 * to EiB, three significant digits. The one byte formatter of every output
 * (report, replay, gate, plot). */
const char *psc_fmt_bytes(uint64_t v, char *buf, size_t len);
/* part / whole * scale with `decimals` decimals ("99.9" for 62,033 of
 * 62,040 at scale 100): never the whole (scale) while part < whole, so a
 * hit rate with misses never reads 100%. "0.0" when whole is 0. */
const char *psc_fmt_share(uint64_t part, uint64_t whole, double scale, int decimals, char *buf, size_t len);
/* "830 ns", "12.5 us", "12.5 ms", "1.234 s". */
const char *psc_fmt_ns(uint64_t ns, char *buf, size_t len);
/* "1,234,567". */
const char *psc_fmt_count(uint64_t v, char *buf, size_t len);

#endif

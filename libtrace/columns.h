/* columns.h — the column form of a compressed EVENTS payload (format 1.6,
 * FORMAT.md "Columns"): the TS records and the stack ids of a chunk's
 * events moved out of the record stream before zstd, put back after it.
 *
 * Pure computation on caller buffers (no allocation, no I/O, no locks), so
 * the interposer's flusher (preload/compress.c), the file writer (writer.c) and the
 * reader (rd_inflate.c) share this one copy. Record boundaries come from
 * the layout table of format.c (pst_event_layout).
 */
#ifndef PS_LIBTRACE_COLUMNS_H
#define PS_LIBTRACE_COLUMNS_H

#include <stddef.h>
#include <stdint.h>

/* The byte after the stream offset that marks the column form: type 0,
 * which no reader decodes (a reader that does not know columns reports the
 * chunk as an undecodable event instead of misreading it). */
#define PST_COLS_MARK  0x00

/* The most bytes the column form of a payload of len bytes may take
 * (pst_cols_split gives up beyond that): callers size `out` so. The form
 * is about as long as the payload; fixed-width values (the widest of the
 * chunk) make it a few percent longer, zeros that zstd then removes. */
#define PST_COLS_BOUND(len) ((len) + (len) / 8 + 64)

/* Scratch bytes pst_cols_split wants for a payload of len bytes: the stack
 * column and 8 bytes per TS record until the counts are known (a payload
 * with more TS records than that allows stays as it is). */
#define PST_COLS_TMP(len) (2 * (len) + 64)

/* The EVENTS payload in[0..len) (stream offset varint, then records) in
 * column form into out (cap bytes, PST_COLS_BOUND(len)), with tmp (tmp_cap
 * bytes, PST_COLS_TMP(len)) for scratch: its length, or 0 when the payload
 * is better left as it is (no TS record or stack id to move, no stream
 * offset, or the form would not fit). Records the layout table cannot
 * parse (an unknown type, a record cut at the end) and all that follows
 * stay as they are, at the end. *cut: where the stack column starts, for
 * the compressor to begin a new block there (ZSTD_e_flush): stack ids have
 * byte statistics of their own, and one literal table for both costs 4% on
 * programs with many call sites. One walk over the records, copies in
 * runs: it runs in the interposer's flusher, next to zstd. */
size_t pst_cols_split(const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                      uint8_t *tmp, size_t tmp_cap, size_t *cut);

/* Is in[0..len) in column form (the mark after the stream offset)? */
int pst_cols_is_split(const uint8_t *in, size_t len);

/* The length of the payload that the column form in[0..len) stands for,
 * 0 with *out_len, or PSC_ECORRUPT (a header or column that does not add
 * up). */
int pst_cols_joined_len(const uint8_t *in, size_t len, size_t *out_len);

/* The payload back from its column form into out (cap bytes, at least what
 * pst_cols_joined_len says): 0 with *out_len, or PSC_ECORRUPT when a
 * column is damaged (a record, count, stack id or value that does not fit
 * its column, or a column not used up exactly). Never reads outside
 * in[0..len) nor writes outside out[0..cap). */
int pst_cols_join(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *out_len);

#endif

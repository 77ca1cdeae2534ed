/* pstcols.c — the column form (libtrace/columns.c) on a real trace, for
 * tests/integration/columns.sh: every EVENTS payload splits and joins back
 * byte for byte, and every compressed chunk the tracer wrote in column
 * form holds exactly what this library's splitter makes of its payload
 * (the flusher and the reader agree on every byte).
 *
 *   pstcols FILE      prints key=value lines:
 *     events_chunks column_chunks plain_zstd_chunks round_trip_bad flusher_bad
 *     raw_events_max (payload bytes of the longest uncompressed EVENTS chunk)
 * Exit 0 when both bad counts are 0; 1 otherwise; 2 if the file is unusable.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "columns.h"
#include "poolscope/format.h"

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: pstcols FILE\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(sz > 0 ? (size_t)sz : 1);
    if (sz < PST_FILE_HDR_FIXED || fread(d, 1, (size_t)sz, f) != (size_t)sz) { fprintf(stderr, "short file\n"); return 2; }
    fclose(f);
    size_t pos = PST_FILE_HDR_FIXED + (d[12] | d[13] << 8 | d[14] << 16 | (size_t)d[15] << 24);
    uint64_t chunks = 0, cols = 0, plain = 0, rt_bad = 0, fl_bad = 0, raw_max = 0;
    pst_inflate_t z = { 0 };
    uint8_t *s = malloc(PST_COLS_BOUND(PST_MAX_CHUNK)), *j = malloc(PST_MAX_CHUNK), *raw = malloc(PST_MAX_CHUNK);
    uint8_t *t = malloc(PST_COLS_TMP(PST_MAX_CHUNK));
    while (pos + PST_CHUNK_HDR <= (size_t)sz) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(d + pos, &h);
        if (pos + PST_CHUNK_HDR + h.len > (size_t)sz) break;
        const uint8_t *pl = d + pos + PST_CHUNK_HDR;
        pos += PST_CHUNK_HDR + h.len;
        if (h.kind != PST_CHUNK_EVENTS) continue;
        const uint8_t *p;
        size_t n;
        if (pst_chunk_inflate(&z, &h, pl, &p, &n)) { fprintf(stderr, "undecodable chunk\n"); return 2; }
        chunks++;
        size_t cut, sl = pst_cols_split(p, n, s, PST_COLS_BOUND(n), t, PST_COLS_TMP(n), &cut), jl;
        if (sl && (pst_cols_join(s, sl, j, PST_MAX_CHUNK, &jl) || jl != n || memcmp(j, p, n))) rt_bad++;
        if (!(h.flags & PST_CHUNK_ZSTD)) {
            if (h.len > raw_max) raw_max = h.len;
            continue;
        }
        uint64_t rl;
        const uint8_t *fr = pst_get_varint(pl, pl + h.len, &rl);
        size_t got = fr ? ZSTD_decompress(raw, PST_MAX_CHUNK, fr, (size_t)(pl + h.len - fr)) : 0;
        if (!fr || ZSTD_isError(got)) { fl_bad++; continue; }
        if (!pst_cols_is_split(raw, got)) { plain++; continue; }
        cols++;
        if (sl != got || memcmp(s, raw, got)) fl_bad++;
    }
    pst_inflate_done(&z);
    printf("events_chunks=%llu\ncolumn_chunks=%llu\nplain_zstd_chunks=%llu\nround_trip_bad=%llu\nflusher_bad=%llu\n"
           "raw_events_max=%llu\n",
           (unsigned long long)chunks, (unsigned long long)cols, (unsigned long long)plain,
           (unsigned long long)rt_bad, (unsigned long long)fl_bad, (unsigned long long)raw_max);
    free(s); free(t); free(j); free(raw); free(d);
    return rt_bad || fl_bad;
}

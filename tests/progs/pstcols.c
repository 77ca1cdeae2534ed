/* pstcols.c — the column form (libtrace/columns.c) on a real trace, for
 * tests/integration/columns.sh: every EVENTS payload splits and joins back
 * byte for byte, and every compressed chunk the tracer wrote in column
 * form holds exactly what this library's splitter makes of its payload
 * (the flusher and the reader agree on every byte).
 *
 *   pstcols FILE      prints key=value lines:
 *     events_chunks column_chunks plain_zstd_chunks round_trip_bad flusher_bad
 *     raw_events_max (payload bytes of the longest uncompressed EVENTS chunk)
 *     col_events col_counts col_values col_stacks col_rest: the compressed
 *     chunks' columns, each compressed alone at the flusher's level, summed
 *     (what each part of the events costs in the file, about: zstd over the
 *     whole form shares its tables; bench-trace-size.sh prints them)
 *     file_events file_meta: bytes of the EVENTS and META chunks, headers in
 * Exit 0 when both bad counts are 0; 1 otherwise; 2 if the file is unusable.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "columns.h"
#include "poolscope/format.h"

#define Z_LEVEL 3   /* the flusher's (PS_Z_LEVEL, libtrace/preload/preload.h) */

/* n bytes at p compressed alone at the flusher's level: their size. */
static uint64_t zsize(const uint8_t *p, size_t n)
{
    static uint8_t out[ZSTD_COMPRESSBOUND(PST_MAX_CHUNK)];
    if (!n) return 0;
    size_t z = ZSTD_compress(out, sizeof out, p, n, Z_LEVEL);
    return ZSTD_isError(z) ? n : z;
}

/* The columns of column form f[0..n) (FORMAT.md "Columns"), each
 * compressed alone, added to col: events, counts, values, stacks, the
 * header and tail. */
static void col_sizes(const uint8_t *f, size_t n, uint64_t col[5])
{
    const uint8_t *p = f, *end = f + n;
    uint64_t off, ev, nts, w, cnt, stk;
    if (!(p = pst_get_varint(p, end, &off)) || p >= end) return;
    p++;   /* the mark */
    if (!(p = pst_get_varint(p, end, &ev)) || !(p = pst_get_varint(p, end, &nts)) ||
        !(p = pst_get_varint(p, end, &w)) || !(p = pst_get_varint(p, end, &cnt)) ||
        !(p = pst_get_varint(p, end, &stk)))
        return;
    uint64_t len[4] = { ev, cnt, w * nts, stk }, at = (uint64_t)(p - f);
    col[4] += at;
    for (int k = 0; k < 4; k++) {
        if (len[k] > n - at) return;
        col[k] += zsize(f + at, (size_t)len[k]);
        at += len[k];
    }
    col[4] += zsize(f + at, (size_t)(n - at));
}

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
    uint64_t chunks = 0, cols = 0, plain = 0, rt_bad = 0, fl_bad = 0, raw_max = 0, col[5] = { 0 }, fev = 0, fmeta = 0;
    pst_inflate_t z = { 0 };
    uint8_t *s = malloc(PST_COLS_BOUND(PST_MAX_CHUNK)), *j = malloc(PST_MAX_CHUNK), *raw = malloc(PST_MAX_CHUNK);
    uint8_t *t = malloc(PST_COLS_TMP(PST_MAX_CHUNK));
    while (pos + PST_CHUNK_HDR <= (size_t)sz) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(d + pos, &h);
        if (pos + PST_CHUNK_HDR + h.len > (size_t)sz) break;
        const uint8_t *pl = d + pos + PST_CHUNK_HDR;
        pos += PST_CHUNK_HDR + h.len;
        if (h.kind == PST_CHUNK_META) fmeta += PST_CHUNK_HDR + h.len;
        if (h.kind != PST_CHUNK_EVENTS) continue;
        fev += PST_CHUNK_HDR + h.len;
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
        col_sizes(raw, got, col);
    }
    pst_inflate_done(&z);
    printf("events_chunks=%llu\ncolumn_chunks=%llu\nplain_zstd_chunks=%llu\nround_trip_bad=%llu\nflusher_bad=%llu\n"
           "raw_events_max=%llu\ncol_events=%llu\ncol_counts=%llu\ncol_values=%llu\ncol_stacks=%llu\ncol_rest=%llu\nfile_events=%llu\nfile_meta=%llu\n",
           (unsigned long long)chunks, (unsigned long long)cols, (unsigned long long)plain,
           (unsigned long long)rt_bad, (unsigned long long)fl_bad, (unsigned long long)raw_max,
           (unsigned long long)col[0], (unsigned long long)col[1], (unsigned long long)col[2],
           (unsigned long long)col[3], (unsigned long long)col[4], (unsigned long long)fev,
           (unsigned long long)fmeta);
    free(s); free(t); free(j); free(raw); free(d);
    return rt_bad || fl_bad;
}

/* rd_inflate.c — the payload of a compressed chunk (format 1.5; column form 1.6).
 *
 * A version-2 chunk with PST_CHUNK_ZSTD stores `varint raw_len` and one
 * zstd frame of the version-1 payload (FORMAT.md, "Compressed chunks").
 * Here that frame is checked and decompressed into a buffer that is reused
 * from chunk to chunk, with one decompression context kept for the same
 * reason. Every property of the frame that the format fixes is checked
 * before anything is trusted: the declared length against PST_MAX_CHUNK,
 * the frame's own content size (when it has one) against the declared
 * length, the frame filling the payload exactly, and the output being
 * exactly raw_len bytes. libzstd never reads or writes outside the buffers
 * it is given, so a damaged frame is an error, never a crash.
 *
 * An EVENTS frame may hold its payload in column form (columns.c, FORMAT.md
 * "Columns"): then the payload is put back together behind the frame's
 * bytes in the same buffer, and a column that does not add up is the
 * chunk's damage like a bad frame.
 *
 * The reader (rd_chunk.c), `record`'s exec lookup (launch.c) and the test
 * tools call this; the interposer only compresses (preload/compress.c).
 */
#include <stdlib.h>

#include <zstd.h>

#include "columns.h"
#include "poolscope/error.h"
#include "poolscope/format.h"

/* Room for n bytes in z's buffer, what it holds kept. */
static int room(pst_inflate_t *z, size_t n)
{
    if (z->cap >= n) return 0;
    uint8_t *b = realloc(z->buf, n);
    if (!b) return PSC_ENOMEM;
    z->buf = b;
    z->cap = n;
    return 0;
}

int pst_chunk_inflate(pst_inflate_t *z, const pst_chunk_hdr_t *h, const uint8_t *payload,
                      const uint8_t **out, size_t *out_len)
{
    if (h->version != PST_CHUNK_V2 || !(h->flags & PST_CHUNK_ZSTD)) {
        *out = payload;
        *out_len = h->len;
        return 0;
    }
    const uint8_t *end = payload + h->len, *p;
    uint64_t raw;
    if (!(p = pst_get_varint(payload, end, &raw)) || raw > PST_MAX_CHUNK) return PSC_ECORRUPT;
    size_t zlen = (size_t)(end - p);
    if (ZSTD_findFrameCompressedSize(p, zlen) != zlen) return PSC_ECORRUPT;   /* one frame, all of it */
    unsigned long long fcs = ZSTD_getFrameContentSize(p, zlen);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != raw)) return PSC_ECORRUPT;
    if (!z->dctx && !(z->dctx = ZSTD_createDCtx())) return PSC_ENOMEM;
    if (room(z, raw ? (size_t)raw : 1)) return PSC_ENOMEM;
    size_t n = ZSTD_decompressDCtx(z->dctx, z->buf, (size_t)raw, p, zlen);
    if (ZSTD_isError(n) || n != raw) return PSC_ECORRUPT;
    *out = z->buf;
    *out_len = (size_t)raw;
    if (h->kind == PST_CHUNK_EVENTS && pst_cols_is_split(z->buf, n)) {
        size_t jl;
        if (pst_cols_joined_len(z->buf, n, &jl)) return PSC_ECORRUPT;
        if (room(z, n + jl)) return PSC_ENOMEM;
        if (pst_cols_join(z->buf, n, z->buf + n, jl, out_len) || *out_len != jl) return PSC_ECORRUPT;
        *out = z->buf + n;
    }
    return 0;
}

void pst_inflate_done(pst_inflate_t *z)
{
    if (!z) return;
    ZSTD_freeDCtx(z->dctx);
    free(z->buf);
    z->dctx = NULL;
    z->buf = NULL;
    z->cap = 0;
}

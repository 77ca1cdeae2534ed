/* compress.c — zstd for the flusher's chunks (format 1.5, PST_CHUNK_ZSTD),
 * EVENTS in column form first (columns.c, format 1.6). Level 3; the
 * context's and the buffers' memory from raw mmap, never the program's
 * heap. Only the flusher, exit and exec compress: a hook or a fatal
 * signal never takes the compressor (ps_z_take). Every frame stands alone,
 * so the crash and recovery guarantees do not change. */
#include "preload.h"
#include "columns.h"   /* EVENTS in column form before zstd (ps_z_compress) */

#include <string.h>
#include <sys/uio.h>

#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_createCCtx_advanced: our own allocator */
#include <zstd.h>

/* zstd's memory comes from raw mmap (tracer_bytes counts it), never from
 * the program's allocator: the program's heap stays what it would be
 * without us, and nothing zstd does can enter our hooks. */
static void *z_alloc(void *opaque, size_t size)
{
    (void)opaque;
    uint8_t *p = ps_sys_mmap(size + 16);
    if (!p) return NULL;
    *(size_t *)p = size + 16;
    return p + 16;
}

static void z_free(void *opaque, void *addr)
{
    (void)opaque;
    if (!addr) return;
    uint8_t *p = (uint8_t *)addr - 16;
    ps_sys_munmap(p, *(size_t *)p);
}

/* A buffer of at least n bytes at *b (raw mmap, kept for later chunks). */
int ps_z_room(uint8_t **b, size_t *cap, size_t n)
{
    if (*cap >= n) return 0;
    size_t c = *cap ? *cap : (512u << 10);
    while (c < n) c *= 2;
    uint8_t *nb = ps_sys_mmap(c);
    if (!nb) return -1;
    ps_sys_munmap(*b, *cap);
    *b = nb;
    *cap = c;
    return 0;
}

/* The pieces iov[0..n) (len bytes together) as a compressed payload into
 * *out (varint raw_len, one zstd frame): its length, or 0 when that fails
 * or saves nothing (then the chunk goes uncompressed). z.lock held. */
size_t ps_z_compress(const struct iovec *iov, int n, size_t len, uint8_t **out, size_t *cap)
{
    ps_z_t *z = &ps_g.z;
    if (z->broken || len < PS_Z_MIN || len > PST_MAX_CHUNK) return 0;
    if (!z->cctx) {
        ZSTD_customMem mem = { z_alloc, z_free, NULL };
        if (!(z->cctx = ZSTD_createCCtx_advanced(mem)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_compressionLevel, PS_Z_LEVEL)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_checksumFlag, 1))) {   /* FORMAT.md */
            z->broken = 1;
            return 0;
        }
    }
    /* EVENTS (the only chunks compressed into eout) go in column form
     * (columns.c): the pieces gathered, then split, in buffers of our own
     * kept for later chunks (z.lock held); plain when that fails */
    struct iovec col[2];
    size_t slen = len;
    int split = 0;
    if (out == &z->eout) {
        static uint8_t *gather, *cols, *tmp;
        static size_t gather_cap, cols_cap, tmp_cap;
        if (ps_z_room(&gather, &gather_cap, len) == 0 && ps_z_room(&cols, &cols_cap, PST_COLS_BOUND(len)) == 0 &&
            ps_z_room(&tmp, &tmp_cap, PST_COLS_TMP(len)) == 0) {
            size_t at = 0;
            for (int i = 0; i < n; i++) {
                memcpy(gather + at, iov[i].iov_base, iov[i].iov_len);
                at += iov[i].iov_len;
            }
            size_t cut, cl = pst_cols_split(gather, len, cols, cols_cap, tmp, tmp_cap, &cut);
            if (cl) {   /* two pieces: a new block at the stack column */
                col[0] = (struct iovec){ cols, cut };
                col[1] = (struct iovec){ cols + cut, cl - cut };
                iov = col;
                n = 2;
                slen = cl;
                split = 1;
            }
        }
    }
    size_t bound = PST_VARINT_MAX + ZSTD_compressBound(slen);
    if (ps_z_room(out, cap, bound) != 0) return 0;
    ZSTD_CCtx *cc = z->cctx;
    ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
    if (ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cc, slen))) return 0;
    uint8_t *o = pst_put_varint(*out, slen);
    ZSTD_outBuffer ob = { o, bound - (size_t)(o - *out), 0 };
    for (int i = 0; i < n; i++) {
        ZSTD_inBuffer ib = { iov[i].iov_base, iov[i].iov_len, 0 };
        ZSTD_EndDirective d = i == n - 1 ? ZSTD_e_end : split ? ZSTD_e_flush : ZSTD_e_continue;
        for (;;) {
            size_t r = ZSTD_compressStream2(cc, &ob, &ib, d);
            if (ZSTD_isError(r)) { ZSTD_CCtx_reset(cc, ZSTD_reset_session_only); return 0; }
            if (d == ZSTD_e_continue ? ib.pos == ib.size : r == 0) break;
            if (ob.pos == ob.size) { ZSTD_CCtx_reset(cc, ZSTD_reset_session_only); return 0; }
        }
    }
    size_t total = (size_t)(o - *out) + ob.pos;
    /* a large chunk takes milliseconds: the tick must not stand still meanwhile
     * (moving it forward is what busy threads do too) */
    ps_tick_advance(NULL);
    return total < len ? total : 0;
}

/* Take the compressor for a chunk write: 1 taken (z.lock held), 0 write
 * uncompressed. Never while a fatal signal closes the trace. */
int ps_z_take(int want)
{
    if (!want || ps_g.fatal || ps_g.z.broken) return 0;
    return pthread_mutex_lock(&ps_g.z.lock) == 0;
}

void ps_z_give(int held)
{
    if (held) pthread_mutex_unlock(&ps_g.z.lock);
}

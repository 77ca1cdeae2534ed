/* writer.c — the tools' and tests' .pst writer (see writer.h).
 *
 * One buffer per stream, one META buffer, interning tables for strings and
 * stacks (an array of entries, found through the common hash map keyed by
 * a 64-bit hash of the bytes; entries with equal hashes are chained).
 * Everything goes through the encoders of format.c, so a hand-built trace
 * is byte-for-byte what the format says. Deterministic: the same calls give
 * the same bytes (the golden test relies on it). A file of minor 5 codes
 * addresses against each stream's recent ones and gives META and EVENTS
 * chunks version 2, compressed with zstd when cfg.zstd_level asks for it
 * (one frame per chunk, kept only when smaller; from minor 6 EVENTS in
 * column form, columns.c, as the interposer writes them); older minors are written as
 * their writers did.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "columns.h"
#include "hashmap.h"
#include "poolscope/error.h"
#include "poolscope/writer.h"

#define DEFAULT_CHUNK (64u << 10)

typedef struct wbuf { uint8_t *p; size_t len, cap; } wbuf_t;

typedef struct wstream {
    uint32_t id, tid, parent;
    int      started;      /* THREAD_START written */
    int      tid_set;
    pst_enc_t enc;
    uint64_t offset;       /* stream bytes already written in chunks */
    wbuf_t   buf;
    uint16_t index[PST_RECENT_IDX];   /* enc's recent-address index (minor 5) */
} wstream_t;

/* interning: bytes -> id */
typedef struct ientry {
    uint64_t hash; uint8_t *bytes; size_t len;
    uint32_t next;                     /* id of the next entry with the same hash, 0 = none */
} ientry_t;
typedef struct itab {
    ientry_t *ent; uint32_t n, cap;    /* entry i has id i + 1 */
    psc_map_t ids;                     /* hash -> id of the newest entry with it (0: none yet) */
} itab_t;

struct pst_writer {
    FILE    *fp;
    int      own_fp;
    int      err;
    uint32_t chunk_bytes;
    uint64_t tick_ns;
    uint64_t now;
    uint64_t page;
    uint64_t pid;
    wbuf_t   meta;
    wstream_t **streams;   /* sorted by id */
    uint32_t n_streams, cap_streams;
    itab_t   strings, stacks;
    uint64_t events, lost_extra;
    uint16_t minor;        /* what the header claims (PST_MINOR unless a test asked for less) */
    int      zlevel;       /* minor 5: zstd level of META and EVENTS chunks, 0 none */
    ZSTD_CCtx *cctx;
    wbuf_t   zbuf;         /* a compressed payload */
    wbuf_t   cols, ctmp;   /* an EVENTS payload in column form, before compression; its scratch */
    uint32_t prev_id, prev_depth;         /* minor 9: the stack defined last, which the next */
    uint64_t prev_fr[PST_MAX_DEPTH];      /* may name as its outer frames (STACK_TAIL) */
};

/* ---- small helpers ---------------------------------------------------- */

static int fail(pst_writer_t *w, int err)
{
    if (!w->err) w->err = err;
    return w->err;
}

/* Room for `more` bytes at the end of b. */
static uint8_t *reserve(pst_writer_t *w, wbuf_t *b, size_t more)
{
    if (b->cap - b->len < more) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < more) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { fail(w, PSC_ENOMEM); return NULL; }
        b->p = p;
        b->cap = cap;
    }
    return b->p + b->len;
}

static uint64_t hash_bytes(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;          /* FNV-1a, then a final mix */
    for (size_t i = 0; i < len; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

/* Returns the id (existing or new, *is_new set), 0 on failure. */
static uint32_t itab_intern(pst_writer_t *w, itab_t *t, const void *b, size_t len, int *is_new)
{
    uint64_t h = hash_bytes(b, len);
    *is_new = 0;
    if (!psc_map_capacity(&t->ids) && psc_map_init(&t->ids, sizeof(uint32_t), 32, 50, NULL)) {
        fail(w, PSC_ENOMEM);
        return 0;
    }
    /* the head is added first: if a later step fails it stays 0 (an empty chain) */
    uint32_t *head = psc_map_put_sz(&t->ids, h, NULL, sizeof(uint32_t));
    if (!head) { fail(w, PSC_ENOMEM); return 0; }
    for (uint32_t id = *head; id; id = t->ent[id - 1].next) {
        const ientry_t *e = &t->ent[id - 1];
        if (e->len == len && (len == 0 || memcmp(e->bytes, b, len) == 0)) return id;
    }
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        ientry_t *e = realloc(t->ent, cap * sizeof *e);
        if (!e) { fail(w, PSC_ENOMEM); return 0; }
        t->ent = e;
        t->cap = cap;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) { fail(w, PSC_ENOMEM); return 0; }
    if (len) memcpy(copy, b, len);
    t->ent[t->n] = (ientry_t){ h, copy, len, *head };
    *head = ++t->n;
    *is_new = 1;
    return t->n;
}

static void itab_free(itab_t *t)
{
    for (uint32_t i = 0; i < t->n; i++) free(t->ent[i].bytes);
    free(t->ent);
    psc_map_free(&t->ids);
}

/* ---- output --------------------------------------------------------------- */

static int write_all(pst_writer_t *w, const void *p, size_t n)
{
    if (w->err) return w->err;
    if (n && fwrite(p, 1, n, w->fp) != n) return fail(w, PSC_EIO);
    return 0;
}

/* src[0..n) into the frame being written at ob, up to a block end (flush)
 * or the frame's end: 0, or -1 (an error, or ob full: it is sized to the
 * bound, so never). */
static int z_piece(ZSTD_CCtx *cc, ZSTD_outBuffer *ob, const uint8_t *src, size_t n, ZSTD_EndDirective d)
{
    ZSTD_inBuffer ib = { src, n, 0 };
    for (;;) {
        size_t r = ZSTD_compressStream2(cc, ob, &ib, d);
        if (ZSTD_isError(r)) return -1;
        if (r == 0) return 0;
        if (ob->pos == ob->size) return -1;
    }
}

static int write_chunk(pst_writer_t *w, unsigned kind, uint32_t stream, const void *payload, size_t len)
{
    if (w->err) return w->err;
    if (len > PST_MAX_CHUNK) return fail(w, PSC_EINVAL);
    uint8_t hdr[PST_CHUNK_HDR];
    unsigned ver = PST_CHUNK_V1, flags = 0;
    if (w->minor >= 5 && (kind == PST_CHUNK_META || kind == PST_CHUNK_EVENTS)) {
        ver = PST_CHUNK_V2;
        if (w->zlevel > 0 && len) {
            if (!w->cctx) {
                if (!(w->cctx = ZSTD_createCCtx())) return fail(w, PSC_ENOMEM);
                ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, w->zlevel);
                ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);   /* FORMAT.md: frames carry it */
            }
            /* EVENTS in column form (columns.c), a new block at the stack column */
            const uint8_t *src = payload;
            size_t slen = len, cut = 0;
            if (kind == PST_CHUNK_EVENTS && w->minor >= 6) {   /* minor 5 wrote them plain */
                w->cols.len = 0;
                w->ctmp.len = 0;
                uint8_t *c = reserve(w, &w->cols, PST_COLS_BOUND(len)), *t = reserve(w, &w->ctmp, PST_COLS_TMP(len));
                if (!c || !t) return w->err;
                size_t cl = pst_cols_split(payload, len, c, PST_COLS_BOUND(len), t, PST_COLS_TMP(len), &cut);
                if (cl) { src = c; slen = cl; }
            }
            size_t bound = PST_VARINT_MAX + ZSTD_compressBound(slen);
            w->zbuf.len = 0;
            uint8_t *z = reserve(w, &w->zbuf, bound);
            if (!z) return w->err;
            uint8_t *q = pst_put_varint(z, slen);
            ZSTD_CCtx_reset(w->cctx, ZSTD_reset_session_only);
            ZSTD_CCtx_setPledgedSrcSize(w->cctx, slen);
            ZSTD_outBuffer ob = { q, bound - (size_t)(q - z), 0 };
            size_t at = cut < slen ? cut : 0;
            if ((at && z_piece(w->cctx, &ob, src, at, ZSTD_e_flush)) ||
                z_piece(w->cctx, &ob, src + at, slen - at, ZSTD_e_end))
                return fail(w, PSC_EINVAL);
            size_t n = ob.pos;
            if ((size_t)(q - z) + n < len) {   /* kept only when it saves bytes */
                payload = z;
                len = (size_t)(q - z) + n;
                flags = PST_CHUNK_ZSTD;
            }
        }
    }
    pst_put_chunk_hdr_v(hdr, kind, ver, flags, stream, (uint32_t)len, pst_crc32c(0, payload, len));
    write_all(w, hdr, sizeof hdr);
    return write_all(w, payload, len);
}

static int flush_meta(pst_writer_t *w)
{
    if (w->err || !w->meta.len) return w->err;
    int rc = write_chunk(w, PST_CHUNK_META, 0, w->meta.p, w->meta.len);
    w->meta.len = 0;
    return rc;
}

static int flush_stream(pst_writer_t *w, wstream_t *s)
{
    if (flush_meta(w)) return w->err;
    if (!s->buf.len) return 0;
    /* the stream offset varint goes in front of the events */
    uint8_t off[PST_VARINT_MAX];
    size_t n = (size_t)(pst_put_stream_offset(off, s->offset) - off);
    if (!reserve(w, &s->buf, n)) return w->err;
    memmove(s->buf.p + n, s->buf.p, s->buf.len);
    memcpy(s->buf.p, off, n);
    int rc = write_chunk(w, PST_CHUNK_EVENTS, s->id, s->buf.p, s->buf.len + n);
    s->offset += s->buf.len;
    s->buf.len = 0;
    return rc;
}

/* ---- streams ------------------------------------------------------------ */

static wstream_t *find_stream(pst_writer_t *w, uint32_t id, int create)
{
    uint32_t lo = 0, hi = w->n_streams;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (w->streams[mid]->id < id) lo = mid + 1; else hi = mid;
    }
    if (lo < w->n_streams && w->streams[lo]->id == id) return w->streams[lo];
    if (!create) return NULL;
    if (id == 0) { fail(w, PSC_EINVAL); return NULL; }
    if (w->n_streams == w->cap_streams) {
        uint32_t cap = w->cap_streams ? w->cap_streams * 2 : 8;
        wstream_t **a = realloc(w->streams, cap * sizeof *a);
        if (!a) { fail(w, PSC_ENOMEM); return NULL; }
        w->streams = a;
        w->cap_streams = cap;
    }
    wstream_t *s = calloc(1, sizeof *s);
    if (!s) { fail(w, PSC_ENOMEM); return NULL; }
    s->id = id;
    s->tid = w->pid ? (uint32_t)(w->pid + id - 1) : id;
    pst_enc_init(&s->enc, pst_coding_of_minor(w->minor), s->index);
    memmove(&w->streams[lo + 1], &w->streams[lo], (w->n_streams - lo) * sizeof *w->streams);
    w->streams[lo] = s;
    w->n_streams++;
    return s;
}

/* Encode ev into s (TS first when due), no THREAD_START logic. */
static int put_event(pst_writer_t *w, wstream_t *s, const pst_event_t *ev)
{
    size_t need = PST_EVENT_MAX + 3 * PST_VARINT_MAX + 1 + (size_t)ev->n_ids * PST_VARINT_MAX;
    uint8_t *p = reserve(w, &s->buf, need);
    if (!p) return w->err;
    uint8_t *start = p;
    int exact = w->tick_ns == 0;
    if (!s->started || s->enc.since_ts >= PST_TS_EVERY || (exact && s->enc.last_ts != w->now))
        p = pst_put_ts(&s->enc, p, w->now);
    s->started = 1;
    if (w->minor >= 8) p = pst_put_cyc(&s->enc, p, ev->cyc);
    p = pst_encode_event(&s->enc, p, ev);
    if (!p) return fail(w, PSC_EINVAL);
    s->buf.len += (size_t)(p - start);
    w->events++;
    w->now += w->tick_ns;
    return 0;
}

int pst_writer_thread(pst_writer_t *w, uint32_t stream, uint32_t tid, uint32_t parent_stream)
{
    if (w->err) return w->err;
    wstream_t *s = find_stream(w, stream, 1);
    if (!s) return w->err;
    if (s->started) return PSC_EINVAL;
    s->tid = tid;
    s->parent = parent_stream;
    s->tid_set = 1;
    return 0;
}

int pst_writer_event(pst_writer_t *w, uint32_t stream, const pst_event_t *ev_in)
{
    if (w->err) return w->err;
    const char *lay = pst_event_layout(ev_in->type);
    if (!lay || pst_is_record(ev_in->type) || ev_in->n_ver > 2) return PSC_EINVAL;
    /* a type of a later minor than the file claims: its readers would stop there */
    if (w->minor < 4 && (ev_in->type == PST_EV_MPROTECT || ev_in->type == PST_EV_MMAP_NAME)) return PSC_EINVAL;
    wstream_t *s = find_stream(w, stream, 1);
    if (!s) return w->err;
    pst_event_t ev = *ev_in;
    if (w->minor < 3) ev.n_ver = 0;   /* VER records came with minor 3 */
    for (unsigned i = 0; lay[i]; i++)
        if (lay[i] == 'S' && ev.f[i] == 0 && ev.str) {
            ev.f[i] = pst_writer_string(w, ev.str);
            if (!ev.f[i]) return w->err;
        }
    if (ev.n_ids > PST_MAX_IDS || ev.n_payload > PST_MAX_PAYLOAD) return PSC_EINVAL;
    if (!s->started && ev.type != PST_EV_THREAD_START) {
        pst_event_t ts = { .type = PST_EV_THREAD_START, .f = { s->tid, s->parent } };
        if (put_event(w, s, &ts)) return w->err;
    }
    if (put_event(w, s, &ev)) return w->err;
    if (s->buf.len >= w->chunk_bytes) return flush_stream(w, s);
    return 0;
}

int pst_writer_emitv(pst_writer_t *w, uint32_t stream, unsigned type, const uint64_t *f, unsigned nf)
{
    const char *lay = pst_event_layout(type);
    if (!lay || nf > PST_MAX_FIELDS || nf != strlen(lay)) return PSC_EINVAL;
    pst_event_t ev = { .type = (uint8_t)type };
    for (unsigned i = 0; i < nf; i++) ev.f[i] = f[i];
    for (unsigned i = 0; i < nf; i++)
        if (lay[i] == 'L' || lay[i] == 'P') {
            if (f[i]) return PSC_EINVAL;   /* contents need pst_writer_event */
        }
    return pst_writer_event(w, stream, &ev);
}

/* ---- definitions ---------------------------------------------------------- */

uint32_t pst_writer_string(pst_writer_t *w, const char *str)
{
    if (w->err || !str) return 0;
    size_t len = strlen(str);
    if (len > PST_MAX_CHUNK / 2) { fail(w, PSC_EINVAL); return 0; }
    int is_new;
    uint32_t id = itab_intern(w, &w->strings, str, len, &is_new);
    if (!id || !is_new) return id;
    uint8_t *p = reserve(w, &w->meta, 1 + 2 * PST_VARINT_MAX + len);
    if (!p) return 0;
    w->meta.len += (size_t)(pst_put_meta_string(p, id, str, len) - p);
    if (w->meta.len >= w->chunk_bytes && flush_meta(w)) return 0;
    return id;
}

uint32_t pst_writer_stack(pst_writer_t *w, const uint64_t *frames, uint32_t depth)
{
    if (w->err) return 0;
    if (depth > PST_MAX_DEPTH || (depth && !frames)) { fail(w, PSC_EINVAL); return 0; }
    int is_new;
    uint32_t id = itab_intern(w, &w->stacks, frames, depth * sizeof *frames, &is_new);
    if (!id || !is_new) return id;
    uint8_t *p = reserve(w, &w->meta, 1 + PST_VARINT_MAX * (4 + (size_t)depth));
    if (!p) return 0;
    if (w->minor >= 9) {
        w->meta.len += (size_t)(pst_put_meta_stack_near(p, id, frames, depth, w->prev_id, w->prev_fr,
                                                        w->prev_depth) - p);
        if (depth) memcpy(w->prev_fr, frames, depth * sizeof *frames);
        w->prev_depth = depth;
        w->prev_id = id;
    } else {
        w->meta.len += (size_t)(pst_put_meta_stack(p, id, frames, depth) - p);
    }
    if (w->meta.len >= w->chunk_bytes && flush_meta(w)) return 0;
    return id;
}

int pst_writer_module(pst_writer_t *w, int map, uint64_t base, uint64_t size, const char *path,
                      const uint8_t *build_id, size_t bid_len)
{
    if (w->err) return w->err;
    size_t plen = path ? strlen(path) : 0;
    if (plen + bid_len > PST_MAX_CHUNK / 2) return fail(w, PSC_EINVAL);
    uint8_t *p = reserve(w, &w->meta, 1 + 6 * PST_VARINT_MAX + plen + bid_len);
    if (!p) return w->err;
    w->meta.len += (size_t)(pst_put_meta_module(p, map, w->now, base, size, path, plen,
                                                build_id, bid_len) - p);
    return 0;
}

/* ---- open / flush / close -------------------------------------------------- */

void pst_writer_time(pst_writer_t *w, uint64_t ns) { w->now = ns; }
uint64_t pst_writer_now(const pst_writer_t *w) { return w->now; }
void pst_writer_add_lost(pst_writer_t *w, uint64_t n) { w->lost_extra += n; }

pst_writer_t *pst_writer_open_fp(FILE *fp, const pst_writer_cfg_t *cfg, int *err)
{
    int e = PSC_ENOMEM;
    pst_writer_t *w = calloc(1, sizeof *w);
    uint8_t *hdr = NULL;
    char *args = NULL;
    if (!w) goto out;
    w->fp = fp;
    w->chunk_bytes = cfg->chunk_bytes ? cfg->chunk_bytes : DEFAULT_CHUNK;
    if (w->chunk_bytes > PST_MAX_CHUNK / 2) w->chunk_bytes = PST_MAX_CHUNK / 2;
    w->tick_ns = cfg->tick_ns;
    w->minor = cfg->minor ? cfg->minor : PST_MINOR;
    w->zlevel = cfg->zstd_level;
    w->pid = cfg->pid;
    size_t alen = 0;
    if (cfg->argv)
        for (size_t i = 0; cfg->argv[i]; i++) alen += strlen(cfg->argv[i]) + 1;
    if (cfg->argv && !(args = malloc(alen ? alen : 1))) goto out;
    if (cfg->argv) {
        size_t o = 0;
        for (size_t i = 0; cfg->argv[i]; i++) {
            size_t l = strlen(cfg->argv[i]) + 1;
            memcpy(args + o, cfg->argv[i], l);
            o += l;
        }
    }
    pst_file_info_t fi = {
        .pid = cfg->pid, .ppid = cfg->ppid, .parent_pid = cfg->parent_pid, .exec_gen = cfg->exec_gen,
        .start_real_ns = cfg->start_real_ns, .start_mono_ns = cfg->start_mono_ns,
        .stacks = cfg->stacks, .depth = cfg->depth, .page_size = cfg->page_size ? cfg->page_size : 4096,
        .exe = cfg->exe, .argv = args, .argv_len = alen, .tool = cfg->tool, .host = cfg->host, .minor = cfg->minor,
    };
    size_t cap = 256 + alen + (cfg->exe ? strlen(cfg->exe) : 0) + (cfg->tool ? strlen(cfg->tool) : 0)
               + (cfg->host ? strlen(cfg->host) : 0);
    if (!(hdr = malloc(cap))) goto out;
    int n = pst_put_file_header(hdr, cap, &fi);
    if (n < 0) { e = PSC_EINVAL; goto out; }
    if (write_all(w, hdr, (size_t)n)) { e = w->err; goto out; }
    free(hdr);
    free(args);
    return w;
out:
    free(hdr);
    free(args);
    free(w);
    if (err) *err = e;
    return NULL;
}

pst_writer_t *pst_writer_open(const char *path, const pst_writer_cfg_t *cfg, int *err)
{
    FILE *fp = fopen(path, "wb");
    if (!fp) { if (err) *err = PSC_EIO; return NULL; }
    pst_writer_t *w = pst_writer_open_fp(fp, cfg, err);
    if (!w) { fclose(fp); return NULL; }
    w->own_fp = 1;
    return w;
}

int pst_writer_flush_stream(pst_writer_t *w, uint32_t stream)
{
    if (w->err) return w->err;
    wstream_t *s = find_stream(w, stream, 0);
    return s ? flush_stream(w, s) : flush_meta(w);
}

int pst_writer_flush(pst_writer_t *w)
{
    if (flush_meta(w)) return w->err;
    for (uint32_t i = 0; i < w->n_streams; i++)
        if (flush_stream(w, w->streams[i])) return w->err;
    /* Every stream is out: nothing stamped before now can follow (SYNC). */
    if (w->n_streams) {
        uint8_t p[PST_VARINT_MAX];
        write_chunk(w, PST_CHUNK_SYNC, 0, p, (size_t)(pst_put_sync(p, pst_writer_now(w)) - p));
    }
    return w->err;
}

int pst_writer_raw_chunk(pst_writer_t *w, unsigned kind, uint32_t stream, const void *payload, uint32_t len)
{
    if (flush_meta(w)) return w->err;
    if (len > PST_MAX_CHUNK) return fail(w, PSC_EINVAL);
    uint8_t hdr[PST_CHUNK_HDR];   /* version 1, the payload as given */
    pst_put_chunk_hdr(hdr, kind, stream, payload, len);
    write_all(w, hdr, sizeof hdr);
    return write_all(w, payload, len);
}

static int finish(pst_writer_t *w, int end)
{
    if (!w) return 0;
    pst_writer_flush(w);
    if (end && !w->err) {
        uint8_t p[3 * PST_VARINT_MAX];
        size_t n = (size_t)(pst_put_end(p, w->events, w->lost_extra, w->n_streams) - p);
        write_chunk(w, PST_CHUNK_END, 0, p, n);
    }
    if (!w->err && fflush(w->fp)) fail(w, PSC_EIO);
    if (w->own_fp && fclose(w->fp)) fail(w, PSC_EIO);
    int rc = w->err;
    for (uint32_t i = 0; i < w->n_streams; i++) {
        free(w->streams[i]->buf.p);
        free(w->streams[i]);
    }
    free(w->streams);
    free(w->meta.p);
    free(w->zbuf.p);
    free(w->cols.p);
    free(w->ctmp.p);
    ZSTD_freeCCtx(w->cctx);
    itab_free(&w->strings);
    itab_free(&w->stacks);
    free(w);
    return rc;
}

int pst_writer_close(pst_writer_t *w) { return finish(w, 1); }
int pst_writer_abandon(pst_writer_t *w) { return finish(w, 0); }

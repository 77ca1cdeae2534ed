/* rd_chunk.c — the reader's input side: the byte source, the file header,
 * chunk framing and validation, and the chunks that are not events.
 *
 * The source is either one buffer of read() blocks (holding at most one
 * chunk plus a block: PST_MAX_CHUNK bounds it) or the caller's memory.
 * rd_read_chunk frames one chunk, checks its CRC, version and stream id,
 * and dispatches it: META records define strings, stacks and modules (first
 * definition wins; pst_string / pst_stack / pst_modules answer from them),
 * END counts are checked against what was read, SYNC raises the watermark
 * the merge uses to decide what is safe, unknown kinds are skipped by
 * length. An EVENTS chunk is handed back to the caller, the decode stage
 * (rd_decode_chunk), which ends it with rd_chunk_done: this first stage of
 * the reader calls no later one. Damage is noted in the status (truncated /
 * corrupt) and ends the input; nothing here knows about the merge order.
 */
#include <errno.h>
#include <unistd.h>

#include "rd_chunk.h"

#define RD_MAX_HDR_TLV     (16u << 20)

/* ---- source ------------------------------------------------------------------ */

/* Make n bytes available at *p; returns how many are (< n only at the end of
 * the input), or a negative error. */
static long rd_src_ensure(pst_reader_t *r, size_t n, const uint8_t **p)
{
    if (r->fd < 0) {
        size_t pos = (size_t)r->off, avail = pos <= r->mem_len ? r->mem_len - pos : 0;
        *p = r->mem + pos;
        return (long)(avail < n ? avail : n);
    }
    if (r->blim - r->bpos < n && !r->src_eof) {
        if (r->bpos) {
            memmove(r->buf, r->buf + r->bpos, r->blim - r->bpos);
            r->blim -= r->bpos;
            r->bpos = 0;
        }
        if (r->bcap < n) {
            size_t cap = r->bcap;
            while (cap < n) cap *= 2;
            uint8_t *b = realloc(r->buf, cap);
            if (!b) return PSC_ENOMEM;
            r->buf = b;
            r->bcap = cap;
        }
        while (r->blim < n) {
            ssize_t k = read(r->fd, r->buf + r->blim, r->bcap - r->blim);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) return PSC_EIO;
            if (k == 0) { r->src_eof = 1; break; }
            r->blim += (size_t)k;
        }
    }
    *p = r->buf + r->bpos;
    size_t avail = r->blim - r->bpos;
    return (long)(avail < n ? avail : n);
}

static void rd_src_consume(pst_reader_t *r, size_t n)
{
    r->off += n;
    if (r->fd >= 0) r->bpos += n;
    r->st.bytes += n;
}

/* Bytes left in the input (reads to the end for a file; used once, at a
 * truncation, to report the unread bytes). */
static uint64_t rd_src_remaining(pst_reader_t *r)
{
    if (r->fd < 0) return r->off <= r->mem_len ? r->mem_len - r->off : 0;
    uint64_t n = r->blim - r->bpos;
    if (!r->src_eof) {
        off_t cur = lseek(r->fd, 0, SEEK_CUR), endp = lseek(r->fd, 0, SEEK_END);
        if (cur >= 0 && endp >= cur) n += (uint64_t)(endp - cur);
        r->src_eof = 1;
    }
    return n;
}

/* ---- status helpers -------------------------------------------------------- */

void rd_set_corrupt(pst_reader_t *r, uint64_t at, const char *why)
{
    if (!r->st.corrupt) {
        r->st.corrupt = 1;
        r->st.corrupt_offset = at;
        r->st.corrupt_reason = why;
        r->st.error = PSC_ECORRUPT;
    }
    r->eof = 1;
}

static void rd_set_truncated(pst_reader_t *r, uint64_t unread)
{
    r->st.truncated = 1;
    r->st.unread_bytes = unread;
    if (!r->st.error) r->st.error = PSC_ETRUNC;
    r->eof = 1;
}

/* ---- file header --------------------------------------------------------------- */

static char *rd_dup_bytes(const uint8_t *b, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, b, n);
    s[n] = 0;
    return s;
}

int rd_parse_header(pst_reader_t *r)
{
    const uint8_t *p;
    long n = rd_src_ensure(r, PST_FILE_HDR_FIXED, &p);
    if (n < 0) return (int)n;
    size_t cmp = (size_t)n < 8 ? (size_t)n : 8;
    if (memcmp(p, PST_MAGIC, cmp) != 0) return PSC_ECORRUPT;
    if (n < PST_FILE_HDR_FIXED) return PSC_ETRUNC;
    r->hdr.major = (uint16_t)(p[8] | p[9] << 8);
    r->hdr.minor = (uint16_t)(p[10] | p[11] << 8);
    r->causal_times = r->hdr.minor >= 2;
    r->coding = pst_coding_of_minor(r->hdr.minor);
    uint32_t tlv = (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
    if (r->hdr.major != PST_MAJOR) return PSC_EVERSION;
    if (tlv > RD_MAX_HDR_TLV) return PSC_ECORRUPT;
    n = rd_src_ensure(r, PST_FILE_HDR_FIXED + (size_t)tlv, &p);
    if (n < 0) return (int)n;
    if ((size_t)n < PST_FILE_HDR_FIXED + (size_t)tlv) return PSC_ETRUNC;
    const uint8_t *q = p + PST_FILE_HDR_FIXED, *end = q + tlv;
    while (q < end) {
        uint64_t tag, len, v = 0;
        if (!(q = pst_get_varint(q, end, &tag)) || !(q = pst_get_varint(q, end, &len))) return PSC_ECORRUPT;
        if (len > (uint64_t)(end - q)) return PSC_ECORRUPT;
        const uint8_t *val = q;
        q += len;
        switch (tag) {
        case PST_HDR_PID: case PST_HDR_PPID: case PST_HDR_START_REAL: case PST_HDR_START_MONO:
        case PST_HDR_STACKS: case PST_HDR_DEPTH: case PST_HDR_PAGE_SIZE: case PST_HDR_PARENT_PID:
        case PST_HDR_EXEC_GEN: case PST_HDR_ATTACH:
            if (pst_get_varint(val, q, &v) != q) return PSC_ECORRUPT;
            break;
        default:
            break;
        }
        char **dst = NULL;
        switch (tag) {
        case PST_HDR_PID:        r->hdr.pid = v; break;
        case PST_HDR_PPID:       r->hdr.ppid = v; break;
        case PST_HDR_START_REAL: r->hdr.start_real_ns = v; break;
        case PST_HDR_START_MONO: r->hdr.start_mono_ns = v; break;
        case PST_HDR_STACKS:     r->hdr.stacks = (uint32_t)v; break;
        case PST_HDR_DEPTH:      r->hdr.depth = (uint32_t)v; break;
        case PST_HDR_PAGE_SIZE:  r->hdr.page_size = v; break;
        case PST_HDR_PARENT_PID: r->hdr.parent_pid = v; break;
        case PST_HDR_EXEC_GEN:   r->hdr.exec_gen = v; break;
        case PST_HDR_ATTACH:     r->hdr.attach = (uint32_t)v; break;
        case PST_HDR_EXE:        dst = &r->exe; break;
        case PST_HDR_TOOL:       dst = &r->tool; break;
        case PST_HDR_HOST:       dst = &r->host; break;
        case PST_HDR_SCOPE_FUNCS: dst = &r->scope_funcs; r->hdr.scope_funcs_len = (size_t)len; break;
        case PST_HDR_ARGV:       dst = &r->argv_raw; r->hdr.argv_len = (size_t)len; break;
        default:                 break;   /* unknown tags are skipped */
        }
        if (dst) {
            free(*dst);
            if (!(*dst = rd_dup_bytes(val, (size_t)len))) return PSC_ENOMEM;
        }
    }
    /* split argv */
    size_t argc = 0;
    for (size_t i = 0; i < r->hdr.argv_len; i++)
        if (r->argv_raw[i] == 0 || i + 1 == r->hdr.argv_len) argc++;
    if (!(r->argv = calloc(argc + 1, sizeof *r->argv))) return PSC_ENOMEM;
    size_t k = 0, startp = 0;
    for (size_t i = 0; i < r->hdr.argv_len; i++)
        if (r->argv_raw[i] == 0 || i + 1 == r->hdr.argv_len) {
            r->argv[k++] = r->argv_raw + startp;   /* the copy has a NUL after the last byte */
            startp = i + 1;
        }
    r->hdr.argc = (uint32_t)argc;
    r->hdr.argv = (const char *const *)r->argv;
    r->hdr.exe = r->exe ? r->exe : "";
    r->hdr.tool = r->tool ? r->tool : "";
    r->hdr.host = r->host ? r->host : "";
    r->hdr.argv_raw = r->argv_raw ? r->argv_raw : "";
    r->hdr.scope_funcs = r->scope_funcs ? r->scope_funcs : "";
    rd_src_consume(r, PST_FILE_HDR_FIXED + (size_t)tlv);
    return 0;
}

const pst_header_t *pst_header(const pst_reader_t *r) { return &r->hdr; }

/* ---- definitions ------------------------------------------------------------ */

static int rd_def_string(pst_reader_t *r, uint64_t id, const uint8_t *b, size_t len)
{
    if (rd_map_get(&r->string_ids, id, NULL)) return 0;     /* first definition wins */
    RD_GROW(r->strings, r->n_strings, r->cap_strings, 64);
    char *s = malloc(len + 1);
    if (!s) return PSC_ENOMEM;
    memcpy(s, b, len);
    s[len] = 0;
    if (rd_map_put(&r->string_ids, id, r->n_strings)) { free(s); return PSC_ENOMEM; }
    r->strings[r->n_strings++].s = s;
    return 0;
}

static size_t node_slot(const pst_reader_t *r, uint32_t up, uint64_t pc)
{
    /* frames repeat under many parents (the interpreter's loop at one
     * return address): both halves mixed through, the top bits taken */
    uint64_t h = pc ^ ((uint64_t)up * 0xff51afd7ed558ccdull);
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & r->node_mask;
}

/* The node of frame pc under node up, made when new; 0 out of memory. */
static uint32_t node_intern(pst_reader_t *r, uint32_t up, uint64_t pc)
{
    if (((size_t)r->n_nodes + 1) * 10 > (r->node_mask + 1) * 7) {   /* keep the load under 70% */
        size_t cap = r->node_mask ? (r->node_mask + 1) * 2 : 4096;
        uint32_t *t = calloc(cap, sizeof *t);
        if (!t) return 0;
        free(r->node_tab);
        r->node_tab = t;
        r->node_mask = cap - 1;
        for (uint32_t i = 1; i < r->n_nodes; i++) {
            size_t h = node_slot(r, r->nodes[i].up, r->nodes[i].pc);
            while (t[h]) h = (h + 1) & r->node_mask;
            t[h] = i;
        }
    }
    size_t h = node_slot(r, up, pc);
    for (uint32_t k; (k = r->node_tab[h]); h = (h + 1) & r->node_mask)
        if (r->nodes[k].pc == pc && r->nodes[k].up == up) return k;
    if (r->n_nodes == UINT32_MAX) return 0;
    if (r->n_nodes == r->cap_nodes) {
        size_t cap = r->cap_nodes ? (size_t)r->cap_nodes * 2 : 4096;
        if (cap > UINT32_MAX) cap = UINT32_MAX;
        rd_node_t *a = realloc(r->nodes, cap * sizeof *a);
        if (!a) return 0;
        r->nodes = a;
        r->cap_nodes = (uint32_t)cap;
    }
    r->nodes[r->n_nodes] = (rd_node_t){ pc, up, 0 };
    r->node_tab[h] = r->n_nodes;
    return r->n_nodes++;
}

/* The innermost node of frames f[0..m) (innermost first) under node up,
 * their nodes made when new, each written to path[] outermost first when
 * path is not NULL; 0 out of memory (or m == 0 and up == 0). The child
 * taken last under a node is tried before the table: a stack that leaves
 * the previous one mostly rejoins a path walked before (a quarter of a
 * PyTorch trace's frames get here). */
static uint32_t rd_stack_under(pst_reader_t *r, uint32_t up, const uint64_t *f, uint32_t m, uint32_t *path)
{
    for (uint32_t k = m; k-- > 0;) {
        uint32_t c = r->nodes[up].last;
        if (c && r->nodes[c].pc == f[k]) {
            up = c;
        } else {
            uint32_t node = node_intern(r, up, f[k]);
            if (!node) return 0;
            r->nodes[up].last = node;
            up = node;
        }
        if (path) *path++ = up;
    }
    return up;
}

/* The innermost node of stack f[0..n) (innermost first), its nodes made
 * when new; 0 for an empty stack or out of memory. The previous stack's
 * path is walked first: consecutive stacks mostly share their outer
 * frames (77% of a PyTorch trace's), which then cost a compare instead of
 * a hash probe. */
static uint32_t rd_stack_leaf(pst_reader_t *r, const uint64_t *f, uint32_t n)
{
    if (!r->n_nodes) {   /* the root */
        r->nodes = malloc(4096 * sizeof *r->nodes);
        if (!r->nodes) return 0;
        r->cap_nodes = 4096;
        r->nodes[0] = (rd_node_t){ 0, 0, 0 };
        r->n_nodes = 1;
    }
    uint32_t node = 0, k = 0;
    while (k < n && k < r->n_path && r->nodes[r->path[k]].pc == f[n - 1 - k]) node = r->path[k++];
    if (k < n && !(node = rd_stack_under(r, node, f, n - k, r->path + k))) { r->n_path = 0; return 0; }
    r->n_path = n;
    return node;
}

/* n frames at *pp into f, innermost first: the first as it is, the rest
 * as zigzag deltas (format.c, put_frames). 0 when one is cut short. */
static int rd_get_frames(const uint8_t **pp, const uint8_t *end, uint64_t *f, uint64_t n)
{
    const uint8_t *p = *pp;
    uint64_t v;
    for (uint64_t i = 0; i < n; i++) {
        if (!(p = pst_get_varint(p, end, &v))) return 0;
        f[i] = i ? f[i - 1] + (uint64_t)pst_unzigzag(v) : v;
    }
    *pp = p;
    return 1;
}

/* 1 ok, 0 malformed, negative error */
static int rd_parse_meta(pst_reader_t *r, const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        unsigned kind = *p++;
        uint64_t id, n;
        if (kind == PST_META_STRING) {
            if (!(p = pst_get_varint(p, end, &id)) || !(p = pst_get_varint(p, end, &n))) return 0;
            if (n > (uint64_t)(end - p)) return 0;
            int rc = rd_def_string(r, id, p, (size_t)n);
            if (rc) return rc;
            p += n;
        } else if (kind == PST_META_STACK) {
            if (!(p = pst_get_varint(p, end, &id)) || !(p = pst_get_varint(p, end, &n))) return 0;
            if (n > RD_MAX_STACK_DEPTH || n > (uint64_t)(end - p)) return 0;
            uint64_t *f = r->parse_f;
            if (!rd_get_frames(&p, end, f, n)) return 0;
            if (rd_map_get(&r->stack_ids, id, NULL)) continue;   /* first definition wins */
            RD_GROW(r->stacks, r->n_stacks, r->cap_stacks, 64);
            uint32_t leaf = rd_stack_leaf(r, f, (uint32_t)n);
            if (n && !leaf) return PSC_ENOMEM;
            if (rd_map_put(&r->stack_ids, id, r->n_stacks)) return PSC_ENOMEM;
            r->stacks[r->n_stacks++] = (rd_stack_t){ leaf, (uint32_t)n };
        } else if (kind == PST_META_STACK_TAIL) {   /* minor 9 */
            uint64_t back, k, ri;
            if (!(p = pst_get_varint(p, end, &id)) || !(p = pst_get_varint(p, end, &n)) ||
                !(p = pst_get_varint(p, end, &back)) || !(p = pst_get_varint(p, end, &k)))
                return 0;
            uint64_t ref = id - (uint64_t)pst_unzigzag(back);   /* (mod 2^64: a wrong one is no id) */
            if (n > RD_MAX_STACK_DEPTH || k > n || n - k > (uint64_t)(end - p)) return 0;
            uint64_t *f = r->parse_f;
            if (!rd_get_frames(&p, end, f, n - k)) return 0;
            /* the outer k frames: stack ref's, defined before; in the
             * tree, its node k levels from the root */
            if (!rd_map_get(&r->stack_ids, ref, &ri) || r->stacks[ri].depth < k) return 0;
            if (rd_map_get(&r->stack_ids, id, NULL)) continue;   /* first definition wins */
            RD_GROW(r->stacks, r->n_stacks, r->cap_stacks, 64);
            uint32_t up = r->stacks[ri].leaf;
            for (uint32_t u = r->stacks[ri].depth; u > k; u--) up = r->nodes[up].up;
            uint32_t leaf = rd_stack_under(r, up, f, (uint32_t)(n - k), NULL);
            if (n > k && !leaf) return PSC_ENOMEM;
            if (rd_map_put(&r->stack_ids, id, r->n_stacks)) return PSC_ENOMEM;
            r->stacks[r->n_stacks++] = (rd_stack_t){ leaf, (uint32_t)n };
        } else if (kind == PST_META_MODULE) {
            uint64_t op, ts, base, size, plen, blen;
            if (!(p = pst_get_varint(p, end, &op)) || !(p = pst_get_varint(p, end, &ts)) ||
                !(p = pst_get_varint(p, end, &base)) || !(p = pst_get_varint(p, end, &size)) ||
                !(p = pst_get_varint(p, end, &plen)) || plen > (uint64_t)(end - p))
                return 0;
            const uint8_t *path = p;
            p += plen;
            if (!(p = pst_get_varint(p, end, &blen)) || blen > (uint64_t)(end - p) || blen > UINT32_MAX)
                return 0;
            const uint8_t *bid = p;
            p += blen;
            if (op == 0) {
                for (size_t i = r->n_mods; i-- > 0;)
                    if (r->mods[i].base == base && r->mods[i].unload_ts == UINT64_MAX) {
                        r->mods[i].unload_ts = ts;
                        break;
                    }
                continue;
            }
            RD_GROW(r->mods, r->n_mods, r->cap_mods, 16);
            char *ps = malloc(plen + 1);
            uint8_t *bs = malloc(blen ? blen : 1);
            if (!ps || !bs) { free(ps); free(bs); return PSC_ENOMEM; }
            memcpy(ps, path, plen);
            ps[plen] = 0;
            if (blen) memcpy(bs, bid, blen);
            r->mods[r->n_mods++] = (pst_module_t){ ps, base, size, bs, (uint32_t)blen, ts, UINT64_MAX };
        } else {
            return 0;   /* records are not self-delimiting: an unknown one ends the chunk */
        }
    }
    return 1;
}

const char *pst_string(const pst_reader_t *r, uint32_t id)
{
    uint64_t i;
    return rd_map_get(&r->string_ids, id, &i) ? r->strings[i].s : NULL;
}

size_t pst_string_count(const pst_reader_t *r)
{
    return r->n_strings;
}

const char *pst_string_at(const pst_reader_t *r, size_t i)
{
    return i < r->n_strings ? r->strings[i].s : NULL;
}

/* Stack i's frames, innermost first, in r->stk_out (overwritten by the
 * next call for another stack). */
static const uint64_t *stack_frames(const pst_reader_t *r, uint64_t i)
{
    rd_stack_out_t *o = r->stk_out;
    if (o->idx != i + 1) {
        uint32_t node = r->stacks[i].leaf;
        for (uint32_t k = 0; k < r->stacks[i].depth; k++, node = r->nodes[node].up) o->f[k] = r->nodes[node].pc;
        o->idx = i + 1;
    }
    return o->f;
}

const uint64_t *pst_stack(const pst_reader_t *r, uint32_t id, uint32_t *depth)
{
    uint64_t i;
    if (!rd_map_get(&r->stack_ids, id, &i)) { if (depth) *depth = 0; return NULL; }
    if (depth) *depth = r->stacks[i].depth;
    return stack_frames(r, i);
}

size_t pst_stack_count(const pst_reader_t *r)
{
    return r->n_stacks;
}

const uint64_t *pst_stack_at(const pst_reader_t *r, size_t i, uint32_t *depth)
{
    if (i >= r->n_stacks) { *depth = 0; return NULL; }
    *depth = r->stacks[i].depth;
    return stack_frames(r, i);
}

const pst_module_t *pst_modules(const pst_reader_t *r, size_t *n)
{
    *n = r->n_mods;
    return r->mods;
}

/* ---- chunks ------------------------------------------------------------------ */

/* Read and process one chunk. 1 done, 0 nothing more (eof), negative error;
 * RD_CHUNK_EVENTS: an EVENTS chunk in *c for the caller (rd_chunk.h). */
int rd_read_chunk(pst_reader_t *r, rd_chunk_t *c)
{
    if (r->eof) return 0;
    const uint8_t *p;
    long n = rd_src_ensure(r, PST_CHUNK_HDR, &p);
    if (n < 0) return (int)n;
    uint64_t at = r->off;
    if (n == 0) {
        if (!r->st.end_seen) rd_set_truncated(r, 0);
        r->st.complete = r->st.end_seen && !r->st.truncated && !r->st.corrupt;
        r->eof = 1;
        return 0;
    }
    if (n < PST_CHUNK_HDR) { rd_set_truncated(r, (uint64_t)n); return 0; }
    pst_chunk_hdr_t h;
    pst_get_chunk_hdr(p, &h);
    if (h.len > PST_MAX_CHUNK) { rd_set_corrupt(r, at, "chunk longer than the limit"); return 0; }
    n = rd_src_ensure(r, PST_CHUNK_HDR + (size_t)h.len, &p);
    if (n < 0) return (int)n;
    if ((size_t)n < PST_CHUNK_HDR + (size_t)h.len) { rd_set_truncated(r, rd_src_remaining(r)); return 0; }
    const uint8_t *pl = p + PST_CHUNK_HDR, *end = pl + h.len;
    if (pst_crc32c(0, pl, h.len) != h.crc) { rd_set_corrupt(r, at, "crc mismatch"); return 0; }
    int known = h.kind == PST_CHUNK_META || h.kind == PST_CHUNK_EVENTS || h.kind == PST_CHUNK_END ||
                h.kind == PST_CHUNK_SYNC;
    /* version 2 (minor 5): META and EVENTS, the payload maybe compressed */
    int v2_ok = (h.kind == PST_CHUNK_META || h.kind == PST_CHUNK_EVENTS) && r->hdr.minor >= 5;
    if (known && h.version != PST_CHUNK_V1 && !(h.version == PST_CHUNK_V2 && v2_ok)) {
        rd_set_corrupt(r, at, "unknown chunk version");
        return 0;
    }
    if (known && h.kind != PST_CHUNK_EVENTS && h.stream != 0) {
        rd_set_corrupt(r, at, "stream id on a chunk without a stream");
        return 0;
    }
    if (known && h.version == PST_CHUNK_V2) {
        size_t ilen;
        int zr = pst_chunk_inflate(&r->z, &h, pl, &pl, &ilen);
        if (zr == PSC_ENOMEM) return zr;
        if (zr) { rd_set_corrupt(r, at, "undecodable compressed chunk"); return 0; }
        end = pl + ilen;
        if (h.flags & PST_CHUNK_ZSTD) r->zchunks++;
    }
    *c = (rd_chunk_t){ h, pl, end, at };
    int rc = 0;
    switch (h.kind) {
    case PST_CHUNK_META:
        rc = rd_parse_meta(r, pl, end);
        if (rc == 0) { rd_set_corrupt(r, at, "malformed meta record"); return 0; }
        rc = rc < 0 ? rc : 0;
        break;
    case PST_CHUNK_EVENTS:
        return RD_CHUNK_EVENTS;     /* the decode stage's; it calls rd_chunk_done */
    case PST_CHUNK_END: {
        uint64_t ev, lost, ns, flags = 0;
        const uint8_t *q = pl;
        if (!(q = pst_get_varint(q, end, &ev)) || !(q = pst_get_varint(q, end, &lost)) ||
            !(q = pst_get_varint(q, end, &ns))) {
            rd_set_corrupt(r, at, "malformed end chunk");
            return 0;
        }
        if (q < end && pst_get_varint(q, end, &flags)) {
            r->st.end_killed = (flags & PST_END_KILLED) != 0;
            r->st.end_stopped = (flags & PST_END_STOPPED) != 0;
        }
        r->st.end_seen = 1;
        r->st.end_events = ev;
        r->st.end_lost = lost;
        r->st.end_streams = ns;
        r->st.lost += lost;
        /* a chunk skipped for a damaged kind byte, or a stream id changed by
         * damage, shows here: the writer counted what it wrote */
        if (ev != r->decoded || ns != r->n_sv || r->max_stream > ns) {
            rd_set_corrupt(r, at, "end chunk counts differ from what was read");
            return 0;
        }
        break;
    }
    case PST_CHUNK_SYNC: {
        uint64_t w, gap, tb, ts;
        const uint8_t *q = pst_get_varint(pl, end, &w);
        if (!q) { rd_set_corrupt(r, at, "malformed sync chunk"); return 0; }
        if (w > r->sync_ts) r->sync_ts = w;
        r->n_sync++;
        /* minor 2 on: the watermark is exact (FORMAT.md "The watermark is
         * exact"), so the merge waits for it rather than the window */
        if (r->causal_times) r->sync_exact = 1;
        /* minor 2: the tick's longest interval, the tracer's memory and stream */
        if ((q = pst_get_varint(q, end, &gap)) && (q = pst_get_varint(q, end, &tb)) &&
            pst_get_varint(q, end, &ts)) {
            r->st.sync_fields = 1;
            if (gap > r->st.tick_gap_max_ns) r->st.tick_gap_max_ns = gap;
            if (tb > r->st.tracer_bytes_peak) r->st.tracer_bytes_peak = tb;
            if (ts <= UINT32_MAX) r->st.tracer_stream = (uint32_t)ts;
        }
        break;
    }
    default:
        r->st.skipped_chunks++;
        break;
    }
    return rd_chunk_done(r, c, rc);
}

int rd_chunk_done(pst_reader_t *r, const rd_chunk_t *c, int rc)
{
    if (rc < 0) return rc;
    if (r->st.corrupt) return 0;
    rd_src_consume(r, PST_CHUNK_HDR + (size_t)c->h.len);
    r->st.chunks++;
    return 1;
}


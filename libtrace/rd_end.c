/* rd_end.c — what a complete trace says about itself, read from its two
 * ends: the file header at the front and the END chunk at the back.
 *
 * Why: `poolscope record` used to read every trace to its end after the
 * program exited, only to print an event count; on a large trace that cost
 * seconds. The END chunk, which a writer puts last at a clean exit, already
 * holds the counts (events written, events lost outside LOST records,
 * streams), so reading the header and the last 16 + 30 bytes is enough.
 *
 * How the END chunk is found without walking the chunks: its payload is
 * three varints and, since format 1.2, a fourth (flags): 3 to 40 bytes, so
 * the chunk starts at one of 38 offsets from the end of the file. One pread
 * of the last 56 bytes covers them all; a candidate counts only if its
 * header says kind END, version 1, stream 0, a length that ends exactly at
 * the end of the file, its CRC-32C matches and the payload is exactly three
 * or four varints. Anything else (a file cut short, a
 * process killed, a failed write, trailing garbage) is "no END": the caller
 * reads the trace if it needs to know more.
 *
 * The header is parsed here rather than through pst_open so that nothing
 * but these two reads happens (pst_open sets up the whole streaming reader).
 * It applies the same rules as the reader: magic, major version, every TLV
 * inside tlv_len, numeric fields exactly one varint; unknown tags skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poolscope/error.h"
#include "poolscope/format.h"
#include "poolscope/reader.h"

/* Header TLVs longer than this are taken as damage, as the reader does. */
#define RD_MAX_TLV   (16u << 20)
/* END payload: three varints, and flags since 1.2. */
#define RD_END_MIN   3u
#define RD_END_MAX   (4u * PST_VARINT_MAX)

static int pread_full(int fd, void *buf, size_t len, uint64_t off, size_t *got)
{
    size_t n = 0;
    while (n < len) {
        ssize_t r = pread(fd, (char *)buf + n, len - n, (off_t)(off + n));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return PSC_EIO;
        if (r == 0) break;
        n += (size_t)r;
    }
    *got = n;
    return 0;
}

static void copy_field(char *dst, size_t cap, const uint8_t *val, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(dst, val, n);
    dst[n] = 0;
}

/* The TLV fields into *out. 0 or PSC_ECORRUPT. */
static int parse_tlvs(const uint8_t *q, const uint8_t *end, pst_end_info_t *out)
{
    while (q < end) {
        uint64_t tag, len, v = 0;
        if (!(q = pst_get_varint(q, end, &tag)) || !(q = pst_get_varint(q, end, &len)))
            return PSC_ECORRUPT;
        if (len > (uint64_t)(end - q)) return PSC_ECORRUPT;
        const uint8_t *val = q;
        q += len;
        int numeric = tag == PST_HDR_PID || tag == PST_HDR_PPID || tag == PST_HDR_START_REAL ||
                      tag == PST_HDR_START_MONO || tag == PST_HDR_STACKS || tag == PST_HDR_DEPTH ||
                      tag == PST_HDR_PAGE_SIZE || tag == PST_HDR_PARENT_PID ||
                      tag == PST_HDR_EXEC_GEN;
        if (numeric && pst_get_varint(val, q, &v) != q) return PSC_ECORRUPT;
        switch (tag) {
        case PST_HDR_PID:        out->pid = v; break;
        case PST_HDR_PPID:       out->ppid = v; break;
        case PST_HDR_PARENT_PID: out->parent_pid = v; break;
        case PST_HDR_EXEC_GEN:   out->exec_gen = v; break;
        case PST_HDR_START_REAL: out->start_real_ns = v; break;
        case PST_HDR_START_MONO: out->start_mono_ns = v; break;
        case PST_HDR_STACKS:     out->stacks = (uint32_t)v; break;
        case PST_HDR_DEPTH:      out->depth = (uint32_t)v; break;
        case PST_HDR_EXE:        copy_field(out->exe, sizeof out->exe, val, (size_t)len); break;
        case PST_HDR_ARGV: {
            const uint8_t *nul = memchr(val, 0, (size_t)len);
            copy_field(out->argv0, sizeof out->argv0, val, nul ? (size_t)(nul - val) : (size_t)len);
            break;
        }
        default: break;   /* page size, tool, host, tags of a later minor */
        }
    }
    return 0;
}

/* Is there a valid END chunk at tail[off..n)? Fills the counts. */
static int end_at(const uint8_t *tail, size_t off, size_t n, pst_end_info_t *out)
{
    pst_chunk_hdr_t h;
    pst_get_chunk_hdr(tail + off, &h);
    size_t len = n - off - PST_CHUNK_HDR;
    if (h.kind != PST_CHUNK_END || h.version != 1 || h.stream != 0 || h.len != len) return 0;
    const uint8_t *p = tail + off + PST_CHUNK_HDR, *end = p + len;
    if (pst_crc32c(0, p, len) != h.crc) return 0;
    uint64_t ev, lost, streams, flags = 0;
    if (!(p = pst_get_varint(p, end, &ev)) || !(p = pst_get_varint(p, end, &lost)) ||
        !(p = pst_get_varint(p, end, &streams)))
        return 0;
    if (p != end && (!(p = pst_get_varint(p, end, &flags)) || p != end)) return 0;
    out->events = ev;
    out->lost = lost;
    out->streams = streams;
    out->flags = (uint32_t)flags;
    return 1;
}

static int read_end_fd(int fd, pst_end_info_t *out)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return PSC_EIO;
    uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    out->file_bytes = size;

    uint8_t fixed[PST_FILE_HDR_FIXED];
    size_t got;
    if (pread_full(fd, fixed, sizeof fixed, 0, &got)) return PSC_EIO;
    if (memcmp(fixed, PST_MAGIC, got < 8 ? got : 8) != 0) return PSC_ECORRUPT;
    if (got < PST_FILE_HDR_FIXED) return PSC_ETRUNC;
    out->major = (uint16_t)(fixed[8] | fixed[9] << 8);
    out->minor = (uint16_t)(fixed[10] | fixed[11] << 8);
    uint32_t tlv = (uint32_t)fixed[12] | (uint32_t)fixed[13] << 8 | (uint32_t)fixed[14] << 16 |
                   (uint32_t)fixed[15] << 24;
    if (out->major != PST_MAJOR) return PSC_EVERSION;
    if (tlv > RD_MAX_TLV) return PSC_ECORRUPT;
    if (PST_FILE_HDR_FIXED + (uint64_t)tlv > size) return PSC_ETRUNC;
    uint8_t *buf = malloc(tlv ? tlv : 1);
    if (!buf) return PSC_ENOMEM;
    int rc = pread_full(fd, buf, tlv, PST_FILE_HDR_FIXED, &got);
    if (!rc && got < tlv) rc = PSC_ETRUNC;
    if (!rc) rc = parse_tlvs(buf, buf + tlv, out);
    free(buf);
    if (rc) return rc;
    out->header_bytes = PST_FILE_HDR_FIXED + (uint64_t)tlv;

    /* the END chunk: the last 16 + 3..30 bytes, never inside the header */
    uint64_t room = size - out->header_bytes;
    size_t n = room < PST_CHUNK_HDR + RD_END_MAX ? (size_t)room : PST_CHUNK_HDR + RD_END_MAX;
    if (n < PST_CHUNK_HDR + RD_END_MIN) return PSC_ENOENT;
    uint8_t tail[PST_CHUNK_HDR + RD_END_MAX];
    if (pread_full(fd, tail, n, size - n, &got)) return PSC_EIO;
    if (got < n) return PSC_ENOENT;   /* shrank under us: not a finished file */
    for (size_t len = RD_END_MIN; len <= RD_END_MAX && PST_CHUNK_HDR + len <= n; len++) {
        size_t off = n - PST_CHUNK_HDR - len;
        if (end_at(tail, off, n, out)) {
            out->end_offset = size - PST_CHUNK_HDR - len;
            return 0;
        }
    }
    return PSC_ENOENT;
}

int pst_read_end(const char *path, pst_end_info_t *out)
{
    if (!out) return PSC_EINVAL;
    memset(out, 0, sizeof *out);
    if (!path) return PSC_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PSC_EIO;
    int rc = read_end_fd(fd, out);
    int e = errno;
    close(fd);
    errno = e;
    if (rc && rc != PSC_ENOENT) {
        memset(out, 0, sizeof *out);
    } else if (rc == PSC_ENOENT) {
        out->events = out->lost = out->streams = 0;
        out->end_offset = 0;
    }
    return rc;
}

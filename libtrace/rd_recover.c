/* rd_recover.c — finish the trace of a process that was killed (ctl.h).
 *
 * The trace is read once with the ordinary reader, which counts each
 * stream's events up to the last complete chunk; the counters file says how
 * many each thread had published. The difference is what the rings held
 * when the process died: END gets that number (plus the losses the image
 * had counted itself) and the PST_END_KILLED flag, so every reader reports
 * an exact loss instead of a silently short trace. Only `poolscope record`
 * calls this, on the traces it created, after their process is gone.
 */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poolscope/error.h"
#include "poolscope/reader.h"
#include "ctl.h"
#include "io.h"

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int put_chunk(int fd, uint8_t kind, uint32_t stream, const uint8_t *pl, size_t len)
{
    uint8_t h[PST_CHUNK_HDR] = { kind, 1, 0, 0 };
    put_le32(h + 4, stream);
    put_le32(h + 8, (uint32_t)len);
    put_le32(h + 12, pst_crc32c(0, pl, len));
    int rc = psc_write_all(fd, h, sizeof h);
    return rc ? rc : psc_write_all(fd, pl, len);
}

/* A counters file is a header page and one slot per thread record that
 * ever lived (slots are reused): far below this. */
#define CTL_MAX_BYTES ((off_t)1 << 30)

/* The counters file as a copy in memory; NULL if absent or not ours: not
 * followed through a symbolic link, never waited on (a FIFO), read only
 * when it is a regular file of this user of a sane size. */
static uint8_t *read_ctl(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return NULL;
    struct stat st;
    uint8_t *b = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        st.st_size >= (off_t)PST_CTL_HDR && st.st_size <= CTL_MAX_BYTES && (b = malloc((size_t)st.st_size))) {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        const pst_ctl_hdr_t *h = (const pst_ctl_hdr_t *)b;
        if (got != (size_t)st.st_size || memcmp(h->magic, PST_CTL_MAGIC, 8) != 0 || h->slot_bytes < sizeof(pst_ctl_slot_t) ||
            (uint64_t)PST_CTL_HDR + (uint64_t)h->n_slots * h->slot_bytes > got) {
            free(b);
            b = NULL;
        } else {
            *len = got;
        }
    }
    close(fd);
    return b;
}

int pst_recover(const char *trace_path, const char *ctl_dir, pst_recover_info_t *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    char ctl[4200];
    if (!ctl_dir || !*ctl_dir) return 0;
    if (stat(trace_path, &st) != 0) return PSC_EIO;
    if (pst_ctl_path(ctl, sizeof ctl, ctl_dir, (uint64_t)st.st_dev, (uint64_t)st.st_ino) != 0) return 0;
    size_t clen = 0;
    uint8_t *cb = read_ctl(ctl, &clen);
    if (!cb) return 0;
    const pst_ctl_hdr_t *ch = (const pst_ctl_hdr_t *)cb;
    int rc = 0;
    if (ch->end_written) goto remove;
    /* only once the process is gone: a live one is still writing */
    if (ch->pid && (kill((pid_t)ch->pid, 0) == 0 || errno != ESRCH)) goto keep;

    /* per stream: events the file holds */
    int err = 0;
    pst_reader_t *r = pst_open(trace_path, &err);
    if (!r) { rc = err ? err : PSC_EIO; goto keep; }
    uint64_t *in_file = NULL;
    size_t n_in = 0;
    pst_event_t ev;
    int n;
    while ((n = pst_next(r, &ev)) > 0) {
        if (ev.stream > (1u << 24)) { n = PSC_ECORRUPT; break; }   /* ids are 1..streams */
        if (ev.stream >= n_in) {
            size_t cap = n_in ? n_in : 16;
            while (cap <= ev.stream) cap *= 2;
            uint64_t *a = realloc(in_file, cap * sizeof *a);
            if (!a) { n = PSC_ENOMEM; break; }
            memset(a + n_in, 0, (cap - n_in) * sizeof *a);
            in_file = a;
            n_in = cap;
        }
        in_file[ev.stream]++;
    }
    const pst_status_t *s = pst_status(r);
    if (n < 0 || s->corrupt || s->end_seen) {
        rc = n < 0 ? n : 0;   /* damaged, or complete after all: not ours to change */
        pst_close(r);
        free(in_file);
        if (rc == 0 && s->end_seen) goto remove;
        goto keep;
    }
    uint64_t good = s->bytes, events = s->events;
    pst_close(r);

    uint64_t lost = ch->lost_total > ch->lost_reported ? ch->lost_total - ch->lost_reported : 0;
    lost += ch->closing_lost;
    uint32_t max_stream = 0;
    for (uint32_t i = 0; i < ch->n_slots; i++) {
        const pst_ctl_slot_t *sl = (const pst_ctl_slot_t *)(cb + PST_CTL_HDR + (size_t)i * ch->slot_bytes);
        if (!sl->stream) continue;
        uint64_t have = sl->stream < n_in ? in_file[sl->stream] : 0;
        if (sl->nev > have) lost += sl->nev - have;
        if (sl->stream > max_stream) max_stream = sl->stream;
    }
    for (size_t i = 0; i < n_in; i++)
        if (in_file[i] && i > max_stream) max_stream = (uint32_t)i;

    int fd = open(trace_path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) { free(in_file); rc = PSC_EIO; goto keep; }
    struct stat fst;
    if (fstat(fd, &fst) != 0 || fst.st_ino != st.st_ino || ftruncate(fd, (off_t)good) != 0 ||
        lseek(fd, 0, SEEK_END) < 0) {
        close(fd);
        free(in_file);
        rc = PSC_EIO;
        goto keep;
    }
    out->cut_bytes = (uint64_t)fst.st_size > good ? (uint64_t)fst.st_size - good : 0;
    /* a stream that never reached the file: an empty EVENTS chunk, so END's
     * stream count holds (streams are numbered 1..n) */
    for (uint32_t id = 1; id <= max_stream && rc == 0; id++) {
        if (id < n_in && in_file[id]) continue;
        uint8_t pl[1] = { 0 };   /* stream offset 0, no events */
        rc = put_chunk(fd, PST_CHUNK_EVENTS, id, pl, 1);
    }
    uint8_t end[4 * PST_VARINT_MAX];
    uint8_t *q = pst_put_end(end, events, lost, max_stream);
    q = pst_put_varint(q, PST_END_KILLED);
    if (rc == 0) rc = put_chunk(fd, PST_CHUNK_END, 0, end, (size_t)(q - end));
    if (close(fd) != 0 && rc == 0) rc = PSC_EIO;
    free(in_file);
    if (rc) goto keep;
    out->recovered = 1;
    out->events = events;
    out->lost = lost;
    rc = 1;
remove:
    unlink(ctl);
keep:
    free(cb);
    return rc;
}

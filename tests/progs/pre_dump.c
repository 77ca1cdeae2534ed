/* pre_dump — print a .pst trace through the shared reader (include/poolscope/reader.h).
 *
 *   pre_dump FILE            header, status and counts per event type
 *   pre_dump -v FILE         also every event: "stream tid seq ts name fields..."
 *   pre_dump -h FILE         heap events only, as "name addr size", one per line
 *                            (the shape pre_calls prints, for sort | diff)
 *   pre_dump -s FILE         heap events with their stack frames: "name fields | f0 f1 .."
 *   pre_dump -w NAME FILE    heap events (-h format) only inside MARK_BEGIN/END NAME
 *                            scopes, per stream
 *   pre_dump -r FILE         raw check without the reader's merge (fast on
 *                            big traces): chunk CRCs, stream offsets, every
 *                            event decoded; counts per type
 * Exit status 0 if the trace is complete (END seen, nothing corrupt), 3 if
 * truncated, 4 if corrupt, 2 on usage or open errors.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/reader.h"

/* -r: walk the chunks ourselves. */
static int raw_check(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    if (n < PST_FILE_HDR_FIXED || memcmp(b, PST_MAGIC, 8)) { printf("raw: bad magic\n"); return 4; }
    size_t off = PST_FILE_HDR_FIXED + (b[12] | b[13] << 8 | b[14] << 16 | (uint32_t)b[15] << 24);
    static pst_enc_t *dec[1 << 16];   /* per stream, made on its first chunk */
    unsigned coding = pst_coding_of_minor((unsigned)(b[10] | b[11] << 8));
    pst_inflate_t z = { 0 };
    static uint64_t soff[1 << 16];
    static uint32_t idbuf[PST_MAX_IDS];
    uint64_t counts[PST_EV_MAX] = { 0 }, events = 0, chunks = 0, meta = 0;
    int end = 0, bad = 0;
    while (off + PST_CHUNK_HDR <= (size_t)n) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off, &h);
        if (off + PST_CHUNK_HDR + h.len > (size_t)n) { printf("raw: partial chunk at %zu\n", off); bad = 3; break; }
        const uint8_t *p = b + off + PST_CHUNK_HDR, *e = p + h.len;
        if (pst_crc32c(0, p, h.len) != h.crc) { printf("raw: crc at %zu\n", off); bad = 4; break; }
        chunks++;
        size_t plen;
        if (pst_chunk_inflate(&z, &h, p, &p, &plen) != 0) { printf("raw: bad compressed chunk at %zu\n", off); bad = 4; break; }
        e = p + plen;
        if (h.kind == PST_CHUNK_END) end = 1;
        if (h.kind == PST_CHUNK_META) meta += plen;
        if (h.kind == PST_CHUNK_EVENTS) {
            uint64_t so = 0;
            p = pst_get_varint(p, e, &so);
            uint32_t s = h.stream & 0xffff;
            if (!p || so != soff[s]) { printf("raw: stream %u offset %llu != %llu\n", s,
                                               (unsigned long long)so, (unsigned long long)soff[s]); bad = 4; break; }
            soff[s] += (uint64_t)(e - p);
            if (!dec[s] && !(dec[s] = calloc(1, sizeof *dec[s]))) return 2;
            pst_enc_init(dec[s], coding, NULL);
            while (p < e) {
                pst_event_t ev;
                memset(&ev, 0, sizeof ev);
                p = pst_decode_event(dec[s], p, e, &ev, idbuf);
                if (!p) { printf("raw: undecodable event in stream %u\n", s); bad = 4; break; }
                if (ev.type != PST_EV_TS) { events++; counts[ev.type]++; }
            }
            if (bad) break;
        }
        off += PST_CHUNK_HDR + h.len;
    }
    printf("raw chunks=%llu events=%llu meta_bytes=%llu end=%d bytes=%ld\n", (unsigned long long)chunks,
           (unsigned long long)events, (unsigned long long)meta, end, n);
    for (unsigned t = 0; t < PST_EV_MAX; t++)
        if (counts[t]) printf("count %s %llu\n", pst_event_name(t), (unsigned long long)counts[t]);
    free(b);
    return bad ? bad : end ? 0 : 3;
}

int main(int argc, char **argv)
{
    int verbose = 0, heap = 0, stacks = 0;
    const char *window = NULL;
    static unsigned char inside[1 << 16];
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) { window = argv[++i]; heap = 1; }
        else if (!strcmp(argv[i], "-h")) heap = 1;
        else if (!strcmp(argv[i], "-s")) stacks = 1;
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) return raw_check(argv[i + 1]);
    }
    if (i != argc - 1) { fprintf(stderr, "usage: pre_dump [-v|-h|-s] FILE\n"); return 2; }
    int err = 0;
    pst_reader_t *r = pst_open(argv[i], &err);
    if (!r) { fprintf(stderr, "pre_dump: %s: cannot open (%d)\n", argv[i], err); return 2; }
    const pst_header_t *h = pst_header(r);
    uint64_t counts[PST_EV_MAX] = { 0 };
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        if (ev.type < PST_EV_MAX) counts[ev.type]++;
        const char *lay = pst_event_layout(ev.type);
        if (verbose) {
            printf("%u %u %" PRIu64 " %" PRIu64 " %s", ev.stream, ev.tid, ev.seq, ev.ts,
                   pst_event_name(ev.type));
            for (int k = 0; lay && lay[k]; k++) {
                if (lay[k] == 'A') printf(" 0x%" PRIx64, ev.f[k]);
                else if (lay[k] == 'z') printf(" %" PRId64, (int64_t)ev.f[k]);
                else if (lay[k] == 'S') printf(" \"%s\"", ev.str ? ev.str : "?");
                else printf(" %" PRIu64, ev.f[k]);
            }
            if (ev.stack) printf(" stack=%u", ev.stack);
            printf("\n");
        }
        if (window && (ev.type == PST_EV_MARK_BEGIN || ev.type == PST_EV_MARK_END) &&
            ev.str && !strcmp(ev.str, window))
            inside[ev.stream & 0xffff] = ev.type == PST_EV_MARK_BEGIN;
        if ((heap || stacks) && ev.type >= PST_EV_MALLOC && ev.type <= PST_EV_SBRK &&
            (!window || inside[ev.stream & 0xffff])) {
            printf("%s", pst_event_name(ev.type));
            for (int k = 0; lay && lay[k]; k++) {
                if (lay[k] == 'A') printf(" 0x%" PRIx64, ev.f[k]);
                else if (lay[k] == 'z') printf(" %" PRId64, (int64_t)ev.f[k]);
                else printf(" %" PRIu64, ev.f[k]);
            }
            if (stacks) {
                uint32_t d = 0;
                const uint64_t *f = ev.stack ? pst_stack(r, ev.stack, &d) : NULL;
                printf(" |");
                for (uint32_t k = 0; f && k < d; k++) printf(" 0x%" PRIx64, f[k]);
            }
            printf("\n");
        }
    }
    const pst_status_t *st = pst_status(r);
    if (!heap && !stacks) {
        printf("header pid=%" PRIu64 " ppid=%" PRIu64 " parent=%" PRIu64 " gen=%" PRIu64
               " stacks=%u depth=%u exe=%s argc=%u\n", h->pid, h->ppid, h->parent_pid,
               h->exec_gen, h->stacks, h->depth, h->exe, h->argc);
        printf("status complete=%d end=%d truncated=%d corrupt=%d%s%s events=%" PRIu64
               " lost=%" PRIu64 " streams=%" PRIu64 " end_events=%" PRIu64 " end_lost=%" PRIu64
               " chunks=%" PRIu64 " unordered=%" PRIu64 "\n",
               st->complete, st->end_seen, st->truncated, st->corrupt,
               st->corrupt ? " reason=" : "", st->corrupt ? st->corrupt_reason : "",
               st->events, st->lost, st->streams, st->end_events, st->end_lost, st->chunks,
               st->unordered);
        for (unsigned t = 0; t < PST_EV_MAX; t++)
            if (counts[t]) printf("count %s %" PRIu64 "\n", pst_event_name(t), counts[t]);
        size_t nm = 0;
        pst_modules(r, &nm);
        printf("modules %zu\n", nm);
    }
    int code = rc < 0 ? 2 : st->corrupt ? 4 : (!st->end_seen || st->truncated) ? 3 : 0;
    pst_close(r);
    return code;
}

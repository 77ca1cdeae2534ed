/* export.c — Chrome trace-event JSON and folded stacks (see export.h).
 *
 * Chrome: written while scanning, through the scan hook, so memory stays
 * bounded; times are microseconds with three decimals (ns precision).
 * Folded: after the scan, from the per-stack-id site table of the heap
 * accumulator (calls and bytes per stack), each stack symbolized once.
 */
#include "export.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "symbolize.h"

typedef struct track {
    char name[96];
    uint64_t last_ts, last_v, pending_v;
    int emitted, pending;
} track_t;

typedef struct chrome {
    FILE *out;
    uint64_t pid;
    int first;
    track_t *tracks;
    size_t n_tracks;
    int threads_named[1];
} chrome_t;

static void ev_sep(chrome_t *c)
{
    fputs(c->first ? "\n" : ",\n", c->out);
    c->first = 0;
}

static void counter_write(chrome_t *c, const track_t *t, uint64_t ts, uint64_t v)
{
    ev_sep(c);
    fprintf(c->out, "{\"name\":");
    az_json_write_string(c->out, t->name);
    fprintf(c->out, ",\"ph\":\"C\",\"ts\":%" PRIu64 ".%03" PRIu64 ",\"pid\":%" PRIu64 ",\"args\":{\"bytes\":%" PRIu64 "}}",
            ts / 1000, ts % 1000, c->pid, v);
}

static track_t *track_get(chrome_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_tracks; i++) if (!strcmp(c->tracks[i].name, name)) return &c->tracks[i];
    track_t *a = realloc(c->tracks, (c->n_tracks + 1) * sizeof *a);
    if (!a) return NULL;
    c->tracks = a;
    track_t *t = &a[c->n_tracks++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* A new value of a counter at ts: written when a microsecond has passed
 * since the track's last sample; otherwise kept pending (the latest wins). */
static void counter(chrome_t *c, const char *name, uint64_t ts, uint64_t v)
{
    track_t *t = track_get(c, name);
    if (!t) return;
    if (t->emitted && v == t->last_v && !t->pending) return;
    if (!t->emitted || ts >= t->last_ts + 1000) {
        if (t->pending && t->pending_v != t->last_v) counter_write(c, t, t->last_ts + 1 < ts ? ts - 1 : ts, t->pending_v);
        counter_write(c, t, ts, v);
        t->last_ts = ts; t->last_v = v; t->emitted = 1; t->pending = 0;
    } else {
        t->pending = 1;
        t->pending_v = v;
    }
}

static void chrome_hook(void *ctx, const pst_event_t *ev, const az_scan_t *s)
{
    chrome_t *c = ctx;
    uint64_t ts = ev->ts;
    switch (ev->type) {
    case PST_EV_MALLOC: case PST_EV_CALLOC: case PST_EV_REALLOC: case PST_EV_REALLOCARRAY:
    case PST_EV_FREE: case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN:
    case PST_EV_VALLOC: case PST_EV_PVALLOC:
        counter(c, "heap live bytes", ts, az_state(s->heap)->live_bytes);
        break;
    case PST_EV_MMAP: case PST_EV_MUNMAP: case PST_EV_MREMAP:
        counter(c, "mmap anonymous bytes", ts, s->mmap_anon);
        counter(c, "mmap file-backed bytes", ts, s->mmap_file);
        break;
    case PST_EV_RSS:
        counter(c, "RSS bytes", ts, ev->f[0]);
        break;
    case PST_EV_POOL_ACQUIRE: case PST_EV_POOL_RECLAIM:
        for (size_t i = 0; i < s->n_pools; i++) {
            const az_pool_info_t *p = &s->pools[i];
            if (p->kv || p->id != ev->f[0]) continue;
            char n[96];
            snprintf(n, sizeof n, "pool %s outstanding bytes", p->name);
            counter(c, n, ts, p->outstanding);
            snprintf(n, sizeof n, "pool %s cached bytes", p->name);
            counter(c, n, ts, p->cached);
        }
        break;
    case PST_EV_KVB_ALLOC: case PST_EV_KVB_FREE:
        counter(c, "KV blocks in use", ts, az_state(s->heap)->kv_blocks);
        break;
    case PST_EV_MARK_POINT: case PST_EV_MARK_BEGIN: case PST_EV_MARK_END: {
        ev_sep(c);
        fputs("{\"name\":", c->out);
        az_json_write_string(c->out, ev->str ? ev->str : "?");
        if (ev->type == PST_EV_MARK_POINT)
            fprintf(c->out, ",\"cat\":\"marker\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%" PRIu64 ".%03" PRIu64
                    ",\"pid\":%" PRIu64 ",\"tid\":%u", ts / 1000, ts % 1000, c->pid, ev->tid);
        else
            fprintf(c->out, ",\"cat\":\"scope\",\"ph\":\"%s\",\"id\":\"0x%" PRIx64 "\",\"ts\":%" PRIu64 ".%03" PRIu64
                    ",\"pid\":%" PRIu64 ",\"tid\":%u", ev->type == PST_EV_MARK_BEGIN ? "b" : "e", ev->f[1],
                    ts / 1000, ts % 1000, c->pid, ev->tid);
        if (ev->n_payload) {
            fputs(",\"args\":{\"payload\":[", c->out);
            for (uint32_t i = 0; i < ev->n_payload; i++) fprintf(c->out, "%s%lld", i ? "," : "", (long long)ev->payload[i]);
            fputs("]}", c->out);
        }
        fputc('}', c->out);
        break;
    }
    case PST_EV_THREAD_START:
        ev_sep(c);
        fprintf(c->out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%" PRIu64 ",\"tid\":%u,\"args\":{\"name\":\"stream %u (tid %u)\"}}",
                c->pid, ev->tid, ev->stream, ev->tid);
        break;
    case PST_EV_THREAD_NAME:
        if (ev->str) {
            ev_sep(c);
            fprintf(c->out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%" PRIu64 ",\"tid\":%u,\"args\":{\"name\":", c->pid, ev->tid);
            az_json_write_string(c->out, ev->str);
            fputs("}}", c->out);
        }
        break;
    default: break;
    }
}

/* "outer;...;inner" for a stack, allocator frames at the inner end dropped. */
static void folded_stack(const az_scan_t *s, az_sym_t *sym, uint32_t id, FILE *out)
{
    uint32_t depth = 0;
    const uint64_t *fr = id ? pst_stack(s->r, id, &depth) : NULL;
    if (!fr || !depth) { fputs("[no stack]", out); return; }
    uint32_t inner = 0;
    az_frame_t f;
    while (inner < depth) {
        az_sym_lookup(sym, fr[inner], inner > 0, &f);
        if (!az_sym_is_allocator(&f)) break;
        inner++;
    }
    if (inner == depth) inner = 0;
    for (uint32_t k = depth; k-- > inner;) {
        char b[600];
        az_sym_lookup(sym, fr[k], k > 0, &f);
        if (f.function) snprintf(b, sizeof b, "%s", f.function);
        else az_sym_format(&f, fr[k], b, sizeof b);
        for (char *p = b; *p; p++) if (*p == ';' || *p == '\n') *p = ':';
        /* folded format: spaces are fine inside a frame, the weight follows the last space */
        fputs(b, out);
        if (k > inner) fputc(';', out);
    }
}

int az_export(const char *trace, int format, int weight, const char *out_path, int *warning,
              char *msg, size_t msglen)
{
    *warning = 0;
    int err = 0;
    pst_reader_t *probe = pst_open(trace, &err);
    if (!probe) {
        snprintf(msg, msglen, "%s", err == PSC_ECORRUPT ? "not a poolscope trace (bad header)" : psc_strerror(err));
        return err;
    }
    uint64_t pid = pst_header(probe)->pid;
    pst_close(probe);
    FILE *out = fopen(out_path, "w");
    if (!out) { snprintf(msg, msglen, "cannot write %s", out_path); return PSC_EIO; }
    az_scan_t *s = NULL;
    int rc;
    if (format == AZ_EXPORT_CHROME) {
        chrome_t c = { .out = out, .pid = pid, .first = 1 };
        fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", out);
        az_scan_opts_t so = { .hook = chrome_hook, .hook_ctx = &c };
        rc = az_scan_file(trace, &so, &s, msg, msglen);
        if (!rc) {
            /* final values of every counter */
            for (size_t i = 0; i < c.n_tracks; i++) {
                track_t *t = &c.tracks[i];
                uint64_t v = t->pending ? t->pending_v : t->last_v;
                counter_write(&c, t, s->t_last > t->last_ts ? s->t_last : t->last_ts, v);
            }
            ev_sep(&c);
            fprintf(out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%" PRIu64 ",\"args\":{\"name\":", pid);
            az_json_write_string(out, s->hdr->exe && s->hdr->exe[0] ? s->hdr->exe : "traced program");
            fputs("}}", out);
        }
        fputs("\n]}\n", out);
        free(c.tracks);
    } else {
        rc = az_scan_file(trace, NULL, &s, msg, msglen);
        if (!rc) {
            size_t nm = 0, n = 0;
            const pst_module_t *mods = pst_modules(s->r, &nm);
            az_sym_t *sym = az_sym_create(mods, nm);
            const az_site_t *sites = az_sites(s->heap, &n);
            for (size_t i = 0; i < n && sym; i++) {
                uint64_t w = weight == AZ_WEIGHT_CALLS ? sites[i].calls : sites[i].bytes;
                if (!w) continue;
                folded_stack(s, sym, sites[i].stack, out);
                fprintf(out, " %" PRIu64 "\n", w);
            }
            az_sym_destroy(sym);
        }
    }
    if (!rc) {
        char wb[8];
        *warning = az_scan_warning(s, wb, sizeof wb) != NULL;
    }
    az_scan_free(s);
    if (fclose(out) && !rc) { snprintf(msg, msglen, "write failed: %s", out_path); rc = PSC_EIO; }
    return rc;
}

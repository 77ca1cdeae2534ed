/* export.c — Chrome trace-event JSON and folded stacks (see export.h).
 *
 * Chrome: written while scanning, through the scan hook, so memory stays
 * bounded; times are microseconds with three decimals (ns precision).
 * Large allocations (64 KiB and more) are kept during the scan and written
 * after it as instant events named by their site, with the displayed stack
 * in args (demangled, inline chains expanded).
 * Folded: after the scan, from the per-stack-id site table of the heap
 * accumulator (calls and bytes per stack), each stack symbolized once and
 * the lines that read the same summed.
 *
 * A selection (--phase, --from/--to) is the scan's: it decides which
 * events are counted, and the accumulators' site table then holds only
 * the allocations counted, so folded needs nothing more. Chrome asks the
 * scan per event (did s->events_counted move?) rather than deciding again
 * here, so both outputs and `report` agree on every event's side of the
 * edge. Outside the selection the hook still follows the counters' values
 * and the open scopes, to write them when the selection opens again and
 * to cut scopes at its edges; that is bounded by the tracks and the scopes
 * open at once.
 */
#include "export.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "grow.h"
#include "hashmap.h"
#include "json.h"
#include "outfile.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "sites.h"
#include "strkeep.h"
#include "symbolize.h"

typedef struct track {
    char name[96];
    uint64_t last_ts, last_v, pending_v;   /* written: the latest sample, one held back */
    uint64_t cur_v;                        /* the value now, inside the selection or not */
    int emitted, pending;
} track_t;

/* A scope open now. Scopes are written when they end: as an "X" event on
 * their thread when they end last-opened-first on it (so the X events of a
 * thread nest, as viewers need), otherwise (a request overlapping another
 * on the same thread) as an async "b"/"e" pair. */
typedef struct open_scope {
    uint64_t inst, begin, seq;
    int64_t payload[PST_MAX_PAYLOAD];
    uint32_t name, tid, n_payload;
    uint8_t shown;               /* begun inside the output (the selection) */
    uint8_t cut;                 /* begun where the selection opened */
} open_scope_t;

/* A large allocation, written after the scan as an instant event named
 * by its site (the symbolizer needs every module the trace maps). */
typedef struct big {
    uint64_t ts, bytes;
    uint32_t tid, stack;
} big_t;
#define CHROME_BIG_BYTES (64u << 10)   /* allocations this large or larger become instants */
#define CHROME_BIG_MAX   100000u       /* at most this many */
#define CHROME_ALL_MAX   2000000u      /* --allocations: at most this many */

typedef struct chrome {
    FILE *out;
    uint64_t pid;
    int first;
    track_t *tracks;
    size_t n_tracks;
    int threads_named[1];
    big_t *big;
    size_t n_big, cap_big;
    uint64_t big_dropped;
    /* a selection: only events the scan counted are written */
    int selective;
    int in;                      /* the latest event was inside (always 1 without a selection) */
    uint64_t counted;            /* s->events_counted after the latest event */
    uint64_t t_in;               /* time of the latest event inside */
    open_scope_t *open;
    size_t n_open, cap_open;
    uint64_t seq;
    int all_allocs;              /* --allocations: every allocation an instant */
} chrome_t;

static uint64_t alloc_bytes(const pst_event_t *ev)
{
    switch (ev->type) {
    case PST_EV_MALLOC: case PST_EV_VALLOC: case PST_EV_PVALLOC: return ev->f[1];
    case PST_EV_CALLOC: return ev->f[1] * ev->f[2];
    case PST_EV_REALLOC: return ev->f[2];
    case PST_EV_REALLOCARRAY: return ev->f[2] * ev->f[3];
    case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN: return ev->f[2];
    default: return 0;
    }
}

static void ev_sep(chrome_t *c);

static void big_note(chrome_t *c, const pst_event_t *ev)
{
    uint64_t b = alloc_bytes(ev);
    if (!b || ev->type == PST_EV_FREE || (!c->all_allocs && b < CHROME_BIG_BYTES)) return;
    if (c->n_big >= (c->all_allocs ? CHROME_ALL_MAX : CHROME_BIG_MAX)) { c->big_dropped++; return; }
    if (psc_grow((void **)&c->big, &c->cap_big, c->n_big, sizeof *c->big, 256)) return;
    c->big[c->n_big++] = (big_t){ ev->ts, b, ev->tid, ev->stack };
}

/* The large allocations: "malloc 4.00 MiB" instants on their thread, args
 * the site as report names it and the displayed stack, innermost first. */
static void big_write(chrome_t *c, const az_scan_t *s, const az_export_opts_t *eo)
{
    if (!c->n_big) return;
    az_sym_t *sym = az_sym_open(s->r);
    az_sv_t *v = sym ? az_sv_create(s, sym, eo ? &eo->sites : NULL) : NULL;
    static az_frame_t fr[256];
    for (size_t i = 0; i < c->n_big && v; i++) {
        const big_t *b = &c->big[i];
        char name[64], sz[32], f[1400];
        snprintf(name, sizeof name, "alloc %s", psc_fmt_bytes(b->bytes, sz, sizeof sz));
        ev_sep(c);
        fputs("{\"name\":", c->out);
        az_json_write_string(c->out, name);
        fprintf(c->out, ",\"cat\":\"alloc\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%" PRIu64 ".%03" PRIu64
                ",\"pid\":%" PRIu64 ",\"tid\":%u,\"args\":{\"bytes\":%" PRIu64 ",\"site\":",
                b->ts / 1000, b->ts % 1000, c->pid, b->tid, b->bytes);
        const char *via = NULL, *lab = az_sv_label(v, b->stack, &via);
        if (via) { snprintf(f, sizeof f, "%s via %s", lab, via); az_json_write_string(c->out, f); }
        else az_json_write_string(c->out, lab);
        fputs(",\"stack\":[", c->out);
        size_t n = az_sv_frames(v, b->stack, fr, sizeof fr / sizeof fr[0]);
        for (size_t k = 0; k < n; k++) {
            az_sym_format(&fr[k], fr[k].pc, f, sizeof f);
            if (fr[k].inlined) strncat(f, " [inlined]", sizeof f - strlen(f) - 1);
            if (k) fputc(',', c->out);
            az_json_write_string(c->out, f);
        }
        fputs("]}}", c->out);
    }
    az_sv_destroy(v);
    az_sym_destroy(sym);
}

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
    t->cur_v = v;
    if (!c->in) return;
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

static void ts_us(FILE *out, uint64_t ts) { fprintf(out, "%" PRIu64 ".%03" PRIu64, ts / 1000, ts % 1000); }

static void scope_args(chrome_t *c, const open_scope_t *o, int cut_end)
{
    fputs(",\"args\":{", c->out);
    int k = 0;
    if (o->n_payload) {
        fputs("\"payload\":[", c->out);
        for (uint32_t i = 0; i < o->n_payload; i++) fprintf(c->out, "%s%lld", i ? "," : "", (long long)o->payload[i]);
        fputc(']', c->out);
        k = 1;
    }
    /* which edge the selection made: "begin", "end" or "both" */
    if (o->cut || cut_end)
        fprintf(c->out, "%s\"cut\":\"%s\"", k ? "," : "", o->cut && cut_end ? "both" : o->cut ? "begin" : "end");
    fputs("}}", c->out);
}

/* Write scope o ending at t: X when it is the innermost open scope of its
 * thread, else an async pair. */
static void scope_end_write(chrome_t *c, const az_scan_t *s, const open_scope_t *o, uint64_t t, int cut_end)
{
    int top = 1;
    for (size_t i = 0; i < c->n_open && top; i++)
        if (c->open[i].shown && c->open[i].tid == o->tid && c->open[i].seq > o->seq) top = 0;
    const char *name = az_scan_string(s, o->name);
    ev_sep(c);
    fputs("{\"name\":", c->out);
    az_json_write_string(c->out, name);
    if (top) {
        fputs(",\"cat\":\"scope\",\"ph\":\"X\",\"ts\":", c->out);
        ts_us(c->out, o->begin);
        fputs(",\"dur\":", c->out);
        ts_us(c->out, t - o->begin);
        fprintf(c->out, ",\"pid\":%" PRIu64 ",\"tid\":%u", c->pid, o->tid);
        scope_args(c, o, cut_end);
        return;
    }
    fprintf(c->out, ",\"cat\":\"scope\",\"ph\":\"b\",\"id\":\"0x%" PRIx64 "\",\"ts\":", o->inst);
    ts_us(c->out, o->begin);
    fprintf(c->out, ",\"pid\":%" PRIu64 ",\"tid\":%u", c->pid, o->tid);
    scope_args(c, o, cut_end);
    ev_sep(c);
    fputs("{\"name\":", c->out);
    az_json_write_string(c->out, name);
    fprintf(c->out, ",\"cat\":\"scope\",\"ph\":\"e\",\"id\":\"0x%" PRIx64 "\",\"ts\":", o->inst);
    ts_us(c->out, t);
    fprintf(c->out, ",\"pid\":%" PRIu64 ",\"tid\":%u}", c->pid, o->tid);
}

/* Follow the scopes (every marker event, inside the selection or not).
 * Out of memory: the scope is not followed, and is not written. */
static void scope_follow(chrome_t *c, const az_scan_t *s, const pst_event_t *ev)
{
    if (ev->type == PST_EV_MARK_BEGIN) {
        if (c->n_open == c->cap_open) {
            size_t n = c->cap_open ? 2 * c->cap_open : 16;
            open_scope_t *a = realloc(c->open, n * sizeof *a);
            if (!a) return;
            c->open = a;
            c->cap_open = n;
        }
        open_scope_t *o = &c->open[c->n_open++];
        memset(o, 0, sizeof *o);
        o->name = (uint32_t)ev->f[0];
        o->inst = ev->f[1];
        o->tid = ev->tid;
        o->begin = ev->ts;
        o->seq = ++c->seq;
        o->shown = (uint8_t)c->in;
        o->n_payload = ev->n_payload <= PST_MAX_PAYLOAD ? ev->n_payload : PST_MAX_PAYLOAD;
        memcpy(o->payload, ev->payload, o->n_payload * sizeof o->payload[0]);
        return;
    }
    if (ev->type != PST_EV_MARK_END) return;
    for (size_t i = c->n_open; i-- > 0;) {
        open_scope_t *o = &c->open[i];
        if (o->name != (uint32_t)ev->f[0] || o->inst != ev->f[1]) continue;
        if (o->shown && c->in) scope_end_write(c, s, o, ev->ts, 0);
        c->open[i] = c->open[--c->n_open];
        return;
    }
}

/* Every scope shown and open now ends at t, innermost first (each one the
 * innermost of its thread when written: all are X events), cut there. */
static void scopes_close(chrome_t *c, const az_scan_t *s, uint64_t t)
{
    for (;;) {
        open_scope_t *last = NULL;
        for (size_t i = 0; i < c->n_open; i++)
            if (c->open[i].shown && (!last || c->open[i].seq > last->seq)) last = &c->open[i];
        if (!last) return;
        scope_end_write(c, s, last, t, 1);
        last->shown = 0;
    }
}

/* The selection opens at ts: each counter's value now, each open scope
 * begun here. */
static void selection_open(chrome_t *c, const az_scan_t *s, uint64_t ts)
{
    (void)s;
    c->in = 1;
    for (size_t i = 0; i < c->n_tracks; i++) {
        track_t *t = &c->tracks[i];
        if (t->emitted && t->cur_v == t->last_v) continue;   /* the viewer holds it */
        counter_write(c, t, ts, t->cur_v);
        t->last_ts = ts; t->last_v = t->cur_v; t->emitted = 1; t->pending = 0;
    }
    for (size_t i = 0; i < c->n_open; i++) {   /* open scopes begin here, cut */
        c->open[i].shown = 1;
        c->open[i].cut = 1;
        c->open[i].begin = ts;
    }
}

/* It closed after the event at c->t_in: values held back, open scopes
 * ended there. */
static void selection_close(chrome_t *c, const az_scan_t *s)
{
    c->in = 0;
    for (size_t i = 0; i < c->n_tracks; i++) {
        track_t *t = &c->tracks[i];
        if (!t->pending) continue;
        counter_write(c, t, c->t_in, t->pending_v);
        t->last_ts = c->t_in; t->last_v = t->pending_v; t->pending = 0;
    }
    scopes_close(c, s, c->t_in);
}

static void chrome_hook(void *ctx, const pst_event_t *ev, const az_scan_t *s)
{
    chrome_t *c = ctx;
    uint64_t ts = ev->ts;
    c->pid = s->hdr->pid;
    if (c->selective) {
        int in = s->events_counted != c->counted;   /* the scan counted this event */
        c->counted = s->events_counted;
        if (in && !c->in) selection_open(c, s, ts);
        else if (!in && c->in) selection_close(c, s);
        if (in) c->t_in = ts;
    }
    scope_follow(c, s, ev);
    switch (ev->type) {
    case PST_EV_MALLOC: case PST_EV_CALLOC: case PST_EV_REALLOC: case PST_EV_REALLOCARRAY:
    case PST_EV_FREE: case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN:
    case PST_EV_VALLOC: case PST_EV_PVALLOC:
        counter(c, "heap live bytes", ts, az_state(s->heap)->live_bytes);
        if (c->in) big_note(c, ev);
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
    case PST_EV_MARK_POINT: {
        if (!c->in) break;
        ev_sep(c);
        fputs("{\"name\":", c->out);
        az_json_write_string(c->out, ev->str ? ev->str : "?");
        fprintf(c->out, ",\"cat\":\"marker\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%" PRIu64 ".%03" PRIu64
                ",\"pid\":%" PRIu64 ",\"tid\":%u", ts / 1000, ts % 1000, c->pid, ev->tid);
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

/* Folded lines as a tree of frame texts, rooted at the outermost frame.
 *
 * A line is a stack's displayed frames, outermost first, joined by ';':
 * inline chains expanded (inlined frames marked "_[i]" as flamegraph.pl's
 * --inline does), the skipped wrappers at the inner end dropped as the
 * report's label drops them; lines: "fn (file:line)". Lines that read the
 * same are summed and written in strcmp order. Stacks share their outer
 * frames, so a line is a node of a tree of interned texts and its weight
 * sits on that node: a PyTorch trace's 1.48 M lines of 1.6 KB each were
 * 2.27 GB of copies when each line was kept as text and sorted.
 *
 * strcmp order from the tree: a node's subtree holds its own line L and
 * the lines "L;..."; among siblings, the own line of a child with text A
 * sorts by the key "A" and its descendants as a block by "A;" (a frame
 * text holds no ';'). Sorting those keys with strcmp puts each line where
 * sorting the whole lines would: a sibling "A(int)" falls between "A" and
 * "A;...", since '(' sorts before ';'. */
typedef struct fnode { uint32_t up, text; uint64_t w; } fnode_t;

typedef struct ftree {
    psc_strset_t texts;          /* the frame texts, each once */
    psc_map_t kids;              /* parent node << 32 | text id -> child node */
    psc_map_t by_fn;             /* function text's address * 2 + inlined -> text id (no --lines):
                                    the symbolizer keeps a text at one address, so a frame seen
                                    before is not formatted, escaped and hashed again */
    fnode_t *nodes;              /* [0]: the root */
    size_t n_nodes, cap_nodes;
} ftree_t;

/* The child of node up with text id, made when new; 0 out of memory. */
static uint32_t fchild(ftree_t *ft, uint32_t up, uint32_t id)
{
    if (!id) return 0;
    int is_new;
    uint32_t *slot = psc_map_put_sz(&ft->kids, (uint64_t)up << 32 | id, &is_new, sizeof *slot);
    if (!slot) return 0;
    if (!is_new) return *slot;
    if (ft->n_nodes >= UINT32_MAX ||
        psc_grow((void **)&ft->nodes, &ft->cap_nodes, ft->n_nodes, sizeof *ft->nodes, 4096)) {
        psc_map_del(&ft->kids, (uint64_t)up << 32 | id);
        return 0;
    }
    ft->nodes[ft->n_nodes] = (fnode_t){ up, id, 0 };
    *slot = (uint32_t)ft->n_nodes;
    return (uint32_t)ft->n_nodes++;
}

/* Adds stack id's line to the tree with weight w; 0 or PSC_ENOMEM. */
static int folded_add(ftree_t *ft, az_sv_t *v, uint32_t id, int lines, uint64_t w)
{
    static az_frame_t fr[4096];
    size_t n = id ? az_sv_frames(v, id, fr, sizeof fr / sizeof fr[0]) : 0;
    uint32_t node = 0;
    if (!n) {
        if (!(node = fchild(ft, 0, psc_strset_id(&ft->texts, id ? "[unknown]" : "[no stack]", NULL)))) return PSC_ENOMEM;
        ft->nodes[node].w += w;
        return 0;
    }
    size_t inner = 0;
    while (inner < n && az_sv_skipped(v, &fr[inner])) inner++;
    if (inner == n) inner = 0;
    for (size_t k = n; k-- > inner;) {
        char b[1400];
        const az_frame_t *f = &fr[k];
        uint32_t *memo = NULL;
        if (f->function && !lines) {
            int is_new;
            memo = psc_map_put_sz(&ft->by_fn, (uint64_t)(uintptr_t)f->function * 2 + (f->inlined != 0), &is_new,
                                  sizeof *memo);
            if (!memo) return PSC_ENOMEM;
            if (!is_new) {
                if (!(node = fchild(ft, node, *memo))) return PSC_ENOMEM;
                continue;
            }
            *memo = 0;           /* no text yet: set below */
        }
        if (f->function && !lines) snprintf(b, sizeof b, "%s", f->function);
        else az_sym_format(f, f->pc, b, sizeof b);
        if (f->inlined) strncat(b, "_[i]", sizeof b - strlen(b) - 1);
        /* a name is the trace's: control bytes (a newline would end the
         * line) as text escapes, and ';' (the frame separator) as ':';
         * spaces are fine inside a frame, the weight follows the last one */
        char e[1400];
        psc_esc_text(b, e, sizeof e);
        for (char *p = e; *p; p++) if (*p == ';') *p = ':';
        uint32_t tid = psc_strset_id(&ft->texts, e, NULL);
        if (memo) *memo = tid;   /* the set does not touch by_fn: memo still points at its slot */
        if (!(node = fchild(ft, node, tid))) return PSC_ENOMEM;
    }
    ft->nodes[node].w += w;
    return 0;
}

/* An entry of a node's sorted list: a child's own line, or its subtree. */
typedef struct fitem { uint32_t node, block; } fitem_t;

static const ftree_t *g_sort_tree;   /* qsort has no context argument */

/* strcmp of the keys "A" (own line) and "A;" (block): past the common
 * part, an ended text reads as ';' for a block and as its end for an own
 * line (a text holds no ';', so the two keys of one text never tie) */
static int fitem_cmp(const void *pa, const void *pb)
{
    const fitem_t *a = pa, *b = pb;
    const unsigned char *x = (const unsigned char *)psc_strset_text(&g_sort_tree->texts, g_sort_tree->nodes[a->node].text);
    const unsigned char *y = (const unsigned char *)psc_strset_text(&g_sort_tree->texts, g_sort_tree->nodes[b->node].text);
    while (*x && *x == *y) x++, y++;
    unsigned cx = *x ? *x : a->block ? ';' : 0, cy = *y ? *y : b->block ? ';' : 0;
    return (int)cx - (int)cy;
}

/* Node's entries in strcmp order (*m of them); NULL out of memory. */
static fitem_t *fitems(const ftree_t *ft, const uint32_t *first, const uint32_t *kids, uint32_t node, size_t *m)
{
    size_t nk = first[node + 1] - first[node];
    fitem_t *it = malloc((nk ? 2 * nk : 1) * sizeof *it);
    if (!it) return NULL;
    *m = 0;
    for (uint32_t k = first[node]; k < first[node + 1]; k++) {
        uint32_t c = kids[k];
        if (ft->nodes[c].w) it[(*m)++] = (fitem_t){ c, 0 };
        if (first[c + 1] > first[c]) it[(*m)++] = (fitem_t){ c, 1 };
    }
    g_sort_tree = ft;
    qsort(it, *m, sizeof *it, fitem_cmp);
    return it;
}

/* The lines of the tree in strcmp order, "text weight\n" each: a walk
 * with a stack of the sorted entries of the nodes above. */
static int folded_print(const ftree_t *ft, FILE *out)
{
    size_t nn = ft->n_nodes;
    uint32_t *first = calloc(nn + 1, sizeof *first), *kids = malloc(nn * sizeof *kids),
             *at = malloc(nn * sizeof *at);
    typedef struct frame { fitem_t *it; size_t n, i, plen; } frame_t;
    frame_t *st = NULL;
    size_t cap_st = 0, sp = 0, cap_path = 4096, plen = 0, m = 0;
    char *path = malloc(cap_path);
    int rc = PSC_ENOMEM;
    if (!first || !kids || !at || !path || psc_grow((void **)&st, &cap_st, 0, sizeof *st, 64)) goto out;
    /* children by parent (a counting sort): kids[first[p] .. first[p + 1]) */
    for (size_t i = 1; i < nn; i++) first[ft->nodes[i].up + 1]++;
    for (size_t i = 0; i < nn; i++) first[i + 1] += first[i];
    memcpy(at, first, nn * sizeof *at);
    for (size_t i = 1; i < nn; i++) kids[at[ft->nodes[i].up]++] = (uint32_t)i;
    fitem_t *it = fitems(ft, first, kids, 0, &m);
    if (!it) goto out;
    st[sp++] = (frame_t){ it, m, 0, 0 };
    while (sp) {
        frame_t *t = &st[sp - 1];
        if (t->i == t->n) { free(t->it); plen = t->plen; sp--; continue; }
        fitem_t x = t->it[t->i++];
        const char *text = psc_strset_text(&ft->texts, ft->nodes[x.node].text);
        if (!x.block) {
            fprintf(out, "%.*s%s %" PRIu64 "\n", (int)plen, path, text, ft->nodes[x.node].w);
            continue;
        }
        /* into the child's subtree: its text and ';' on the path, cut
         * back to plen when its entries are done */
        size_t len = strlen(text);
        if (plen + len + 1 > cap_path) {
            size_t c = cap_path;
            while (plen + len + 1 > c) c *= 2;
            char *p = realloc(path, c);
            if (!p) goto out;
            path = p;
            cap_path = c;
        }
        if (psc_grow((void **)&st, &cap_st, sp, sizeof *st, 64) || !(it = fitems(ft, first, kids, x.node, &m))) goto out;
        st[sp++] = (frame_t){ it, m, 0, plen };
        memcpy(path + plen, text, len);
        path[plen + len] = ';';
        plen += len + 1;
    }
    rc = 0;
out:
    while (sp) free(st[--sp].it);
    free(st);
    free(path);
    free(first);
    free(kids);
    free(at);
    return rc;
}

/* The folded lines: one per distinct displayed stack (stack ids that read
 * the same are summed), in text order. */
static int folded_write(const az_scan_t *s, az_sym_t *sym, const az_export_opts_t *eo, int weight, FILE *out)
{
    size_t n = 0;
    const az_site_t *sites = az_sites(s->heap, &n);
    az_sv_t *v = az_sv_create(s, sym, eo ? &eo->sites : NULL);
    ftree_t ft = { 0 };
    int rc = PSC_ENOMEM;
    if (!v || psc_strset_init(&ft.texts) ||
        psc_map_init(&ft.kids, sizeof(uint32_t), 1024, 50, NULL) ||
        psc_map_init(&ft.by_fn, sizeof(uint32_t), 1024, 50, NULL) ||
        psc_grow((void **)&ft.nodes, &ft.cap_nodes, 0, sizeof *ft.nodes, 4096))
        goto out;
    ft.nodes[ft.n_nodes++] = (fnode_t){ 0, 0, 0 };
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        uint64_t w = weight == AZ_WEIGHT_CALLS ? sites[i].calls : sites[i].bytes;
        if (w) rc = folded_add(&ft, v, sites[i].stack, eo && eo->lines, w);
    }
    psc_map_free(&ft.kids);      /* the lookups are done: their memory for the printing */
    psc_map_free(&ft.by_fn);
    if (!rc) rc = folded_print(&ft, out);
out:
    psc_strset_free(&ft.texts);
    psc_map_free(&ft.kids);
    psc_map_free(&ft.by_fn);
    free(ft.nodes);
    az_sv_destroy(v);
    return rc;
}

int az_export(const char *trace, int format, int weight, const char *out_path, int *warning,
              char *msg, size_t msglen)
{
    return az_export_ex(trace, format, weight, NULL, out_path, warning, msg, msglen);
}

int az_export_ex(const char *trace, int format, int weight, const az_export_opts_t *eo,
                 const char *out_path, int *warning, char *msg, size_t msglen)
{
    *warning = 0;
    /* Written to a temporary file renamed into place on success (a device
     * or FIFO in place), refused when it is the trace (common/outfile.h);
     * the trace is read once, so a pipe works: the pid comes from the
     * header the scan has read by the first event. */
    psc_out_t *o = NULL;
    const char *inputs[1] = { trace };
    FILE *out = stdout;          /* "-": standard output, for a pipe into a viewer */
    int rc = 0;
    if (strcmp(out_path, "-")) {
        if ((rc = psc_out_open(out_path, inputs, 1, PSC_OUT_SPECIAL, &o, msg, msglen))) return rc;
        out = psc_out_stream(o);
        if (!out) { psc_out_abort(o); snprintf(msg, msglen, "cannot write %s", out_path); return PSC_EIO; }
    }
    az_scan_t *s = NULL;
    /* the selection is the scan's (az_scan_opts_t): report counts the same events */
    az_scan_opts_t so = { 0 };
    so.no_reuse = 1;             /* no export format carries a reuse figure */
    if (eo) {
        so.phase = eo->phase;
        so.window = eo->window;
        so.from = eo->from;
        so.to = eo->to;
    }
    if (format == AZ_EXPORT_CHROME) {
        chrome_t c = { .out = out, .first = 1, .selective = so.phase || so.window,
                       .all_allocs = eo && eo->allocations };
        c.in = !c.selective;
        fputs("{\"displayTimeUnit\":\"ns\",", out);
        if (c.selective) {
            /* say what was left out: a viewer shows no sign of it */
            fputs("\"otherData\":{", out);
            if (so.phase) { fputs("\"phase\":", out); az_json_write_string(out, so.phase); }
            if (so.window) {
                fprintf(out, "%s\"from_ns\":%" PRIu64 ",\"to_ns\":", so.phase ? "," : "", so.from);
                if (so.to == UINT64_MAX) fputs("null", out);   /* no --to: to the end */
                else fprintf(out, "%" PRIu64, so.to);
            }
            fputs("},", out);
        }
        fputs("\"traceEvents\":[", out);
        so.hook = chrome_hook;
        so.hook_ctx = &c;
        rc = az_scan_file(trace, &so, &s, msg, msglen);
        if (!rc) {
            /* final values of every counter written, at the end of the
             * trace or of the selection's last stretch */
            uint64_t t_end = c.selective ? c.t_in : s->t_last;
            for (size_t i = 0; i < c.n_tracks; i++) {
                track_t *t = &c.tracks[i];
                if (!t->emitted) continue;
                uint64_t v = t->pending ? t->pending_v : t->last_v;
                counter_write(&c, t, t_end > t->last_ts ? t_end : t->last_ts, v);
            }
            scopes_close(&c, s, t_end);          /* scopes still open at the end, cut there */
            big_write(&c, s, eo);
            if (c.big_dropped) {
                ev_sep(&c);
                fprintf(out, "{\"name\":\"allocations not written: %" PRIu64 " (over the cap)\",\"ph\":\"i\",\"s\":\"g\","
                        "\"ts\":0,\"pid\":%" PRIu64 ",\"tid\":0}", c.big_dropped, s->hdr->pid);
            }
            ev_sep(&c);
            fprintf(out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%" PRIu64 ",\"args\":{\"name\":", s->hdr->pid);
            az_json_write_string(out, s->hdr->exe && s->hdr->exe[0] ? s->hdr->exe : "traced program");
            fputs("}}", out);
        }
        fputs("\n]}\n", out);
        free(c.tracks);
        free(c.big);
        free(c.open);
    } else {
        rc = az_scan_file(trace, &so, &s, msg, msglen);
        if (!rc) {
            az_sym_t *sym = az_sym_open(s->r);
            if (!sym) snprintf(msg, msglen, "%s", psc_strerror(rc = PSC_ENOMEM));
            else if (format == AZ_EXPORT_PPROF) rc = az_pprof_write(s, sym, eo, out, msg, msglen);
            else if ((rc = folded_write(s, sym, eo, weight, out)))
                snprintf(msg, msglen, "%s", psc_strerror(rc));
            az_sym_destroy(sym);
        }
    }
    if (!rc) {
        char wb[8];
        *warning = az_scan_warning(s, wb, sizeof wb) != NULL;
    }
    az_scan_free(s);
    if (!o) return rc;           /* stdout: the caller reports write errors (cli_stdout_done) */
    if (rc) psc_out_abort(o);
    else rc = psc_out_commit(o, msg, msglen);
    return rc;
}

/* report.c — text and JSON reports over a scanned trace (see report.h).
 *
 * The text is for a person reading a terminal: sections with aligned
 * columns, binary units, times in s/ms/us, histograms as bars. The JSON is
 * the contract of docs/DESIGN.md ("JSON contract"); extra keys
 * are added beside the promised ones, never instead of them.
 */
#include "report.h"
#include "suppress.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "metrics_json.h"
#include "phase_frame.h"

/* Every name in the text comes from the trace (program, files, markers,
 * pools, symbols): written through psc_esc_text (common/escape.h), so a
 * terminal sees control bytes as \xNN, never acts on them. ESC(s, buf)
 * for a printf argument. */
#define ESC(s, b) psc_esc_text((s), (b), sizeof (b))

/* The time base's longest gap is the trace's resolution, but only a gap a
 * run can have: a SYNC record claiming more than 2^60 ns (36 years) is
 * damaged, and neither stated as a resolution nor used to fold the
 * lifetime histogram (plot.c's lifetime title follows the same rule). */
#define RESOLUTION_MAX_NS (1ull << 60)
static uint64_t resolution(const az_scan_t *s)
{
    return s->resolution_ns <= RESOLUTION_MAX_NS ? s->resolution_ns : 0;
}

const char *az_site_name(const az_scan_t *s, az_sym_t *sym, uint32_t stack, char *buf, size_t len)
{
    az_sv_t *v = az_sv_create(s, sym, NULL);
    const char *via = NULL;
    const char *l = v ? az_sv_label(v, stack, &via) : "(out of memory)";
    if (via) snprintf(buf, len, "%s via %s", l, via);
    else snprintf(buf, len, "%s", l);
    az_sv_destroy(v);
    return buf;
}

/* ---- site tables -------------------------------------------------------------- */

/* Descending by one figure; ties by label, so the order is the same on
 * every run. */
#define SITE_CMP(name, field)                                                  \
    static int name(const void *a, const void *b)                              \
    {                                                                          \
        const az_dsite_t *x = a, *y = b;                                       \
        if (x->field != y->field) return x->field < y->field ? 1 : -1;         \
        return strcmp(x->label, y->label);                                     \
    }
SITE_CMP(by_peak, peak_bytes)
SITE_CMP(by_calls, calls)
SITE_CMP(by_bytes, bytes)
SITE_CMP(by_live, live_bytes)

/* The displayed rows of a kind (sites.h), sorted; NULL v: none. */
static az_dsite_t *sorted_sites(az_sv_t *v, int kind, int (*cmp)(const void *, const void *), size_t *n)
{
    *n = 0;
    const az_dsite_t *src = v ? az_sv_kind_sites(v, kind, n) : NULL;
    if (!*n) return NULL;
    az_dsite_t *a = malloc(*n * sizeof *a);
    if (!a) { *n = 0; return NULL; }
    memcpy(a, src, *n * sizeof *a);
    qsort(a, *n, sizeof *a, cmp);
    return a;
}

/* A log2 histogram. floor > 0 (times): the buckets that end at or below it
 * are one row, "below the resolution": a trace cannot tell them apart. */
static void hist_text(FILE *out, const char *title, const uint64_t *h, int bytes, uint64_t floor)
{
    int lo = -1, hi = -1;
    uint64_t mx = 0, total = 0, under = 0;
    int fb = 0;   /* buckets [0, fb) end at or below floor */
    /* bucket i ends at 2^i (bucket 0 at 1); the last, 64, holds values up
     * to 2^64 - 1 and never ends at or below a u64 floor. fb < 64 keeps
     * every shift below 64. */
    while (floor && fb < AZ_HIST_BUCKETS - 1 && (fb ? 1ull << fb : 1) <= floor) fb++;
    for (int i = 0; i < AZ_HIST_BUCKETS; i++) {
        if (i < fb) { under += h[i]; continue; }
        if (h[i]) { if (lo < 0) lo = i; hi = i; if (h[i] > mx) mx = h[i]; total += h[i]; }
    }
    if (under > mx) mx = under;
    total += under;
    fprintf(out, "\n%s\n", title);
    if (!total) { fputs("  (none)\n", out); return; }
    if (under) {
        char a[32], c[32];
        int bar = (int)((double)under * 40.0 / (double)mx + 0.5);
        fprintf(out, "  %10s .. <%-10s %12s %5.1f%%  ", "0 ns", psc_fmt_ns(fb ? 1ull << (fb - 1) : 1, a, sizeof a),
                psc_fmt_count(under, c, sizeof c), 100.0 * (double)under / (double)total);
        for (int k = 0; k < bar; k++) fputc('#', out);
        fputs("  (below the trace's time resolution)\n", out);
    }
    for (int i = lo; lo >= 0 && i <= hi; i++) {
        char a[32], b[32], c[32];
        uint64_t from = i ? 1ull << (i - 1) : 0, to = i ? (i < 64 ? (1ull << i) : UINT64_MAX) : 1;
        if (bytes) { psc_fmt_bytes(from, a, sizeof a); psc_fmt_bytes(to, b, sizeof b); }
        else { psc_fmt_ns(from, a, sizeof a); psc_fmt_ns(to, b, sizeof b); }
        int bar = (int)((double)h[i] * 40.0 / (double)mx + 0.5);
        fprintf(out, "  %10s .. <%-10s %12s %5.1f%%  ", a, b, psc_fmt_count(h[i], c, sizeof c),
                100.0 * (double)h[i] / (double)total);
        for (int k = 0; k < bar; k++) fputc('#', out);
        fputc('\n', out);
    }
}

/* Every displayed frame of a stack, one a line, under its row (--full). */
static void full_stack(FILE *out, az_sv_t *v, uint32_t stack)
{
    az_frame_t fr[256];
    size_t n = az_sv_frames(v, stack, fr, sizeof fr / sizeof fr[0]);
    for (size_t i = 0; i < n; i++) {
        char b[32768];
        fprintf(out, "  %50s#%-3u ", "", fr[i].level);
        psc_esc_text_put(out, az_sym_format(&fr[i], fr[i].pc, b, sizeof b));
        fprintf(out, "%s%s\n",
                fr[i].inlined ? " [inlined]" : "", az_sv_skipped(v, &fr[i]) ? "  (skipped)" : "");
    }
}

/* Roots a whole stack ends in; an fp stack ending elsewhere was cut short
 * by a frame without a frame pointer. */
static int is_root(const char *fn)
{
    static const char *const roots[] = {
        "main", "__libc_start_call_main", "__libc_start_main", "__libc_start_main_impl", "_start",
        "start_thread", "clone", "clone3", "__clone", "__clone3", "__clone_internal", "_dl_start_user",
        "_dl_init", "call_init", "_dl_start",
    };
    if (!fn) return 0;
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++)
        if (!strcmp(fn, roots[i])) return 1;
    return 0;
}

/* Once per report: frame-pointer stacks that stopped before main or a
 * thread's start, where (the module most of them end in), and what to do. */
static void stacks_note(FILE *out, const az_scan_t *s, az_sv_t *v)
{
    if (!v || s->hdr->stacks != PST_STACKS_FP) return;
    size_t n = 0;
    const az_site_t *si = az_sites(s->heap, &n);
    uint64_t all = 0, cut = 0;
    struct { const char *mod; uint64_t calls; } top[8];
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t depth = 0;
        if (!si[i].stack || !pst_stack(s->r, si[i].stack, &depth) || !depth) continue;
        all += si[i].calls;
        if (depth >= s->hdr->depth) continue;   /* the depth limit, not a missing frame pointer */
        az_frame_t fr[256];
        size_t k = az_sv_frames(v, si[i].stack, fr, sizeof fr / sizeof fr[0]);
        if (!k || k >= sizeof fr / sizeof fr[0] || is_root(fr[k - 1].function)) continue;
        cut += si[i].calls;
        const char *m = fr[k - 1].module ? fr[k - 1].module : "?";
        size_t t = 0;
        while (t < nt && strcmp(top[t].mod, m)) t++;
        if (t == nt && nt < 8) { top[nt].mod = m; top[nt].calls = 0; nt++; }
        if (t < nt) top[t].calls += si[i].calls;
    }
    if (!all || cut * 20 < all) return;   /* under 5%: not worth a line */
    size_t b = 0;
    for (size_t t = 1; t < nt; t++) if (top[t].calls > top[b].calls) b = t;
    char mb[600];
    fprintf(out, "\nnote: %.1f%% of the allocations' frame-pointer stacks stop before main or a thread's start,\n"
            "      most in %s (code without frame pointers): record with --stacks dwarf for whole stacks\n",
            100.0 * (double)cut / (double)all, ESC(nt ? top[b].mod : "?", mb));
}

static void sites_text(FILE *out, const az_scan_t *s, az_sv_t *v, int full, const char *title,
                       int (*cmp)(const void *, const void *), unsigned top, int what, int kind)
{
    size_t n = 0;
    az_dsite_t *a = sorted_sites(v, kind, cmp, &n);
    fprintf(out, "\n%s\n", title);
    size_t shown = 0;
    if (n) fprintf(out, "  %12s %12s %12s  %s\n", what == 0 ? "at peak" : what == 3 ? "leaked" : "bytes",
                   what == 3 ? "objects" : "calls", what == 0 ? "share" : "avg size", "site");
    for (size_t i = 0; i < n && shown < top; i++) {
        const az_dsite_t *x = &a[i];
        uint64_t val = what == 0 ? x->peak_bytes : what == 3 ? x->live_bytes : x->bytes;
        if ((what == 0 || what == 3) && val == 0) break;
        if ((what == 1 || what == 2) && x->calls == 0) continue;   /* none in the selection */
        char b1[32], b2[32], b3[32];
        if (what == 0)
            snprintf(b3, sizeof b3, "%.1f%%", s->heap_r.peak_live_bytes ?
                     100.0 * (double)val / (double)s->heap_r.peak_live_bytes : 0.0);
        else if (what == 3)
            psc_fmt_count(x->live_count, b3, sizeof b3);
        else
            psc_fmt_bytes(x->calls ? x->bytes / x->calls : 0, b3, sizeof b3);
        fprintf(out, "  %12s %12s %12s  ", psc_fmt_bytes(val, b1, sizeof b1),
                what == 3 ? b3 : psc_fmt_count(x->calls, b2, sizeof b2), what == 3 ? "" : b3);
        /* template arguments folded (sites.h, az_sv_fold); --full: whole */
        char fb[32768];
        psc_esc_text_put(out, full ? x->label : az_sv_fold(x->label, fb, sizeof fb));
        if (x->via) { fputs("  via ", out); psc_esc_text_put(out, full ? x->via : az_sv_fold(x->via, fb, sizeof fb)); }
        fputc('\n', out);
        if (full) full_stack(out, v, x->stack);
        shown++;
    }
    if (!shown) fputs("  (none)\n", out);
    free(a);
}

/* Leaks suppressed (suppress.h): their sum under the leak line, then
 * each pattern that took some, so none is dropped silently. */
static void supp_text(FILE *out, const az_scan_t *s)
{
    const az_supp_res_t *r = s->supp;
    if (!r || !r->n) return;
    char a[32], b[32];
    int defaults = 0;
    for (size_t i = 0; i < r->n; i++) defaults |= r->hits[i].why != NULL;
    fprintf(out, "  suppressed        %12s  in %s object%s, not in the leaks above%s\n",
            psc_fmt_bytes(r->bytes, a, sizeof a), psc_fmt_count(r->objects, b, sizeof b), r->objects == 1 ? "" : "s",
            defaults ? " (--no-default-suppressions counts the defaults' as leaks)" : "");
    for (size_t i = 0; i < r->n; i++) {
        const az_supp_hit_t *x = &r->hits[i];
        fprintf(out, "    %12s  in %s object%s: ", psc_fmt_bytes(x->bytes, a, sizeof a),
                psc_fmt_count(x->objects, b, sizeof b), x->objects == 1 ? "" : "s");
        if (x->why) fprintf(out, "%s (", x->why);
        psc_esc_text_put(out, x->pattern);
        if (!x->why) { fputs(", ", out); psc_esc_text_put(out, x->source); }
        fputs(x->why ? ")\n" : "\n", out);
    }
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

/* What is live at the trace's end is a leak only when the end is the
 * program's: a stopped recording ends at the stop, a trace still being
 * written at its last complete chunk. */
static const char *live_end_label(const az_scan_t *s)
{
    if (s->writing_pid) return "live now";
    if (s->hdr && s->hdr->attach) return "live at detach";   /* poolscope attach's window */
    if (s->status && s->status->end_stopped) return "live at stop";
    return "leaked at exit";
}

/* What every section of the text report reads. */
typedef struct rctx {
    const az_scan_t *s;
    const az_report_opts_t *o;   /* may be NULL */
    az_sym_t *sym;               /* NULL with no_symbols */
    unsigned top;
} rctx_t;

static void head_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const pst_header_t *hd = ctx->s->hdr;
    char a[64], b[64], c[64];
    char nb[1200];
    fprintf(out, "poolscope report: %s\n", ESC(s->path, nb));
    fprintf(out, "  program     %s (pid %" PRIu64 ")%s\n", ESC(hd->exe && hd->exe[0] ? hd->exe : "?", nb), hd->pid,
            hd->parent_pid ? " — fork child" : "");
    fprintf(out, "  duration    %s, %" PRIu64 " thread%s, %" PRIu64 " fork%s, %" PRIu64 " exec%s\n",
            psc_fmt_ns(s->t_last - s->t_first, a, sizeof a), s->threads, s->threads == 1 ? "" : "s",
            s->forks, s->forks == 1 ? "" : "s", s->execs, s->execs == 1 ? "" : "s");
    fprintf(out, "  events      %s", psc_fmt_count(s->events, a, sizeof a));
    if (s->events_counted != s->events) fprintf(out, " (%s in the selected window)", psc_fmt_count(s->events_counted, b, sizeof b));
    fprintf(out, ", lost %s%s\n", psc_fmt_count(s->lost, c, sizeof c),
            s->status && s->status->end_killed ? "  <-- the process was killed (SIGKILL or OOM): that many were in its rings"
            : s->lost ? "  <-- the tracer dropped events" : "");
    if (s->writing_pid)   /* no END yet: read up to the last complete chunk (scan.h) */
        fprintf(out, "  live        still being written by pid %" PRIu64 ": read up to %s, its last complete chunk\n",
                s->writing_pid, psc_fmt_ns(s->t_last, a, sizeof a));
    if (hd->attach)
        fputs("  attached    a window of a running process (poolscope attach): frees of blocks allocated\n"
              "              before the attach are counted apart; what is live at the end is live at detach\n", out);
    else if (s->status && s->status->end_stopped)
        fputs("  stopped     recording stopped before the program ended (record --duration/--until-signal):\n"
              "              what is live at the end is live at the stop, not leaked\n", out);
    if (resolution(s))
        fprintf(out, "  time        every event within %s of when it happened (the trace's resolution)\n",
                psc_fmt_ns(resolution(s), a, sizeof a));
    else if (s->resolution_ns)
        fprintf(out, "  time        resolution unknown: the trace's SYNC records claim a tick gap of %" PRIu64 " ns,\n"
                     "              more than any run lasts (a damaged trace); lifetimes are shown as recorded\n",
                s->resolution_ns);
    if (hd->stacks != PST_STACKS_NONE && hd->depth) {
        /* a stack as deep as the limit lost its outer frames (or is exactly
         * that deep: the same to a reader) */
        size_t ns = pst_stack_count(s->r), cut = 0;
        for (size_t i = 0; i < ns; i++) {
            uint32_t dep = 0;
            pst_stack_at(s->r, i, &dep);
            cut += dep >= hd->depth;
        }
        fprintf(out, "  stacks      %s distinct", psc_fmt_count(ns, a, sizeof a));
        if (cut)
            fprintf(out, ", %s (%.0f%%) as deep as the limit (%u): their outer frames are cut%s\n",
                    psc_fmt_count(cut, b, sizeof b), pct(cut, ns), hd->depth,
                    hd->depth < PST_MAX_DEPTH ? "; record --depth 128 keeps more" : "");
        else
            fprintf(out, ", none cut at the depth limit (%u)\n", hd->depth);
    }
    /* events by kind, in rows of three */
    int col = 0;
    for (unsigned t = 0; t < PST_EV_MAX; t++) {
        if (!s->by_type[t] || t == PST_EV_THREAD_START) continue;
        const char *nm = pst_event_name(t);
        if (!col) fputs("             ", out);
        fprintf(out, " %-15s %11s", nm ? nm : "?", psc_fmt_count(s->by_type[t], a, sizeof a));
        if (++col == 3) { fputc('\n', out); col = 0; }
    }
    if (col) fputc('\n', out);
    if (s->phase || s->window) {
        char w[96] = "";
        if (s->window) {
            char f1[32], f2[32];
            snprintf(w, sizeof w, "from %s to %s", psc_fmt_ns(s->from, f1, sizeof f1),
                     s->to == UINT64_MAX ? "the end" : psc_fmt_ns(s->to, f2, sizeof f2));
        }
        fprintf(out, "  selected    %s%s%s%s%s: every figure below counts only that, unless it says whole run\n",
                s->phase ? "phase '" : "", s->phase ? ESC(s->phase, nb) : "", s->phase ? "'" : "",
                s->phase && s->window ? ", " : "", w);
    }
}

static void memory_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_result_t *h = &ctx->s->heap_r;
    const pst_header_t *hd = ctx->s->hdr;
    char a[64], b[64], c[64], d[64];
    char nb[1200];
    fputs("\nMemory\n", out);
    if (h->peak_live_bytes)
        fprintf(out, "  peak live heap    %12s  at %s, %s object%s (sum of requested bytes)\n",
                psc_fmt_bytes(h->peak_live_bytes, a, sizeof a), psc_fmt_ns(h->peak_live_t - s->t_first, b, sizeof b),
                psc_fmt_count(h->peak_live_count, c, sizeof c), h->peak_live_count == 1 ? "" : "s");
    else
        fputs("  peak live heap             0 B  (nothing allocated)\n", out);
    /* said when the order of one tick's events, which the trace does not
     * hold, could move the peak by more than 1% (scan.h, peak_tick_lo/hi) */
    if (s->peak_tick_hi && (s->peak_tick_hi - s->peak_tick_lo) * 100 > s->peak_tick_hi) {
        char lo[32], hi[32];
        fprintf(out, "    different threads' events stamped with the same tick (the clock's %s step) have no recorded\n"
                     "    order: the peak was between %s and %s\n",
                psc_fmt_ns(PST_TICK_NS, a, sizeof a), psc_fmt_bytes(s->peak_tick_lo, lo, sizeof lo),
                psc_fmt_bytes(s->peak_tick_hi, hi, sizeof hi));
    }
    if (s->rss_samples)
        fprintf(out, "  peak RSS          %12s  at %s (%s sample%s)\n", psc_fmt_bytes(s->peak_rss, a, sizeof a),
                psc_fmt_ns(s->peak_rss_t - s->t_first, b, sizeof b), psc_fmt_count(s->rss_samples, c, sizeof c),
                s->rss_samples == 1 ? "" : "s");
    else
        fputs("  peak RSS                     -  (no samples)\n", out);
    if (s->tracer_bytes)
        fprintf(out, "  tracer's own      %12s  mapped at most by the tracer (rings, tables, counters): in no figure here%s\n",
                psc_fmt_bytes(s->tracer_bytes, a, sizeof a), s->phase || s->window ? " (whole run)" : "");
    /* committed first: a PROT_NONE reservation is address space, not memory */
    fprintf(out, "  peak mmap         %12s  committed (mapped accessible: the program's mmap calls, its threads' stacks)\n",
            psc_fmt_bytes(s->peak_mmap_committed, a, sizeof a));
    if (s->peak_mmap_total)
        fprintf(out, "    mapped          %12s  at most: anonymous %s, file-backed %s; reserved only\n"
                     "                                (PROT_NONE) %s at most\n",
                psc_fmt_bytes(s->peak_mmap_total, a, sizeof a), psc_fmt_bytes(s->peak_mmap_anon, b, sizeof b),
                psc_fmt_bytes(s->peak_mmap_file, c, sizeof c), psc_fmt_bytes(s->peak_mmap_reserved, d, sizeof d));
    if (s->peak_arena)
        fprintf(out, "  pymalloc reserve  %12s  at most in Python's object arenas (their objects are heap calls:\n"
                     "                                in the heap figures, so the arenas are in no figure here)\n",
                psc_fmt_bytes(s->peak_arena, a, sizeof a));
    {
        pm_file_map_t fm[5];
        size_t nf = pm_file_maps(s->model, fm, 5);
        for (size_t i = 0; i < nf; i++)
        {
            /* a name in brackets ([stack]) is an anonymous mapping's, not a file's */
            const char *nm = az_scan_string(s, fm[i].name);
            fprintf(out, "    %-15s %12s  at its peak: %s\n", nm && nm[0] == '[' ? "named" : "file",
                    psc_fmt_bytes(fm[i].peak, a, sizeof a), ESC(nm, nb));
        }
    }
    fprintf(out, "  total allocated   %12s  in %s allocations (%s calls)\n",
            psc_fmt_bytes(h->total_allocated_bytes, a, sizeof a), psc_fmt_count(h->allocs, b, sizeof b),
            psc_fmt_count(h->calls, c, sizeof c));
    fprintf(out, "  temporary         %12s  allocations freed before the next one (%.1f%%)\n",
            psc_fmt_count(h->temporary, a, sizeof a), pct(h->temporary, h->allocs));
    fprintf(out, "  %-14s    %12s  in %s object%s%s\n", live_end_label(s), psc_fmt_bytes(h->leaked_bytes, a, sizeof a),
            psc_fmt_count(h->leaked_count, b, sizeof b), h->leaked_count == 1 ? "" : "s",
            s->phase || s->window ? " (allocated in the selection, never freed)" : "");
    supp_text(out, s);
    fprintf(out, "  internal frag     %11.1f%%  at the peak (glibc rounding); %.1f%% time-weighted\n",
            100 * h->internal_frag, 100 * h->internal_frag_avg);
    if (hd->attach && h->unmatched_frees)   /* their allocation came before the window */
        fprintf(out, "  before attach     %s frees: freed, allocated before attach\n", psc_fmt_count(h->unmatched_frees, b, sizeof b));
    if (hd->attach ? s->failed_allocs != 0 : s->failed_allocs || h->unmatched_frees)
        fprintf(out, "  anomalies         %s failed allocations, %s frees of unknown addresses\n",
                psc_fmt_count(s->failed_allocs, a, sizeof a), psc_fmt_count(hd->attach ? 0 : h->unmatched_frees, b, sizeof b));
    if (h->implausible_allocs)
        fprintf(out, "  damaged trace     %s allocations left out: they would take the live heap past any\n"
                     "                    address space (2^57 bytes)\n", psc_fmt_count(h->implausible_allocs, a, sizeof a));
}

static void over_time_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_result_t *h = &ctx->s->heap_r;
    char a[64], b[64], c[64], d[64], e[64];
    /* over time: at most 16 rows, each the maximum over its slice */
    if (s->tl_used) {
        size_t rows = s->tl_used < 16 ? s->tl_used : 16;
        size_t per = (s->tl_used + rows - 1) / rows;
        int kv = h->has_kv, resv = s->peak_mmap_reserved > 0;
        /* anonymous memory as committed: a PROT_NONE reservation is address
         * space, in a column of its own when there is one */
        fprintf(out, "\nOver time (maximum in each slice%s)\n  %10s %11s %11s %11s %11s%s%s\n",
                s->phase ? "; whole run: a phase is not one span of time" :
                s->window ? "; the --from/--to window only" : "",
                "time", "heap live", "anon commit", "mmap file", "RSS", resv ? "    reserved" : "",
                kv ? "   KV blocks  KV util" : "");
        for (size_t i = 0; i < s->tl_used; i += per) {
            az_tl_bucket_t m = { 0 };
            for (size_t k = i; k < i + per && k < s->tl_used; k++) {
                const az_tl_bucket_t *x = &s->tl[k];
                if (x->heap > m.heap) m.heap = x->heap;
                if (x->mmap_anon > m.mmap_anon) m.mmap_anon = x->mmap_anon;
                if (x->mmap_file > m.mmap_file) m.mmap_file = x->mmap_file;
                if (x->rss > m.rss) m.rss = x->rss;
                if (x->mmap_reserved > m.mmap_reserved) m.mmap_reserved = x->mmap_reserved;
                if (x->kv_blocks >= m.kv_blocks) { m.kv_blocks = x->kv_blocks; m.kv_tokens = x->kv_tokens; m.kv_capacity = x->kv_capacity; }
            }
            uint64_t t = (s->tl_t0 - s->t_first) + ((uint64_t)i << s->tl_shift);
            fprintf(out, "  %10s %11s %11s %11s %11s", psc_fmt_ns(t, a, sizeof a), psc_fmt_bytes(m.heap, b, sizeof b),
                    psc_fmt_bytes(m.mmap_anon, c, sizeof c), psc_fmt_bytes(m.mmap_file, d, sizeof d),
                    psc_fmt_bytes(m.rss, e, sizeof e));
            if (resv) fprintf(out, " %11s", psc_fmt_bytes(m.mmap_reserved, c, sizeof c));
            if (kv) fprintf(out, " %11" PRIu64 " %7.1f%%", m.kv_blocks, m.kv_capacity ? 100.0 * (double)m.kv_tokens / (double)m.kv_capacity : 0.0);
            fputc('\n', out);
        }
    }
}

static void hists_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_result_t *h = &ctx->s->heap_r;
    hist_text(out, "Allocation sizes (requested)", h->size_hist, 1, 0);
    hist_text(out, "Lifetimes (allocation to free)", h->lifetime_hist, 0, resolution(s));
}

static void pools_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_result_t *p = &ctx->s->pool_r;
    char a[64], b[64], c[64], d[64], e[64];
    char nb[1200];
    fputs("\nPools\n", out);
    if (!p->acquires && !s->n_pools) {
        fputs("  (no pool events in this trace)\n", out);
    } else {
        fprintf(out, "  acquires %s, hits %s, misses %s: hit rate %s%%; backing allocations %s\n",
                psc_fmt_count(p->acquires, a, sizeof a), psc_fmt_count(p->hits, b, sizeof b),
                psc_fmt_count(p->misses, c, sizeof c), psc_fmt_share(p->hits, p->acquires, 100, 1, e, sizeof e),
                psc_fmt_count(p->backing_allocs, d, sizeof d));
        fprintf(out, "  peak outstanding %s, peak cached %s, peak reserved %s (%.2fx the peak live %s)\n",
                psc_fmt_bytes(p->peak_outstanding_bytes, a, sizeof a), psc_fmt_bytes(p->peak_cached_bytes, b, sizeof b),
                psc_fmt_bytes(p->peak_reserved_bytes, c, sizeof c), p->reserved_over_live,
                psc_fmt_bytes(p->peak_live_bytes, d, sizeof d));
        uint64_t rq = 0, gr = 0, big = 0, acq = 0;
        for (size_t i = 0; i < s->n_pools; i++)
            if (!s->pools[i].kv) {
                rq += s->pools[i].req_bytes; gr += s->pools[i].granted_bytes;
                big += s->pools[i].oversized; acq += s->pools[i].acquires;
            }
        fprintf(out, "  internal fragmentation %.1f%% at the peak, %.1f%% time-weighted (a buffer's unused bytes\n"
                     "    count for as long as it is out)\n", 100 * p->internal_frag, 100 * p->internal_frag_avg);
        if (acq)
            fprintf(out, "  requested %s, granted %s over %s acquires (%.2fx); %s acquires (%s%%) got a buffer\n"
                         "    more than twice the request: a first-fit pool hands a larger cached buffer to a\n"
                         "    smaller request rather than allocate\n",
                    psc_fmt_bytes(rq, a, sizeof a), psc_fmt_bytes(gr, b, sizeof b), psc_fmt_count(acq, c, sizeof c),
                    rq ? (double)gr / (double)rq : 0.0, psc_fmt_count(big, d, sizeof d),
                    psc_fmt_share(big, acq, 100, 1, e, sizeof e));
        fprintf(out, "  %-16s %6s %12s %12s %12s %12s\n", "pool", "kind", "acquires", "hit rate", "peak out", "peak cached");
        for (size_t i = 0; i < s->n_pools; i++) {
            const az_pool_info_t *x = &s->pools[i];
            if (x->kv) {
                fprintf(out, "  %-16s %6s %12s %12s %12s %12s  block %" PRIu64 " tokens\n", ESC(x->name, nb), "kv", "-", "-", "-", "-", x->block_size);
                continue;
            }
            fprintf(out, "  %-16s %6s %12s %11s%% %12s %12s\n", ESC(x->name, nb), "buffer", psc_fmt_count(x->acquires, a, sizeof a),
                    psc_fmt_share(x->hits, x->acquires, 100, 1, d, sizeof d), psc_fmt_bytes(x->peak_out, b, sizeof b),
                    psc_fmt_bytes(x->peak_cached, c, sizeof c));
        }
    }
}

static void reuse_text(const rctx_t *ctx, FILE *out)
{
    const az_result_t *h = &ctx->s->heap_r;
    char a[64];
    fputs("\nAddress reuse (heap)\n", out);
    fprintf(out, "  same address as the last free of that size  %5.1f%%\n", 100 * h->same_address_reuse);
    fprintf(out, "  fresh addresses (never handed out before)   %5.1f%%\n", 100 * h->fresh_address_ratio);
    fprintf(out, "  reuse distance (distinct addresses between uses): p50 %" PRIu64 ", p90 %" PRIu64 ", max %" PRIu64 " over %s re-uses%s\n",
            h->distance_p50, h->distance_p90, h->distance_max, psc_fmt_count(h->reuse_samples, a, sizeof a),
            h->reuse_capped ? " (capped: more distinct addresses than tracked)" : "");
    {
        int lo = -1, hi = -1;
        for (int i = 0; i < AZ_HIST_BUCKETS; i++) if (h->distance_hist[i]) { if (lo < 0) lo = i; hi = i; }
        if (lo >= 0) {
            fputs("  distance  ", out);
            for (int i = lo; i <= hi && i < lo + 12; i++)
                fprintf(out, " %s%" PRIu64 ":%.0f%%", i ? "<" : "", (uint64_t)(i ? (1ull << i) : 1ull),
                        pct(h->distance_hist[i], h->reuse_samples));
            fputc('\n', out);
        }
    }
}

static void kv_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_result_t *h = &ctx->s->heap_r;
    char a[64];
    fputs("\nKV cache\n", out);
    if (!h->has_kv) {
        fputs("  (no KV block events in this trace)\n", out);
    } else {
        fprintf(out, "  peak blocks in use %" PRIu64 " at %s; utilization %.1f%% time-weighted, %.1f%% at the peak; waste %.1f%%\n",
                h->peak_kv_blocks, psc_fmt_ns(h->peak_kv_t - s->t_first, a, sizeof a), 100 * h->kv_utilization,
                100 * h->kv_utilization_at_peak, 100 * h->kv_waste_ratio);
    }
    if (s->kv_orphans)
        fprintf(out, "  %s KV events of pools the trace never created were ignored (no block size)\n",
                psc_fmt_count(s->kv_orphans, a, sizeof a));
}

static void phases_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_result_t *h = &ctx->s->heap_r;
    char a[64], b[64], c[64], d[64];
    char nb[1200];
    fputs("\nPhases (heap calls while a marker's scope is open)\n", out);
    if (!h->n_phases) fputs("  (no markers)\n", out);
    else fprintf(out, "  %-16s %10s %12s %12s %12s %10s\n", "marker", "count", "heap calls", "heap bytes", "calls/each", "time");
    for (size_t i = 0; i < h->n_phases; i++) {
        const az_phase_t *x = &h->phases[i];
        if (!x->spans) {                 /* point markers: instants, no extent */
            fprintf(out, "  %-16s %10s %12s %12s %12s %10s  (points)\n", ESC(x->name, nb), psc_fmt_count(x->count, a, sizeof a),
                    "-", "-", "-", "-");
            continue;
        }
        fprintf(out, "  %-16s %10s %12s %12s %12.1f %10s\n", ESC(x->name, nb), psc_fmt_count(x->count, a, sizeof a),
                psc_fmt_count(x->heap_calls, b, sizeof b), psc_fmt_bytes(x->heap_bytes, c, sizeof c),
                x->count ? (double)x->heap_calls / (double)x->count : 0.0, psc_fmt_ns(x->time_ns, d, sizeof d));
    }
    if (h->decode_steps)
        fprintf(out, "  allocs per decode step: %.2f allocation calls, %.2f heap calls (%s step%s; steady state = steps after the first 4)\n",
                h->allocs_per_decode_step, h->heap_calls_per_decode_step, psc_fmt_count(h->decode_steps, a, sizeof a),
                h->decode_steps == 1 ? "" : "s");
    az_pf_notes_text(s, out, "  ");   /* --phase-frame calls that may have merged */
}

static void sites_all_text(const rctx_t *ctx, FILE *out)
{
    const az_scan_t *s = ctx->s;
    const az_report_opts_t *o = ctx->o;
    const az_result_t *h = &ctx->s->heap_r;
    az_sym_t *sym = ctx->sym;
    unsigned top = ctx->top;
    az_sv_t *v = az_sv_create(s, sym, o ? &o->sites : NULL);
    int full = o && o->full_stacks;
    stacks_note(out, s, v);
    /* under a selection the peak is the selection's, and what is live then
     * may have been allocated before it: those rows have 0 calls */
    sites_text(out, s, v, full, s->phase || s->window ?
               "Sites live at the selection's peak (calls: in the selection; 0 = allocated before it)" :
               "Sites live at the peak", by_peak, top, 0, AZ_SV_HEAP);
    sites_text(out, s, v, full, "Top sites by calls", by_calls, top, 1, AZ_SV_HEAP);
    sites_text(out, s, v, full, "Top sites by bytes", by_bytes, top, 2, AZ_SV_HEAP);
    if (h->leaked_bytes)
        sites_text(out, s, v, full, s->writing_pid ? "Live now by site (the trace is still being written)"
                   : s->hdr && s->hdr->attach ? "Live at detach by site"
                   : s->status && s->status->end_stopped ? "Live at stop by site" : "Leaks at exit by site",
                   by_live, top, 3, AZ_SV_HEAP);
    /* the other kinds, each under its own name, when the trace has any */
    for (int k = AZ_SV_POOL; k < AZ_SV_KINDS; k++) {
        size_t n = 0;
        if (!v || !az_sv_kind_sites(v, k, &n) || !n) continue;
        char title[96];
        snprintf(title, sizeof title, "Top sites by bytes: %s%s", az_sv_kind_names[k],
                 k == AZ_SV_MMAP_ANON ? " (committed)" : "");
        sites_text(out, s, v, full, title, by_bytes, top, 2, k);
    }
    az_sv_destroy(v);
}

static void symbols_text(const rctx_t *ctx, FILE *out)
{
    az_sym_t *sym = ctx->sym;
    /* modules whose file on disk is not the recorded build (symbolize.h):
     * said after the sites, whose symbolization found them */
    const char *note = az_sym_note(sym, 0);
    if (note) fputs("\nSymbols\n", out);
    for (size_t i = 0; (note = az_sym_note(sym, i)); i++) {
        fputs("  ", out);
        psc_esc_text_put(out, note);
        fputc('\n', out);
    }
}

/* The text report, section by section in this order: a new section is one
 * function and one row here. */
static void (*const text_sections[])(const rctx_t *, FILE *) = {
    head_text,        /* program, duration, events, stacks, events by kind, selection */
    memory_text,      /* peaks, totals, leaks, suppressions, anomalies */
    over_time_text,   /* at most 16 slices */
    hists_text,       /* sizes, lifetimes */
    pools_text,
    reuse_text,
    kv_text,
    phases_text,
    sites_all_text,   /* at the peak, by calls, by bytes, leaks */
    symbols_text,     /* modules whose file is not the recorded build */
};

void az_report_text(const az_scan_t *s, const az_report_opts_t *o, FILE *out)
{
    rctx_t ctx = { .s = s, .o = o, .top = o && o->top ? o->top : 10 };
    if (!(o && o->no_symbols)) {
        ctx.sym = az_sym_open(s->r);
    }
    for (size_t i = 0; i < sizeof text_sections / sizeof *text_sections; i++) text_sections[i](&ctx, out);
    az_sym_destroy(ctx.sym);
}

static void sites_json(az_json_t *j, const char *key, az_sv_t *v, int kind,
                       int (*cmp)(const void *, const void *), unsigned top)
{
    size_t n = 0;
    az_dsite_t *a = sorted_sites(v, kind, cmp, &n);
    az_json_begin(j, key, '[');
    for (size_t i = 0; i < n && i < top; i++) {
        if (cmp == by_live && !a[i].live_bytes) break;
        if (cmp == by_peak && !a[i].peak_bytes) break;
        if ((cmp == by_calls || cmp == by_bytes) && !a[i].calls) continue;
        az_json_begin(j, NULL, '{');
        az_json_u64(j, "stack", a[i].stack);
        az_json_str(j, "site", a[i].label);
        if (a[i].via) az_json_str(j, "via", a[i].via);
        int line = 0;
        const char *file = az_sv_file(v, a[i].stack, &line);
        if (file) { az_json_str(j, "python_file", file); az_json_u64(j, "python_line", (uint64_t)line); }
        az_json_u64(j, "stacks", a[i].n_stacks);
        az_json_u64(j, "calls", a[i].calls);
        az_json_u64(j, "bytes", a[i].bytes);
        az_json_u64(j, "peak_bytes", a[i].peak_bytes);
        az_json_u64(j, "leaked_bytes", a[i].live_bytes);
        az_json_end(j);
    }
    az_json_end(j);
    free(a);
}

void az_report_json(const az_scan_t *s, const az_report_opts_t *o, FILE *out)
{
    unsigned top = o && o->top ? o->top : 10;
    const az_result_t *h = &s->heap_r, *p = &s->pool_r;
    az_sym_t *sym = NULL;
    if (!(o && o->no_symbols)) {
        sym = az_sym_open(s->r);
    }
    az_json_t j;
    az_json_init(&j, out, 1);
    az_json_begin(&j, NULL, '{');
    az_json_str(&j, "trace", s->path);
    az_json_u64(&j, "events", s->events_counted);
    az_json_u64(&j, "events_total", s->events);
    az_json_begin(&j, "calls", '{');
    for (int i = 0; i < AZ_F_COUNT; i++) az_json_u64(&j, az_func_names[i], s->calls[i]);
    az_json_end(&j);
    az_json_u64(&j, "peak_live_bytes", h->peak_live_bytes);
    az_json_u64(&j, "peak_live_t_ns", h->peak_live_t - s->t_first);
    az_json_u64(&j, "peak_live_tick_min_bytes", s->peak_tick_lo);
    az_json_u64(&j, "peak_live_tick_max_bytes", s->peak_tick_hi);
    az_json_u64(&j, "peak_selection_live_bytes", h->peak_window_live_bytes);
    az_json_u64(&j, "peak_rss_bytes", s->peak_rss);
    az_json_u64(&j, "peak_mmap_anon_bytes", s->peak_mmap_anon);
    az_json_u64(&j, "peak_mmap_file_bytes", s->peak_mmap_file);
    az_json_u64(&j, "peak_mmap_committed_bytes", s->peak_mmap_committed);
    az_json_u64(&j, "peak_mmap_reserved_bytes", s->peak_mmap_reserved);
    az_json_u64(&j, "peak_pymalloc_arena_bytes", s->peak_arena);
    az_json_u64(&j, "total_allocated_bytes", h->total_allocated_bytes);
    az_json_u64(&j, "allocations", h->allocs);
    az_json_u64(&j, "temporary_allocations", h->temporary);
    az_json_u64(&j, "leaked_bytes", h->leaked_bytes);
    az_json_u64(&j, "leaked_objects", h->leaked_count);
    {   /* leaks suppressed (suppress.h): apart, with what took them */
        const az_supp_res_t *sr = s->supp;
        az_json_u64(&j, "suppressed_leaked_bytes", sr ? sr->bytes : 0);
        az_json_u64(&j, "suppressed_leaked_objects", sr ? sr->objects : 0);
        az_json_begin(&j, "suppressions", '[');
        for (size_t i = 0; sr && i < sr->n; i++) {
            az_json_begin(&j, NULL, '{');
            az_json_str(&j, "pattern", sr->hits[i].pattern);
            az_json_str(&j, "source", sr->hits[i].source);
            if (sr->hits[i].why) az_json_str(&j, "reason", sr->hits[i].why);
            az_json_u64(&j, "objects", sr->hits[i].objects);
            az_json_u64(&j, "bytes", sr->hits[i].bytes);
            az_json_end(&j);
        }
        az_json_end(&j);
    }
    az_json_u64(&j, "lost_events", s->lost);
    az_json_f64(&j, "internal_frag", h->internal_frag);
    az_json_f64(&j, "internal_frag_avg", h->internal_frag_avg);
    az_json_u64(&j, "duration_ns", s->t_last - s->t_first);
    az_json_u64(&j, "threads", s->threads);
    /* an attach window: frees of blocks from before it are no anomaly */
    int att = s->hdr && s->hdr->attach;
    az_json_bool(&j, "attach", att);
    az_json_u64(&j, "unknown_frees", att ? 0 : h->unmatched_frees);
    az_json_u64(&j, "freed_before_attach", att ? h->unmatched_frees : 0);
    az_json_u64(&j, "implausible_allocations", h->implausible_allocs);
    az_json_u64(&j, "tracer_bytes", s->tracer_bytes);
    az_json_u64(&j, "time_resolution_ns", s->resolution_ns);
    az_json_bool(&j, "killed", s->status && s->status->end_killed);
    az_json_bool(&j, "complete", s->status && s->status->complete);
    /* leaked_* are what is live at the end: at the stop, or now */
    az_json_bool(&j, "stopped", s->status && s->status->end_stopped);
    az_json_bool(&j, "being_written", s->writing_pid != 0);
    az_scan_program_json(s, &j);

    az_json_begin(&j, "pool", '{');
    az_json_u64(&j, "acquires", p->acquires);
    az_json_u64(&j, "hits", p->hits);
    az_json_u64(&j, "misses", p->misses);
    if (p->acquires) az_json_f64(&j, "hit_rate", p->hit_rate); else az_json_null(&j, "hit_rate");
    az_json_u64(&j, "backing_allocs", p->backing_allocs);
    az_json_u64(&j, "peak_cached_bytes", p->peak_cached_bytes);
    az_json_u64(&j, "peak_outstanding_bytes", p->peak_outstanding_bytes);
    az_json_u64(&j, "peak_reserved_bytes", p->peak_reserved_bytes);
    az_json_u64(&j, "peak_live_bytes", p->peak_live_bytes);
    az_json_f64(&j, "internal_frag", p->internal_frag);
    az_json_f64(&j, "internal_frag_avg", p->internal_frag_avg);
    az_json_f64(&j, "same_address_reuse", p->same_address_reuse);
    {
        uint64_t rq = 0, gr = 0, big = 0;
        for (size_t i = 0; i < s->n_pools; i++)
            if (!s->pools[i].kv) { rq += s->pools[i].req_bytes; gr += s->pools[i].granted_bytes; big += s->pools[i].oversized; }
        az_json_u64(&j, "requested_bytes", rq);
        az_json_u64(&j, "granted_bytes", gr);
        az_json_u64(&j, "oversized_acquires", big);
    }
    az_json_end(&j);

    az_json_begin(&j, "reuse", '{');
    az_json_f64(&j, "same_address_reuse", h->same_address_reuse);
    az_json_f64(&j, "fresh_address_ratio", h->fresh_address_ratio);
    az_json_u64(&j, "distance_p50", h->distance_p50);
    az_json_u64(&j, "distance_p90", h->distance_p90);
    az_json_u64(&j, "distance_max", h->distance_max);
    az_json_u64(&j, "samples", h->reuse_samples);
    az_json_bool(&j, "capped", h->reuse_capped);
    az_json_begin(&j, "distance_log2_hist", '[');
    int hi = 0;
    for (int i = 0; i < AZ_HIST_BUCKETS; i++) if (h->distance_hist[i]) hi = i;
    for (int i = 0; i <= hi; i++) az_json_u64(&j, NULL, h->distance_hist[i]);
    az_json_end(&j);
    az_json_end(&j);

    az_json_begin(&j, "kv", '{');
    az_result_kv_json(h, &j);
    az_json_end(&j);

    az_json_begin(&j, "phases", '{');
    for (size_t i = 0; i < h->n_phases; i++) {
        az_json_begin(&j, h->phases[i].name, '{');
        az_json_u64(&j, "count", h->phases[i].count);
        if (h->phases[i].spans) {
            az_json_u64(&j, "heap_calls", h->phases[i].heap_calls);
            az_json_u64(&j, "heap_bytes", h->phases[i].heap_bytes);
            az_json_u64(&j, "time_ns", h->phases[i].time_ns);
        } else {                         /* a point marker: no extent */
            az_json_null(&j, "heap_calls");
            az_json_null(&j, "heap_bytes");
            az_json_null(&j, "time_ns");
        }
        az_json_end(&j);
    }
    az_json_end(&j);
    az_result_steps_json(h, &j);
    az_pf_notes_json(s, &j);

    az_json_begin(&j, "size_log2_hist", '[');
    hi = 0;
    for (int i = 0; i < AZ_HIST_BUCKETS; i++) if (h->size_hist[i]) hi = i;
    for (int i = 0; i <= hi; i++) az_json_u64(&j, NULL, h->size_hist[i]);
    az_json_end(&j);
    az_sv_t *v = az_sv_create(s, sym, o ? &o->sites : NULL);
    az_json_begin(&j, "sites", '{');
    sites_json(&j, "by_peak", v, AZ_SV_HEAP, by_peak, top);
    sites_json(&j, "by_calls", v, AZ_SV_HEAP, by_calls, top);
    sites_json(&j, "by_bytes", v, AZ_SV_HEAP, by_bytes, top);
    sites_json(&j, "leaks", v, AZ_SV_HEAP, by_live, top);
    /* the other kinds by bytes, each under its own key (REPORT.md, "Sites") */
    static const char *const kind_keys[AZ_SV_KINDS] = { NULL, "pool_acquires", "kv_blocks", "mmap_anon", "mmap_file" };
    for (int k = AZ_SV_POOL; k < AZ_SV_KINDS; k++) sites_json(&j, kind_keys[k], v, k, by_bytes, top);
    az_json_end(&j);
    az_sv_destroy(v);
    az_json_begin(&j, "symbol_notes", '[');
    for (size_t i = 0; az_sym_note(sym, i); i++) az_json_str(&j, NULL, az_sym_note(sym, i));
    az_json_end(&j);
    az_json_end(&j);
    az_sym_destroy(sym);
}

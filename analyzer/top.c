/* top.c — one frame of `poolscope top` (see top.h).
 *
 * Nothing here computes a figure of its own: the numbers are the scan's
 * (now, peaks), the metrics' (live set, phases) and the site view's rows,
 * as `report` prints them; this file chooses which fit in a terminal and
 * draws the last minute of the scan's timeline as min .. max and a trend.
 */
#include "top.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "fmt.h"

#define WINDOW_NS (60ull * 1000000000ull)   /* "the last minute" */
#define SPARK 16                             /* trend cells: 3.75 s each over a minute */

/* One series of the timeline: which field of a bucket. */
enum { SER_HEAP, SER_RSS, SER_MMAP, SER_POOL, SER_KV, SER_N };

static uint64_t field(const az_tl_bucket_t *b, int ser)
{
    switch (ser) {
    case SER_HEAP: return b->heap;
    case SER_RSS: return b->rss;
    case SER_MMAP: return b->mmap_anon + b->mmap_file;   /* committed: reservations are apart */
    case SER_POOL: return b->pool_out;
    default: return b->kv_blocks;
    }
}

/* The last minute of one series: min and max of the buckets that overlap
 * it, and per trend cell the largest bucket in it (0 cells stay blank). */
static void last_minute(const az_scan_t *s, int ser, uint64_t *mn, uint64_t *mx, char spark[SPARK + 1])
{
    uint64_t from = s->t_last > s->t_first + WINDOW_NS ? s->t_last - WINDOW_NS : s->t_first;
    uint64_t cell[SPARK];
    int have[SPARK] = { 0 };
    *mn = UINT64_MAX;
    *mx = 0;
    uint64_t span = s->t_last > from ? s->t_last - from : 1;
    for (size_t i = 0; i < s->tl_used; i++) {
        const az_tl_bucket_t *b = &s->tl[i];
        uint64_t t0 = s->tl_t0 + ((uint64_t)i << s->tl_shift), t1 = t0 + (1ull << s->tl_shift);
        if (!b->set || t1 <= from || t0 > s->t_last) continue;
        uint64_t v = field(b, ser);
        if (ser == SER_RSS && v == 0) continue;   /* before the first sample: no reading, not 0 B */
        if (v < *mn) *mn = v;
        if (v > *mx) *mx = v;
        uint64_t mid = t0 < from ? from : t0;
        size_t c = (size_t)((mid - from) * SPARK / span);
        if (c >= SPARK) c = SPARK - 1;
        if (!have[c] || v > cell[c]) cell[c] = v;
        have[c] = 1;
    }
    if (*mn == UINT64_MAX) *mn = 0;
    static const char lv[] = "_.-=+*#";   /* ASCII: any terminal, any capture */
    for (int c = 0; c < SPARK; c++) {
        if (!have[c]) { spark[c] = ' '; continue; }
        size_t k = *mx > *mn ? (size_t)((cell[c] - *mn) * (sizeof lv - 2) / (*mx - *mn)) : 0;
        spark[c] = lv[k];
    }
    spark[SPARK] = 0;
}

static const char *val(int ser, uint64_t v, char *b, size_t n)
{
    if (ser == SER_KV) { snprintf(b, n, "%" PRIu64, v); return b; }
    return psc_fmt_bytes(v, b, n);
}

/* Descending live bytes, ties by label: report's order for its leaks table. */
static int by_live(const void *a, const void *b)
{
    const az_dsite_t *x = a, *y = b;
    if (x->live_bytes != y->live_bytes) return x->live_bytes < y->live_bytes ? 1 : -1;
    return strcmp(x->label, y->label);
}

/* A line cut to the frame's width (escape.h: names from the trace never
 * reach the terminal as control bytes), ending in "..." where it was cut:
 * a single '>' there read as a template's closing bracket. */
static void put_cut(FILE *out, const char *text, unsigned cols)
{
    char b[2048];
    psc_esc_text(text, b, sizeof b);
    size_t n = strlen(b);
    if (n > cols) {
        n = cols;
        while (n && (b[n] & 0xc0) == 0x80) n--;   /* not inside a UTF-8 sequence */
        if (n > 3) {
            n -= 3;
            while (n && (b[n] & 0xc0) == 0x80) n--;
            memcpy(b + n, "...", 3);
            n += 3;
        }
    }
    fwrite(b, 1, n, out);
    fputc('\n', out);
}

void az_top_frame(const az_scan_t *s, const az_top_opts_t *o, FILE *out)
{
    unsigned cols = o && o->cols >= 40 ? o->cols : 80, rows = o && o->rows >= 12 ? o->rows : 24;
    if (cols > 1000) cols = 1000;
    const az_result_t *h = &s->heap_r;
    const az_state_t *st = az_state(s->heap);
    char line[2200], a[48], b[48], c[48], d[48];
    unsigned used = 0;

    snprintf(line, sizeof line, "poolscope top: %s", s->path);
    put_cut(out, line, cols), used++;
    const char *state = s->writing_pid ? "still being written"
                      : s->status && s->status->end_stopped ? "recording stopped"
                      : s->status && s->status->complete ? "finished" : "cut short";
    snprintf(line, sizeof line, "  %s (pid %" PRIu64 "): %s", s->hdr->exe && s->hdr->exe[0] ? s->hdr->exe : "?",
             s->hdr->pid, state);
    put_cut(out, line, cols), used++;
    char iv[32] = "once";
    if (o && o->interval_s > 0) snprintf(iv, sizeof iv, "every %g s, q quits", o->interval_s);
    snprintf(line, sizeof line, "  at %s: %s events, %" PRIu64 " thread%s, lost %s  (%s)",
             psc_fmt_ns(s->t_last - s->t_first, a, sizeof a), psc_fmt_count(s->events, b, sizeof b), s->threads,
             s->threads == 1 ? "" : "s", psc_fmt_count(s->lost, c, sizeof c), iv);
    put_cut(out, line, cols), used++;

    /* the series: now, peak over the run, the last minute */
    uint64_t span = s->t_last - s->t_first;
    snprintf(line, sizeof line, "  %-11s %10s %10s  last %s: min .. max, trend", "", "now", "peak",
             span < WINDOW_NS ? psc_fmt_ns(span, a, sizeof a) : "minute");
    put_cut(out, line, cols), used++;
    static const char *const names[SER_N] = { "heap live", "RSS", "mmap", "pool out", "KV blocks" };
    uint64_t now[SER_N] = { h->leaked_bytes, s->rss, s->mmap_anon + s->mmap_file - (s->mmap_reserved < s->mmap_anon ? s->mmap_reserved : s->mmap_anon),
                            s->pool_out, st ? st->kv_blocks : 0 };
    uint64_t peak[SER_N] = { h->peak_live_bytes, s->peak_rss, s->peak_mmap_committed, s->pool_r.peak_outstanding_bytes,
                             h->peak_kv_blocks };
    for (int i = 0; i < SER_N; i++) {
        uint64_t mn, mx;
        char spark[SPARK + 1];
        last_minute(s, i, &mn, &mx, spark);
        snprintf(line, sizeof line, "  %-11s %10s %10s  %9s .. %-9s %s", names[i], val(i, now[i], a, sizeof a),
                 val(i, peak[i], b, sizeof b), val(i, mn, c, sizeof c), val(i, mx, d, sizeof d), spark);
        put_cut(out, line, cols), used++;
    }
    /* exact, for scripts and for comparing with report --json */
    snprintf(line, sizeof line, "  heap live %s B in %s objects; peak %s B", psc_fmt_count(h->leaked_bytes, a, sizeof a),
             psc_fmt_count(h->leaked_count, b, sizeof b), psc_fmt_count(h->peak_live_bytes, c, sizeof c));
    put_cut(out, line, cols), used++;

    /* phases: counts and rates over the trace's time */
    unsigned nph = 0;
    for (size_t i = 0; i < h->n_phases; i++) nph += h->phases[i].count > 0;
    if (nph) {
        double secs = span ? (double)span / 1e9 : 0;
        snprintf(line, sizeof line, "  %-16s %10s %9s %12s %10s", "phase", "count", "per s", "heap calls", "calls/each");
        put_cut(out, line, cols), used++;
        unsigned shown = 0;
        for (size_t i = 0; i < h->n_phases && shown < 4; i++) {
            const az_phase_t *x = &h->phases[i];
            if (!x->count) continue;
            char r[32];
            snprintf(r, sizeof r, "%.1f", secs > 0 ? (double)x->count / secs : 0.0);
            if (x->spans)
                snprintf(line, sizeof line, "  %-16s %10s %9s %12s %10.1f", x->name, psc_fmt_count(x->count, a, sizeof a),
                         r, psc_fmt_count(x->heap_calls, b, sizeof b), (double)x->heap_calls / (double)x->count);
            else
                snprintf(line, sizeof line, "  %-16s %10s %9s %12s %10s", x->name, psc_fmt_count(x->count, a, sizeof a),
                         r, "-", "(points)");
            put_cut(out, line, cols), used++;
            shown++;
        }
        if (nph > shown) {
            snprintf(line, sizeof line, "  (%u more phases: poolscope report)", nph - shown);
            put_cut(out, line, cols), used++;
        }
    }

    /* the sites holding the most now, as report names them */
    az_sym_t *sym = o && o->no_symbols ? NULL : az_sym_open(s->r);
    az_sv_t *v = az_sv_create(s, sym, o ? &o->sites : NULL);
    size_t n = 0;
    const az_dsite_t *src = v ? az_sv_sites(v, &n) : NULL;
    az_dsite_t *rowsv = n ? malloc(n * sizeof *rowsv) : NULL;
    if (rowsv) {
        memcpy(rowsv, src, n * sizeof *rowsv);
        qsort(rowsv, n, sizeof *rowsv, by_live);
    } else {
        n = 0;
    }
    put_cut(out, "", cols), used++;
    snprintf(line, sizeof line, "  %14s %9s  %s", "live B", "objects", "top sites by live bytes");
    put_cut(out, line, cols), used++;
    unsigned room = rows > used ? rows - used : 0, shown = 0;
    for (size_t i = 0; i < n && shown < room; i++) {
        if (!rowsv[i].live_bytes) break;
        int k = snprintf(line, sizeof line, "  %14s %9s  %s", psc_fmt_count(rowsv[i].live_bytes, a, sizeof a),
                         psc_fmt_count(rowsv[i].live_count, b, sizeof b), rowsv[i].label);
        if (rowsv[i].via && k > 0 && (size_t)k < sizeof line)
            snprintf(line + k, sizeof line - (size_t)k, " via %s", rowsv[i].via);
        put_cut(out, line, cols);
        shown++;
    }
    if (!shown && room) put_cut(out, "  (nothing live)", cols);
    free(rowsv);
    az_sv_destroy(v);
    az_sym_destroy(sym);
}

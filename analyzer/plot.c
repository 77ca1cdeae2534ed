/* plot.c — data files and gnuplot scripts for a trace (see plot.h).
 *
 * One scan with a 1000-bucket timeline (maxima per bucket, so no peak is
 * lost however long the trace) and the marker events kept (at most
 * MAX_MARKS). Each figure is one script run twice, once per terminal
 * (pngcairo, svg), through fork/exec of gnuplot. Memory axes are in one
 * binary unit chosen from the largest value, times in seconds since the
 * trace started.
 *
 * Figures with two panels (memory and its marker lane, heap and pool
 * histograms, the two policy groups) are gnuplot multiplots. Panels that
 * share an axis get their left and right margins at fixed screen positions:
 * gnuplot sizes each panel's margins from its own tic labels otherwise, and
 * the time or bucket axes would not line up.
 *
 * Strings from the trace or the replay file (program path, marker, phase,
 * stream and policy names) are untrusted: made text first (control bytes
 * and non-UTF-8 as \xNN, common/escape.h), then written as escaped gnuplot
 * strings (a backquote, which gnuplot would run as a shell command even
 * inside double quotes, and '@', a macro, as octal escapes) with enhanced
 * text off, so a name with a quote, a backslash, a backquote or an '_'
 * draws as it is and runs nothing.
 */
#include "plot.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "escape.h"
#include "json.h"
#include "marks.h"
#include "outfile.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"

#define MAX_MARKS 200000
#define MAX_LANES 8              /* marker names drawn; more would squeeze the rows */
#define MIB (1024.0 * 1024.0)

/* What every figure writer needs: where to write, what to report back. */
typedef struct plot_ctx {
    const char *dir;             /* the temporary directory */
    az_plot_out_t *out;
    char *msg;
    size_t msglen;
    char path[1024];             /* of the file open now (one at a time) */
    char sel[160];               /* the selection, "" for the whole run */
    int phase;                   /* 1: --phase given (timelines are whole-run) */
} plot_ctx_t;

static void note(plot_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(plot_ctx_t *c, const char *fmt, ...)
{
    size_t k = strlen(c->out->notes), cap = sizeof c->out->notes;
    if (k + 2 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(c->out->notes + k, cap - k - 1, fmt, ap);
    va_end(ap);
    if (w < 0) { c->out->notes[k] = 0; return; }
    k = strlen(c->out->notes);
    c->out->notes[k] = '\n';
    c->out->notes[k + 1] = 0;
}

static FILE *fig_open(plot_ctx_t *c, const char *name)
{
    FILE *f = NULL;
    if ((size_t)snprintf(c->path, sizeof c->path, "%s/%s", c->dir, name) < sizeof c->path)
        f = fopen(c->path, "w");
    if (!f) snprintf(c->msg, c->msglen, "cannot write %s: %s", c->path, strerror(errno));
    return f;
}

/* Close a data file or script: 0, or PSC_EIO with msg when any write to it
 * failed (a full disk). */
static int fig_close(plot_ctx_t *c, FILE *f)
{
    errno = 0;
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad) snprintf(c->msg, c->msglen, "cannot write %s: %s", c->path, errno ? strerror(errno) : "write error");
    return bad ? PSC_EIO : 0;
}

/* s as a gnuplot string in a script (common/escape.h): double-quoted, with
 * '`' and '@' as octal escapes, so gnuplot's command substitution and
 * macro expansion never see one; our own newlines (titles) stay line
 * breaks. Trace-derived parts are made text (psc_esc_text) before they go
 * into a string given here, so no byte of a trace can be read as gnuplot
 * syntax or reach the images as a control character. */
static void gp_str(FILE *f, const char *s)
{
    psc_esc_gp(f, s);
}

/* Run gnuplot on dir/name.gp for both terminals at w x h pixels; 0 when
 * both images exist. gnuplot runs in the temporary directory and `set
 * output` names only our own file names: the user's directory never goes
 * into gnuplot's input. */
static int run_gnuplot(plot_ctx_t *c, const char *name, int w, int h)
{
    static const char *const terms[2][3] = {   /* terminal, what follows its size, extension */
        { "pngcairo", "", "png" },
        { "svg", " background rgb 'white'", "svg" },
    };
    for (int i = 0; i < 2; i++) {
        char setup[512], gp[256];
        snprintf(setup, sizeof setup, "set terminal %s size %d,%d enhanced font 'DejaVu Sans,11'%s; set output '%s.%s'",
                 terms[i][0], w, h, terms[i][1], name, terms[i][2]);
        snprintf(gp, sizeof gp, "%s.gp", name);
        pid_t pid = fork();
        if (pid < 0) { snprintf(c->msg, c->msglen, "fork failed"); return PSC_EIO; }
        if (pid == 0) {
            if (chdir(c->dir) != 0) _exit(126);
            execlp("gnuplot", "gnuplot", "-e", setup, gp, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            snprintf(c->msg, c->msglen, WIFEXITED(st) && WEXITSTATUS(st) == 127 ?
                     "gnuplot not found (install gnuplot-nox)" : "gnuplot failed on %s/%s", c->dir, gp);
            return PSC_EIO;
        }
        char img[300];
        snprintf(img, sizeof img, "%s.%s\n", name, terms[i][2]);   /* az_plot prefixes the directory */
        if (strlen(c->out->made) + strlen(img) < sizeof c->out->made) strcat(c->out->made, img);
    }
    return 0;
}

static const char *const style =
    "set border lw 1.2\nset grid lc rgb '#dddddd' lw 1\n"
    "set style line 1 lc rgb '#1f77b4' lw 2.2\nset style line 2 lc rgb '#ff7f0e' lw 2\n"
    "set style line 3 lc rgb '#2ca02c' lw 2\nset style line 4 lc rgb '#d62728' lw 2.2\n"
    "set style line 5 lc rgb '#9467bd' lw 2\nset style line 6 lc rgb '#8c564b' lw 2\n";

/* The unit of a memory axis whose largest value is top. */
static double mem_unit(double top, const char **name)
{
    if (top >= 2 * 1073741824.0) { *name = "GiB"; return 1073741824.0; }
    if (top >= 2 * MIB) { *name = "MiB"; return MIB; }
    *name = "KiB";
    return 1024.0;
}

/* The title over a figure, as a multiplot title: gnuplot draws a plot's
 * key (outside, on top) above the plot's own title, a multiplot title stays
 * above everything. Returns its height as a fraction of a page of h
 * pixels, for the panels to leave free. */
static double page_title(FILE *f, const char *title, int h)
{
    int lines = 1;
    for (const char *p = title; *p; p++) lines += *p == '\n';
    fputs("set multiplot title ", f);
    gp_str(f, title);
    fputs(" font ',14' noenhanced\n", f);
    return (lines * 22.0 + 16.0) / h;
}

/* ---- memory over time, with the marker lane ------------------------------ */

typedef struct item {            /* what the lane draws: a scope [t0, t1] or a point (t0) */
    uint64_t t0, t1;
    uint32_t name;
    uint8_t point;
} item_t;

typedef struct lane {
    uint32_t name;
    uint64_t first, scopes, points;
    size_t from, n;              /* its items: items[from .. from + n) */
} lane_t;

static int item_cmp(const void *a, const void *b)
{
    const item_t *x = a, *y = b;
    if (x->point != y->point) return x->point < y->point ? -1 : 1;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    return 0;
}

static int lane_cmp(const void *a, const void *b)
{
    const lane_t *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* The marker lane: scopes paired by (name, instance) as marks.h says,
 * everything clipped to [lo, hi] (trace times). Items of one name
 * closer than eps ns are merged, and a scope is at least eps wide, so a
 * long run makes at most about (hi - lo) / eps marks per row however many
 * events it has, and no scope is too thin to see. Writes markers.dat
 * ("t_start_s t_end_s row kind", kind 1 scope, 0 point) and fills lanes
 * (at most MAX_LANES, by first appearance). Returns the rows, or -1 out of
 * memory. */
static int marker_lanes(const az_scan_t *s, uint64_t lo, uint64_t hi, uint64_t eps,
                        lane_t *lanes, size_t *hidden, FILE *f)
{
    *hidden = 0;
    if (!s->n_markers) return 0;
    az_mark_span_t *sp;
    long n = az_marks_pair(s, &sp);
    if (n < 0) return -1;
    item_t *it = malloc(s->n_markers * sizeof *it);        /* no more than one span per event */
    lane_t *all = malloc(s->n_markers * sizeof *all);
    if (!it || !all) { free(sp); free(it); free(all); return -1; }
    size_t ni = 0;
    uint64_t end = s->t_last > hi ? hi : s->t_last;
    for (long k = 0; k < n; k++) {
        uint64_t a = sp[k].t0, b = sp[k].t1;
        uint64_t a_ = a < lo ? lo : a, b_ = b > end ? end : b;
        if (b >= lo && a <= hi && a_ <= b_) it[ni++] = (item_t){ a_, b_, sp[k].name, sp[k].point };
    }
    free(sp);
    /* items of a name are contiguous (the spans come grouped by name) */
    size_t nl = 0;
    for (size_t i = 0; i < ni;) {
        lane_t l = { it[i].name, UINT64_MAX, 0, 0, i, 0 };
        for (; i < ni && it[i].name == l.name; i++, l.n++) {
            if (it[i].t0 < l.first) l.first = it[i].t0;
            if (it[i].point) l.points++; else l.scopes++;
        }
        all[nl++] = l;
    }
    qsort(all, nl, sizeof *all, lane_cmp);
    size_t rows = nl < MAX_LANES ? nl : MAX_LANES;
    *hidden = nl - rows;
    fprintf(f, "# t_start_s t_end_s row kind (1 scope begin..end, 0 point); merged below %.9f s\n", (double)eps / 1e9);
    for (size_t r = 0; r < rows; r++) {
        lanes[r] = all[r];
        item_t *x = it + all[r].from;
        qsort(x, all[r].n, sizeof *x, item_cmp);     /* scopes, then points, each by time */
        for (size_t i = 0; i < all[r].n;) {
            uint64_t a = x[i].t0, b = x[i].t1;
            uint8_t pt = x[i].point;
            for (i++; i < all[r].n && x[i].point == pt && x[i].t0 <= b + eps; i++)
                if (x[i].t1 > b) b = x[i].t1;
            if (!pt && b - a < eps) b = a + eps;
            fprintf(f, "%.9f %.9f %zu %d\n", (double)a / 1e9, (double)b / 1e9,
                    r, pt ? 0 : 1);
        }
    }
    free(it); free(all);
    return (int)rows;
}

/* timeline.dat, markers.dat, memory.gp. *x0, *x1: the time axis (s). */
static int memory_figure(plot_ctx_t *c, const az_scan_t *s, const char *trace, double *x0, double *x1)
{
    FILE *f = fig_open(c, "timeline.dat");
    if (!f) return PSC_EIO;
    int has_pool = s->pool_r.acquires > 0, has_mmap = s->peak_mmap_total > 0, has_rss = s->rss_samples > 0;
    uint64_t top = 0;
    for (size_t i = 0; i < s->tl_used; i++) {
        const az_tl_bucket_t *b = &s->tl[i];
        uint64_t v[] = { b->heap, b->mmap_anon, b->mmap_file, b->rss, b->pool_reserved };
        for (size_t k = 0; k < 5; k++) if (v[k] > top) top = v[k];
    }
    const char *uname;
    double unit = mem_unit((double)top, &uname);
    fprintf(f, "# memory columns in %s\n", uname);
    fprintf(f, "# t_s heap mmap_anon mmap_file rss pool_out pool_reserved kv_blocks kv_util_pct\n");
    uint64_t w = 1ull << s->tl_shift;
    for (size_t i = 0; i < s->tl_used; i++) {
        const az_tl_bucket_t *b = &s->tl[i];
        double t = (double)(s->tl_t0 + (uint64_t)i * w + w / 2) / 1e9;   /* since trace start, as --from */
        fprintf(f, "%.9f %.4f %.4f %.4f %.4f %.4f %.4f %" PRIu64 " %.2f\n", t, b->heap / unit,
                b->mmap_anon / unit, b->mmap_file / unit, b->rss / unit, b->pool_out / unit,
                b->pool_reserved / unit, b->kv_blocks,
                b->kv_capacity ? 100.0 * (double)b->kv_tokens / (double)b->kv_capacity : 0.0);
    }
    if (!s->tl_used) fputs("0 0 0 0 0 0 0 0 0\n", f);   /* gnuplot refuses a file without data */
    if (fig_close(c, f)) return PSC_EIO;

    /* the time axis: what the timeline covers (the window only with --from/--to) */
    uint64_t lo = s->tl_t0 < s->t_first ? s->t_first : s->tl_t0;
    uint64_t hi = s->tl_t0 + (uint64_t)s->tl_used * w;
    if (hi > s->t_last) hi = s->t_last;
    if (s->window && hi > s->to) hi = s->to;
    if (hi <= lo) hi = lo + 1000;
    *x0 = (double)lo / 1e9;
    *x1 = (double)hi / 1e9;

    lane_t lanes[MAX_LANES];
    size_t hidden = 0;
    if (!(f = fig_open(c, "markers.dat"))) return PSC_EIO;
    int rows = marker_lanes(s, lo, hi, (hi - lo) / 1000 + 1, lanes, &hidden, f);
    if (fig_close(c, f)) return PSC_EIO;
    if (rows < 0) { snprintf(c->msg, c->msglen, "out of memory"); return PSC_ENOMEM; }
    if (hidden) note(c, "memory: %zu more marker names not drawn (the first %d by time are)", hidden, MAX_LANES);
    if (s->markers_dropped)
        note(c, "memory: markers after the first %d not drawn (%zu left out)", MAX_MARKS, s->markers_dropped);
    if (!rows && s->n_markers && s->window) note(c, "memory: no marker in the --from/--to window");

    if (!(f = fig_open(c, "memory.gp"))) return PSC_EIO;
    fprintf(f, "# memory over time%s — generated by poolscope plot\n%s", rows ? ", marker lane below" : "", style);
    char title[1400];
    char exe[600];
    psc_esc_text(s->hdr->exe && s->hdr->exe[0] ? s->hdr->exe : trace, exe, sizeof exe);
    if (c->phase)
        snprintf(title, sizeof title, "Memory over time — %s\nwhole run: a phase is not one span of time"
                 " (%s selects the histograms and the CDF)", exe, c->sel);
    else
        snprintf(title, sizeof title, "Memory over time — %s%s%s", exe, c->sel[0] ? "\n" : "", c->sel);
    int lines = 1;
    for (const char *q = title; *q; q++) lines += *q == '\n';
    int lane_px = rows ? 80 + 26 * rows : 0, height = 540 + 22 * lines + lane_px;
    double lane = (double)lane_px / height, head = page_title(f, title, height);
    /* with markers two panels, one time axis: the memory curves on top, the
     * marker lane under them, never drawn over the curves */
    /* the left margin holds the lane's labels ("forward (1,320)") */
    fprintf(f, "set lmargin at screen %.2f\nset rmargin at screen 0.97\nset xrange [%.9f:%.9f]\n"
               "set ylabel '%s'\nset yrange [0:*]\nset offsets 0, 0, graph 0.04, 0\n"
               "set key outside top center horizontal box opaque\nset origin 0,%.4f\nset size 1,%.4f\n",
            rows ? 0.14 : 0.09, *x0, *x1, uname, lane, 1 - lane - head);
    if (rows) fputs("set bmargin 1\nset format x ''\nunset xlabel\n", f);
    else fputs("set xlabel 'time since trace start (s)'\n", f);
    fputs("plot 'timeline.dat' using 1:2 with lines ls 1 title 'heap live (requested bytes)'", f);
    if (has_mmap) fputs(", \\\n     '' using 1:3 with lines ls 2 title 'mmap anonymous (committed)', \\\n"
                        "     '' using 1:4 with lines ls 3 title 'mmap file-backed'", f);
    if (has_rss) fputs(", \\\n     '' using 1:5 with lines ls 4 title 'RSS'", f);
    if (has_pool) fputs(", \\\n     '' using 1:6 with lines ls 5 dt 2 title 'pool outstanding', \\\n"
                        "     '' using 1:7 with lines ls 6 dt 3 title 'pool reserved (outstanding + cached)'", f);
    fputc('\n', f);
    if (rows) {
        int scopes = 0, points = 0;
        fputs("\n# the marker lane: one row per marker name\nset origin 0,0\n", f);
        fprintf(f, "set size 1,%.4f\nset tmargin 1.4\nset bmargin 3.2\nset format x '%%g'\n"
                   "set xlabel 'time since trace start (s)'\nset yrange [%.1f:-0.6]\nset offsets 0, 0, 0, 0\n"
                   "set ylabel ''\nset grid noytics\nset key off\nset ytics (", lane, rows - 0.4);
        for (int r = 0; r < rows; r++) {
            char lab[160], cnt[32];
            const lane_t *l = &lanes[r];
            if (l->scopes) scopes = 1;
            if (l->points) points = 1;
            char nm[120];
            snprintf(lab, sizeof lab, "%s (%s)", psc_esc_text(az_scan_string(s, l->name), nm, sizeof nm),
                     psc_fmt_count(l->scopes + l->points, cnt, sizeof cnt));
            if (r) fputs(", ", f);
            gp_str(f, lab);
            fprintf(f, " %d", r);
        }
        fputs(") noenhanced font ',9'\n", f);
        fprintf(f, "set label 1 '%s' at graph 1, graph 1 right offset 0,0.7 font ',9' tc rgb '#555555'\n",
                scopes && points ? "markers: bars = scopes (begin..end), ticks = points" :
                scopes ? "markers: bars = scopes (begin..end)" : "markers: ticks = points");
        fputs("plot 'markers.dat' using ($4 == 1 ? ($1 + $2) / 2 : 1/0):3:(($2 - $1) / 2):(0.3) "
              "with boxxyerror fs solid 0.75 noborder lc rgb '#4c72b0' notitle, \\\n"
              "     '' using ($4 == 0 ? $1 : 1/0):($3 - 0.35):(0):(0.7) with vectors nohead lw 1.5 lc rgb '#333333' notitle\n", f);
    }
    fputs("unset multiplot\n", f);
    if (fig_close(c, f)) return PSC_EIO;
    return run_gnuplot(c, "memory", 1100, height);
}

/* ---- histograms: a heap panel and a pool-acquire panel --------------------- */

typedef struct series {
    const char *label;           /* panel title, with its count */
    const uint64_t *h;           /* log2 histogram */
    uint64_t n;                  /* its sum */
    const char *color, *ylabel;
    const char *none;            /* said when the series is empty: "no pool acquires" */
} series_t;

static uint64_t hist_sum(const uint64_t *h)
{
    uint64_t t = 0;
    for (int i = 0; i < AZ_HIST_BUCKETS; i++) t += h[i];
    return t;
}

/* NAME.dat: "lower_bound heap_count heap_percent pool_count pool_percent
 * label" (the label last: it has a blank, "1.00 KiB") over the buckets from the lowest to the highest with data
 * in either series (the panels share that axis); NAME.gp: a panel per
 * series with data (the heap one when neither has any). */
static int hist_figure(plot_ctx_t *c, const char *name, const char *title, const char *xlabel,
                       int bytes, const series_t ser[2])
{
    char fname[128];
    snprintf(fname, sizeof fname, "%s.dat", name);
    FILE *f = fig_open(c, fname);
    if (!f) return PSC_EIO;
    int lo = -1, hi = -1;
    double maxp[2] = { 0, 0 };
    for (int i = 0; i < AZ_HIST_BUCKETS; i++)
        if (ser[0].h[i] || ser[1].h[i]) { if (lo < 0) lo = i; hi = i; }
    if (lo < 0) lo = hi = 0;
    fprintf(f, "# bucket_lower_bound heap_count heap_percent pool_count pool_percent label\n"
               "# heap: %s; pool: %s\n", ser[0].label, ser[1].label);
    for (int i = lo; i <= hi; i++) {
        char lab[32];
        uint64_t from = i ? 1ull << (i - 1) : 0;
        if (bytes) psc_fmt_bytes(from, lab, sizeof lab); else psc_fmt_ns(from, lab, sizeof lab);
        double p[2];
        for (int k = 0; k < 2; k++) {
            p[k] = ser[k].n ? 100.0 * (double)ser[k].h[i] / (double)ser[k].n : 0.0;
            if (p[k] > maxp[k]) maxp[k] = p[k];
        }
        fprintf(f, "%" PRIu64 " %" PRIu64 " %.3f %" PRIu64 " %.3f \"%s\"\n", from, ser[0].h[i], p[0],
                ser[1].h[i], p[1], lab);
    }
    if (fig_close(c, f)) return PSC_EIO;

    int panel[2], np = 0;
    for (int k = 0; k < 2; k++) if (ser[k].n) panel[np++] = k;
    if (!np) panel[np++] = 0;
    /* Many buckets (lifetimes span ns to s): label every 2nd or 3rd one so
     * the rotated labels do not run into each other. */
    int n_buckets = hi - lo + 1, every = n_buckets > 32 ? 3 : n_buckets > 16 ? 2 : 1;
    snprintf(fname, sizeof fname, "%s.gp", name);
    if (!(f = fig_open(c, fname))) return PSC_EIO;
    fprintf(f, "# %s histogram%s — generated by poolscope plot\n%s", name, np > 1 ? ", heap and pool panels" : "", style);
    fprintf(f, "set xlabel \"%s (log2 buckets; label = lower bound)\"\nset style fill solid 0.85 border rgb '#333333'\n"
               "set boxwidth 0.8\nset xtics rotate by -40 nomirror\nset key off\nset grid ytics\nset grid noxtics\n"
               "set xrange [-0.6:%d.6]\nset lmargin at screen 0.08\nset rmargin at screen 0.97\n", xlabel, n_buckets - 1);
    /* the count over each bar; with many (narrow) bars in a short form,
     * the exact counts being in the .dat */
    if (n_buckets > 20)
        fputs("count(n) = n >= 1e6 ? sprintf('%.1fM', n / 1e6) : n >= 1e4 ? sprintf('%.0fk', n / 1e3) :"
              " n >= 1e3 ? sprintf('%.1fk', n / 1e3) : sprintf('%d', n)\n", f);
    else
        fputs("count(n) = sprintf('%d', n)\n", f);
    if (np > 1) { fputs("set multiplot layout 2,1 title ", f); gp_str(f, title); fputs(" font ',14' noenhanced\n", f); }
    else {   /* one panel: its series, and what the other lacks, under the title */
        char t1[900];
        snprintf(t1, sizeof t1, "%s\n%s; %s", title, ser[panel[0]].label, ser[!panel[0]].none);
        fputs("set title ", f); gp_str(f, t1); fputs(" font ',14' noenhanced\n", f);
    }
    for (int q = 0; q < np; q++) {
        const series_t *sr = &ser[panel[q]];
        int col = 2 + 2 * panel[q];
        if (np > 1) { fputs("set title ", f); gp_str(f, sr->label); fputs(" font ',12' noenhanced\n", f); }
        fprintf(f, "set ylabel '%s'\nset yrange [0:%.3f]\n", sr->ylabel, maxp[panel[q]] > 0 ? maxp[panel[q]] * 1.18 : 1.0);
        fprintf(f, "plot '%s.dat' using 0:%d:xtic(int($0) %% %d == 0 ? strcol(6) : '') with boxes lc rgb '%s', \\\n"
                   "     '' using 0:%d:($%d > 0 ? count($%d) : '') with labels offset 0,0.8 font ',9'\n",
                name, col + 1, every, sr->color, col + 1, col, col);
    }
    if (np > 1) fputs("unset multiplot\n", f);
    if (fig_close(c, f)) return PSC_EIO;
    return run_gnuplot(c, name, 1100, np > 1 ? 860 : 560);
}

/* ---- reuse distance CDF ------------------------------------------------------ */

static int reuse_figure(plot_ctx_t *c, const az_scan_t *s)
{
    const az_result_t *r[2] = { &s->heap_r, &s->pool_r };
    static const char *const who[2] = { "heap", "pool acquires" };
    FILE *f = fig_open(c, "reuse_cdf.dat");
    if (!f) return PSC_EIO;
    int hi = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < AZ_HIST_BUCKETS; i++) if (r[k]->distance_hist[i] && i > hi) hi = i;
    /* a point at x = 2^i: the share of re-uses with a distance below x
     * (bucket i holds [2^(i-1), 2^i)); the first row is the 0% start */
    fprintf(f, "# distance_below heap_count heap_cumulative_percent pool_count pool_cumulative_percent\n");
    fprintf(f, "0.5 0 0 0 0\n");
    uint64_t cum[2] = { 0, 0 };
    for (int i = 0; i <= hi; i++) {
        fprintf(f, "%" PRIu64, (uint64_t)1 << i);
        for (int k = 0; k < 2; k++) {
            cum[k] += r[k]->distance_hist[i];
            fprintf(f, " %" PRIu64 " %.3f", r[k]->distance_hist[i],
                    r[k]->reuse_samples ? 100.0 * (double)cum[k] / (double)r[k]->reuse_samples : 0.0);
        }
        fputc('\n', f);
    }
    if (fig_close(c, f)) return PSC_EIO;

    if (!(f = fig_open(c, "reuse_cdf.gp"))) return PSC_EIO;
    fprintf(f, "# reuse distance CDF — generated by poolscope plot\n%s", style);
    char title[900] = "Address reuse distance", lab[2][200], cnt[32];
    if (c->sel[0]) { strcat(title, " — "); strncat(title, c->sel, 300); }
    int drawn[2], nd = 0;
    for (int k = 0; k < 2; k++) {
        drawn[k] = r[k]->reuse_samples >= AZ_PLOT_MIN_CDF_SAMPLES;
        nd += drawn[k];
        psc_fmt_count(r[k]->reuse_samples, cnt, sizeof cnt);
        snprintf(lab[k], sizeof lab[k], "%s (%s re-uses; p50 %" PRIu64 ", p90 %" PRIu64 ")", who[k], cnt,
                 r[k]->distance_p50, r[k]->distance_p90);
        /* a pool never used says nothing: no line for it; a series with a
         * handful of re-uses is no distribution: said in the title */
        if (!drawn[k] && (k == 0 || s->pool_r.acquires)) {
            size_t l = strlen(title);
            snprintf(title + l, sizeof title - l, "\n%s: only %s re-uses, too few for a CDF (fewer than %d): not drawn",
                     who[k], cnt, AZ_PLOT_MIN_CDF_SAMPLES);
            note(c, "reuse_cdf: %s: only %s re-uses (fewer than %d): its CDF is not drawn", who[k], cnt,
                 AZ_PLOT_MIN_CDF_SAMPLES);
        }
    }
    fputs("set title ", f); gp_str(f, title); fputs(" font ',14' noenhanced\n", f);
    fputs("set xlabel 'reuse distance: distinct addresses handed out since this one was last used (log scale)'\n"
          "set ylabel 're-uses with a distance below x (%)'\nset logscale x 2\nset yrange [0:100]\n"
          "set key below noenhanced\n", f);
    if (!nd) {
        fprintf(f, "set xrange [0.5:2]\nset label 1 'no series has %d re-uses' at graph 0.5, graph 0.5 center font ',13'\n"
                   "plot 1/0 notitle\n", AZ_PLOT_MIN_CDF_SAMPLES);
    } else {
        fputs("set xrange [0.5:*]\nplot ", f);
        int first = 1;
        for (int k = 0; k < 2; k++) {
            if (!drawn[k]) continue;
            if (!first) fputs(", \\\n     ", f);
            first = 0;
            fprintf(f, "'reuse_cdf.dat' using 1:%d with linespoints ls %d pt 7 ps 0.8 title ", 3 + 2 * k, k ? 5 : 1);
            gp_str(f, lab[k]);
        }
        fputc('\n', f);
    }
    if (fig_close(c, f)) return PSC_EIO;
    return run_gnuplot(c, "reuse_cdf", 1100, 600);
}

/* ---- KV blocks over time ----------------------------------------------------- */

static int kv_figure(plot_ctx_t *c, const az_scan_t *s, double x0, double x1)
{
    const az_result_t *h = &s->heap_r;
    FILE *f = fig_open(c, "kv.gp");
    if (!f) return PSC_EIO;
    fprintf(f, "# KV cache over time — generated by poolscope plot\n%s", style);
    char title[600];
    int k = snprintf(title, sizeof title, "KV cache: blocks in use and utilization (peak %" PRIu64 " blocks, %.1f%% utilized on average",
                     h->peak_kv_blocks, 100 * h->kv_utilization);
    if (c->phase && k > 0 && (size_t)k < sizeof title)
        snprintf(title + k, sizeof title - (size_t)k, " in %s)\nthe curves are whole-run: a phase is not one span of time", c->sel);
    else if (c->sel[0] && k > 0 && (size_t)k < sizeof title)
        snprintf(title + k, sizeof title - (size_t)k, ")\n%s", c->sel);
    else if (k > 0 && (size_t)k < sizeof title)
        snprintf(title + k, sizeof title - (size_t)k, ")");
    int lines = 1;
    for (const char *q = title; *q; q++) lines += *q == '\n';
    int height = 540 + 22 * lines;
    double head = page_title(f, title, height);
    fprintf(f, "set origin 0,0\nset size 1,%.4f\nset xrange [%.9f:%.9f]\n", 1 - head, x0, x1);
    fputs("set xlabel 'time since trace start (s)'\nset ylabel 'blocks in use'\nset y2label 'utilization: tokens stored / block capacity (%)'\n"
          "set yrange [0:*]\nset offsets 0, 0, graph 0.05, 0\nset y2range [0:105]\nset ytics nomirror\nset y2tics\n"
          "set key outside top center horizontal box opaque\n"
          "plot 'timeline.dat' using 1:8 with lines ls 1 title 'blocks in use', \\\n"
          "     '' using 1:($8 > 0 ? $9 : 1/0) axes x1y2 with lines ls 2 title 'utilization'\nunset multiplot\n", f);
    if (fig_close(c, f)) return PSC_EIO;
    return run_gnuplot(c, "kv", 1100, height);
}

/* ---- policies from replay --json ----------------------------------------- */

/* A replay --json document with a non-empty "policies" array: 0, or an
 * error with msg — checked before anything is drawn. */
static int replay_load(const char *replay_json, az_jdoc_t **out, char *msg, size_t msglen)
{
    int err;
    char eb[200];
    az_jdoc_t *d = az_json_parse_file(replay_json, &err, eb, sizeof eb);
    if (!d) { snprintf(msg, msglen, "%s: %s", replay_json, eb); return PSC_ECORRUPT; }
    const az_jv_t *pol = az_json_get(az_json_root(d), "policies");
    if (!pol || pol->type != AZ_JV_ARR || !pol->n) {
        snprintf(msg, msglen, "%s: no \"policies\" array (expected replay --json output)", replay_json);
        az_json_free(d);
        return PSC_ECORRUPT;
    }
    *out = d;
    return 0;
}

static double jnum(const az_jv_t *p, const char *key)
{
    const az_jv_t *v = az_json_get(p, key);
    return v && v->type == AZ_JV_NUM ? v->num : NAN;
}

/* The KV policies (kv-contiguous, kv-reserve, kv-step, kv-paged: what
 * replay calls "kv") hold a KV cache, the others (malloc, arena, pool,
 * ideal) the tensor or heap stream: different things at different scales,
 * so each group gets a panel and a unit of its own. */
static int is_kv_policy(const char *name) { return !strncmp(name, "kv", 2); }

static int policies_figure(plot_ctx_t *c, const az_jdoc_t *d)
{
    static const char *const group_name[2] = { "tensor/heap", "KV cache" };
    const az_jv_t *root = az_json_root(d), *pol = az_json_get(root, "policies");
    const az_jv_t *tr = az_json_get(root, "trace"), *st = tr ? az_json_get(tr, "stream") : NULL;
    double top[2] = { 0, 0 };
    size_t count[2] = { 0, 0 };
    for (const az_jv_t *p = pol->child; p; p = p->next) {
        const az_jv_t *n = az_json_get(p, "name");
        if (!n || n->type != AZ_JV_STR) continue;
        int g = is_kv_policy(n->str);
        double v[2] = { jnum(p, "peak_reserved_bytes"), jnum(p, "peak_live_bytes") };
        for (int k = 0; k < 2; k++) if (v[k] > top[g]) top[g] = v[k];
        count[g]++;
    }
    if (!count[0] && !count[1]) {
        snprintf(c->msg, c->msglen, "no policy with a \"name\" in the replay file");
        return PSC_ECORRUPT;
    }
    const char *uname[2];
    double unit[2] = { mem_unit(top[0], &uname[0]), mem_unit(top[1], &uname[1]) };
    FILE *f = fig_open(c, "policies.dat");
    if (!f) return PSC_EIO;
    /* one gnuplot data block (index) per group present, in this order */
    int groups[2], ng = 0;
    for (int g = 0; g < 2; g++) {
        if (!count[g]) continue;
        if (ng) fputs("\n\n", f);
        groups[ng++] = g;
        fprintf(f, "# %s policies: policy peak_reserved_%s peak_live_%s reserved_over_live\n",
                group_name[g], uname[g], uname[g]);
        for (const az_jv_t *p = pol->child; p; p = p->next) {
            const az_jv_t *n = az_json_get(p, "name");
            if (!n || n->type != AZ_JV_STR || is_kv_policy(n->str) != g) continue;
            double rv = jnum(p, "peak_reserved_bytes"), lv = jnum(p, "peak_live_bytes");
            psc_esc_gp_data(f, n->str);   /* a data file: read as data, never run */
            fprintf(f, " %.4f %.4f %.3f\n", rv / unit[g], lv / unit[g], lv > 0 ? rv / lv : NAN);
        }
    }
    if (fig_close(c, f)) return PSC_EIO;

    if (!(f = fig_open(c, "policies.gp"))) return PSC_EIO;
    fprintf(f, "# per-policy peaks from replay --json, one panel per group — generated by poolscope plot\n%s", style);
    fputs("set style data histograms\nset style histogram clustered gap 1.5\n"
          "set style fill solid 0.85 border rgb '#333333'\nset boxwidth 0.9\nset yrange [0:*]\n"
          "set key below box opaque\nset grid ytics\nset grid noxtics\n"
          "set xtics nomirror noenhanced\nset datafile missing 'nan'\n", f);
    char sub[2][160], title[600];
    for (int q = 0; q < ng; q++) {
        int g = groups[q];
        char sb[100];
        if (g == 0 && st && st->type == AZ_JV_STR)
            snprintf(sub[q], sizeof sub[q], "%s policies (%s stream)", group_name[g], psc_esc_text(st->str, sb, sizeof sb));
        else
            snprintf(sub[q], sizeof sub[q], "%s policies", group_name[g]);
    }
    /* one group: its name goes into the title, the panel has no title of its own */
    snprintf(title, sizeof title, "Peak memory by allocation policy (replay)%s%s", ng > 1 ? "" : ": ",
             ng > 1 ? "" : sub[0]);
    if (c->sel[0]) strcat(title, "\nwhole run: replay --json is not restricted by --phase/--from/--to");
    if (ng > 1) { fputs("set multiplot layout 1,2 title ", f); gp_str(f, title); fputs(" font ',14' noenhanced\n", f); }
    else { fputs("set title ", f); gp_str(f, title); fputs(" font ',14' noenhanced\n", f); }
    for (int q = 0; q < ng; q++) {
        int g = groups[q];
        if (ng > 1) { fputs("set title ", f); gp_str(f, sub[q]); fputs(" font ',12' noenhanced\n", f); }
        fprintf(f, "set ylabel '%s'\n", uname[g]);
        fprintf(f, "plot 'policies.dat' index %d using 2:xtic(1) title 'peak reserved' lc rgb '#d62728', \\\n"
                   "     '' index %d using 3 title 'peak live (lower bound)' lc rgb '#1f77b4', \\\n"
                   "     '' index %d using 0:2:(sprintf('%%.2fx', $4)) with labels offset -1.2,0.8 font ',9' notitle\n",
                q, q, q);
    }
    if (ng > 1) fputs("unset multiplot\n", f);
    if (fig_close(c, f)) return PSC_EIO;
    return run_gnuplot(c, "policies", ng > 1 ? 1300 : 1100, 560);
}

/* ---- all of it --------------------------------------------------------------- */

/* Every figure into c->dir (a temporary directory: see az_plot). */
static int plot_all(plot_ctx_t *c, const az_scan_t *s, const char *trace, const az_jdoc_t *replay)
{
    int rc = 0;
    if (s) {
        char cnt[2][32];
        double x0 = 0, x1 = 0;
        rc = memory_figure(c, s, trace, &x0, &x1);
        const az_result_t *h = &s->heap_r, *p = &s->pool_r;
        char l[4][96], title[400];
        snprintf(l[0], sizeof l[0], "heap (%s allocations)", psc_fmt_count(hist_sum(h->size_hist), cnt[0], sizeof cnt[0]));
        snprintf(l[1], sizeof l[1], "pool acquires (%s)", psc_fmt_count(hist_sum(p->size_hist), cnt[1], sizeof cnt[1]));
        series_t sizes[2] = {
            { l[0], h->size_hist, hist_sum(h->size_hist), "#1f77b4", "share of heap allocations (%)", "no heap allocations" },
            { l[1], p->size_hist, hist_sum(p->size_hist), "#9467bd", "share of pool acquires (%)", "no pool acquires" },
        };
        snprintf(title, sizeof title, "Allocation sizes (requested bytes)%s%s", c->sel[0] ? " — " : "", c->sel);
        if (!rc) rc = hist_figure(c, "sizes", title, "size", 1, sizes);

        snprintf(l[2], sizeof l[2], "heap (%s freed)", psc_fmt_count(hist_sum(h->lifetime_hist), cnt[0], sizeof cnt[0]));
        snprintf(l[3], sizeof l[3], "pool acquires (%s reclaimed)", psc_fmt_count(hist_sum(p->lifetime_hist), cnt[1], sizeof cnt[1]));
        series_t lifetimes[2] = {
            { l[2], h->lifetime_hist, hist_sum(h->lifetime_hist), "#1f77b4", "share of heap frees (%)", "no heap frees" },
            { l[3], p->lifetime_hist, hist_sum(p->lifetime_hist), "#9467bd", "share of pool reclaims (%)", "no pool reclaims" },
        };
        int k = snprintf(title, sizeof title, "Lifetimes (heap: allocation to free; pool: acquire to reclaim)%s%s",
                         c->sel[0] ? " — " : "", c->sel);
        /* a resolution is stated only when a run can have it: over 2^60 ns
         * (36 years) the SYNC record is damaged (report.c, the same rule) */
        if (s->resolution_ns && s->resolution_ns <= (1ull << 60) && k > 0 && (size_t)k < sizeof title) {
            char res[32];
            snprintf(title + k, sizeof title - (size_t)k, "\nthe trace's times are within %s: shorter lifetimes are not resolved",
                     psc_fmt_ns(s->resolution_ns, res, sizeof res));
        }
        if (!rc) rc = hist_figure(c, "lifetimes", title, "lifetime", 0, lifetimes);
        if (!rc) rc = reuse_figure(c, s);
        if (!rc && h->has_kv) rc = kv_figure(c, s, x0, x1);
    }
    if (!rc && replay) rc = policies_figure(c, replay);
    return rc;
}

/* The trace is scanned and the replay file read before anything is made:
 * a bad input or an unknown phase creates nothing. The figures are made in
 * a temporary directory (common/outfile.h) that becomes `dir`, or whose
 * files replace their namesakes in an existing `dir`, only when every
 * figure was drawn: a failure leaves `dir` as it was and nothing
 * half-written. */
int az_plot(const az_plot_opts_t *o, az_plot_out_t *out, char *msg, size_t msglen)
{
    memset(out, 0, sizeof *out);
    if ((!o->trace && !o->replay_json) || !o->dir) { snprintf(msg, msglen, "nothing to plot"); return PSC_EINVAL; }
    if ((o->phase || o->window) && !o->trace) {
        snprintf(msg, msglen, "--phase and --from/--to select part of a trace: give one");
        return PSC_EINVAL;
    }
    plot_ctx_t c = { .out = out, .msg = msg, .msglen = msglen, .phase = o->phase != NULL };
    if (o->phase || o->window) {
        char a[32], b[32], w[96] = "";
        if (o->window)
            snprintf(w, sizeof w, "from %s to %s", psc_fmt_ns(o->from, a, sizeof a),
                     o->to == UINT64_MAX ? "the end" : psc_fmt_ns(o->to, b, sizeof b));
        char ph[68];   /* the phase is a marker name of the trace: text */
        snprintf(c.sel, sizeof c.sel, "%s%s%s%s%s", o->phase ? "phase '" : "", o->phase ? psc_esc_text(o->phase, ph, sizeof ph) : "",
                 o->phase ? "'" : "", o->phase && o->window ? ", " : "", w);
    }
    int rc;
    az_scan_t *s = NULL;
    if (o->trace) {
        az_scan_opts_t so = { .phase = o->phase, .window = o->window, .from = o->from, .to = o->to,
                              .timeline_buckets = 1000, .keep_markers = MAX_MARKS };
        if ((rc = az_scan_file(o->trace, &so, &s, msg, msglen))) return rc;
        char wb[8];
        out->warning = az_scan_warning(s, wb, sizeof wb) != NULL;
    }
    az_jdoc_t *d = NULL;
    if (o->replay_json && (rc = replay_load(o->replay_json, &d, msg, msglen))) { az_scan_free(s); return rc; }
    const char *inputs[2] = { o->trace, o->replay_json };
    psc_outdir_t *od;
    if ((rc = psc_outdir_open(o->dir, inputs, 2, &od, msg, msglen))) { az_json_free(d); az_scan_free(s); return rc; }
    c.dir = psc_outdir_path(od);
    rc = plot_all(&c, s, o->trace, d);
    az_json_free(d);
    az_scan_free(s);
    if (rc) psc_outdir_abort(od);
    else rc = psc_outdir_commit(od, msg, msglen);
    if (rc) { out->made[0] = 0; return rc; }
    /* "memory.png\n..." -> "DIR/memory.png\n..." */
    char names[sizeof out->made];
    memcpy(names, out->made, sizeof names);
    size_t k = 0;
    for (char *l = names, *nl; *l && k < sizeof out->made; l = nl + 1) {
        if (!(nl = strchr(l, '\n'))) break;
        int w = snprintf(out->made + k, sizeof out->made - k, "%s/%.*s\n", o->dir, (int)(nl - l), l);
        if (w < 0 || (size_t)w >= sizeof out->made - k) { out->made[k] = 0; break; }
        k += (size_t)w;
    }
    out->made[k] = 0;
    return 0;
}

/* progress.c — the progress line of the commands that read a whole trace
 * (report, html, export, plot, sql, replay, diff, gate, top's first frame).
 *
 * What a profiler user wants from it is how far the read is and how much
 * is left, in the unit the tool reports in: events. File bytes are a poor
 * stand-in (a column-form, compressed trace is read unevenly: a million
 * events sat at 48.5% of the bytes), so the line counts events against the
 * count the END chunk states (libtrace/FORMAT.md, "END"), read up front
 * from the file's last bytes (pst_read_end). A trace with no END yet
 * (still being written) or none at all (cut short) states no count: the
 * line then shows the share of the bytes read, '~' marking it an estimate,
 * and says why. A pipe has neither: the line counts events alone.
 *
 * Only on a terminal: a redirected stderr (a log, a CI job, a pipe) gets
 * none of it. The line is redrawn at most 10 times a second, cut to the
 * terminal's width (a wrapped line cannot be cleared with one \r), and
 * cleared at the end or before any message.
 */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fmt.h"
#include "poolscope/error.h"
#include "poolscope/reader.h"

static cli_progress_t *shown_now;   /* whose line is on the screen */

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int cli_progress_start(cli_progress_t *p, const char *cmd, const char *file)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->file = file;
    if (!file || !isatty(STDERR_FILENO)) return 0;
    p->on = 1;
    /* END is read from the file's end: only a regular file has one to read
     * without taking bytes from the reader (a pipe's would be consumed) */
    struct stat st;
    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode)) return 1;
    static pst_end_info_t end;          /* 4 KiB of exe name: not on the stack */
    int rc = pst_read_end(file, &end);
    if (rc == 0) p->total = end.events;
    else if (rc == PSC_ENOENT) p->writing = pst_being_written(file, end.pid);
    return 1;
}

static unsigned term_cols(void)
{
    struct winsize w;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 20) return w.ws_col;
    return 80;
}

/* The figures after "poolscope CMD: FILE: " */
static void figures(const cli_progress_t *p, uint64_t events, uint64_t bytes, uint64_t file_bytes,
                    char *buf, size_t len)
{
    char n[32], t[32];
    psc_fmt_count(events, n, sizeof n);
    if (p->total) {
        /* END counts what was written; a damaged file may read otherwise */
        uint64_t e = events < p->total ? events : p->total;
        snprintf(buf, len, "%5.1f%% (%s of %s events)", 100.0 * (double)e / (double)p->total, n,
                 psc_fmt_count(p->total, t, sizeof t));
    } else if (file_bytes) {
        uint64_t b = bytes < file_bytes ? bytes : file_bytes;   /* a file being written grows */
        snprintf(buf, len, "~%.1f%% by bytes, %s events (%s)", 100.0 * (double)b / (double)file_bytes, n,
                 p->writing ? "being written" : "no END");
    } else {
        snprintf(buf, len, "%s events", n);
    }
}

void cli_progress(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes)
{
    cli_progress_t *p = ctx;
    if (!p->on) return;
    double now = mono_s();
    int last = p->total && events >= p->total;
    if (p->shown && !last && now - p->last < 0.1) return;
    p->last = now;
    char fig[160], line[512];
    figures(p, events, bytes, file_bytes, fig, sizeof fig);
    size_t cols = term_cols() - 1;      /* the last column would wrap on some terminals */
    size_t fixed = strlen("poolscope : : ") + strlen(p->cmd) + strlen(fig), fl = strlen(p->file);
    if (fixed + fl <= cols)
        snprintf(line, sizeof line, "poolscope %s: %s: %s", p->cmd, p->file, fig);
    else if (fixed + 12 <= cols)        /* too wide: the end of the file's name */
        snprintf(line, sizeof line, "poolscope %s: ...%s: %s", p->cmd, p->file + fl - (cols - fixed - 3), fig);
    else
        snprintf(line, sizeof line, "%.*s", (int)(cols < sizeof line ? cols : sizeof line - 1), fig);
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    p->shown = 1;
    shown_now = p;
}

void cli_progress_clear(void)
{
    if (!shown_now || !shown_now->shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    shown_now->shown = 0;
}

void cli_progress_done(cli_progress_t *p)
{
    if (p->shown) cli_progress_clear();
    if (shown_now == p) shown_now = NULL;
    p->on = 0;
}

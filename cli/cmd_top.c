/* cmd_top.c — `poolscope top FILE`: a terminal view of a trace, refreshed
 * every second while it is being written (analyzer/top.c draws a frame;
 * this file parses the arguments and owns the terminal).
 *
 * Plain ANSI escapes, no curses: a frame is a screenful of lines redrawn
 * in place (cursor home, each line followed by erase-to-end-of-line, then
 * erase below), in the alternate screen so the shell's screen comes back
 * at the end. The keyboard is read in non-canonical mode without echo.
 * Every way out (q, Ctrl-C, SIGTERM, SIGHUP, the end of the input) goes
 * through one restore: the saved termios, the cursor shown, the main
 * screen. Curses would add a library for what four escape sequences do.
 *
 * Each refresh scans the trace again from its start (scan.c reads up to
 * the last complete chunk of a trace being written), so a refresh takes
 * what `report` takes on that trace; when that is longer than the
 * interval, the next frame simply comes when it is done.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "scan.h"
#include "site_args.h"
#include "top.h"
#include "units.h"

void cmd_top_help(FILE *out)
{
    fputs("usage: poolscope top FILE|PID [--once] [--interval SECONDS] [--no-symbols]\n\n"
          "A terminal view of a trace, refreshed every second while it is being\n"
          "written (record -o FILE in another terminal; a finished trace shows its\n"
          "end): heap live, RSS, mmap committed, pool outstanding bytes and KV\n"
          "blocks now, at their peak and over the last minute, or the whole trace\n"
          "when it is shorter (min .. max of the timeline's buckets, and a trend of\n"
          "16 cells); phase counts and rates per second of the trace; the sites\n"
          "holding the most heap now, named as `report` names them (Python lines\n"
          "for a Python program). Every figure is report's: heap live is report's\n"
          "leaked_bytes, the sites its leaks table, at the last complete chunk.\n"
          "Fits 80x24; a larger terminal shows more sites. q or Ctrl-C quits, space\n"
          "redraws now. A PID (digits that name no file) stands for the trace that\n"
          "process is writing (recorded or attached; found among its open files,\n"
          "as the same user).\n\n"
          "  --once           print one frame to standard output and exit (scripts)\n"
          "  --interval S     seconds between frames (default 1; 0.2 to 3600)\n"
          "  --no-symbols     addresses instead of symbol names (faster)\n", out);
    fputs(cli_sites_help, out);
    fputs("\nExit: 0, or 2 for bad usage or an unreadable trace.\n", out);
}

typedef struct top_args {
    az_top_opts_t to;
    cli_sites_t sites;
    const char *interval;
} top_args_t;

static int take(void *ctx, const char *opt, const char *v)
{
    top_args_t *ta = ctx;
    return cli_sites_take(&ta->sites, "top", opt, v);
}

/* `top PID`: the trace file process PID has open (the first of its
 * descriptors whose file starts with the trace magic). 0, or -1. */
static int trace_of_pid(const char *arg, char *out, size_t cap)
{
    char dir[64], fd[64 + 256];
    if (!*arg || strspn(arg, "0123456789") != strlen(arg) || strlen(arg) > 10) return -1;
    snprintf(dir, sizeof dir, "/proc/%s/fd", arg);
    DIR *d = opendir(dir);
    if (!d) return -1;
    int found = -1;
    struct dirent *e;
    while (found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(fd, sizeof fd, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(fd, out, cap - 1);
        if (n <= 0 || out[0] != '/') continue;
        out[n] = 0;
        char magic[8];
        int f = open(out, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
        if (f < 0) continue;
        struct stat st;
        if (fstat(f, &st) == 0 && S_ISREG(st.st_mode) && read(f, magic, 8) == 8 && !memcmp(magic, "PSTRACE", 8))
            found = 0;
        close(f);
    }
    closedir(d);
    return found;
}

/* ---- the terminal ----------------------------------------------------------- */

static volatile sig_atomic_t quit_sig;   /* the signal that asked us to stop */
static volatile sig_atomic_t resized;
static volatile sig_atomic_t scanning;   /* a frame is being made: a scan takes as long as report */
static struct termios saved;
static int have_saved;

/* Ctrl-C in the middle of a long scan quits now, not when the scan ends:
 * the terminal is restored here with async-signal-safe calls only. */
static void on_quit(int sig)
{
    quit_sig = sig;
    if (!scanning) return;
    static const char back[] = "\033[?25h\033[?1049l";
    if (write(STDOUT_FILENO, back, sizeof back - 1) < 0) { /* nothing more to do */ }
    if (have_saved) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    _exit(0);
}
static void on_winch(int sig) { (void)sig; resized = 1; }

static struct termios raw_mode;   /* what term_setup set, again after a Ctrl-Z */

/* Ctrl-Z: the shell gets its terminal back as it was (main screen, echo,
 * cursor) while we are stopped, and ours comes back at fg (then a frame
 * at once). Async-signal-safe calls only. */
static void on_tstp(int sig)
{
    int e = errno;
    static const char back[] = "\033[?25h\033[?1049l", again[] = "\033[?1049h\033[?25l";
    if (write(STDOUT_FILENO, back, sizeof back - 1) < 0) { /* nothing more to do */ }
    if (have_saved) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);   /* typed-ahead keys are the shell's */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(sig, &sa, &old);
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, sig);
    raise(sig);                               /* pending: the mask holds it in the handler */
    sigprocmask(SIG_UNBLOCK, &un, NULL);      /* stopped here until SIGCONT */
    sigaction(sig, &old, NULL);
    if (have_saved) tcsetattr(STDIN_FILENO, TCSADRAIN, &raw_mode);
    if (write(STDOUT_FILENO, again, sizeof again - 1) < 0) { /* nothing more to do */ }
    resized = 1;                              /* redraw */
    errno = e;
}

static void term_restore(void)
{
    /* cursor shown, main screen back, input as it was */
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (have_saved) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    have_saved = 0;
}

static int term_setup(void)
{
    if (tcgetattr(STDIN_FILENO, &saved) == 0) {
        have_saved = 1;
        struct termios raw = saved;
        raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO);   /* ISIG kept: Ctrl-C is a SIGINT */
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        raw_mode = raw;
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_quit;   /* no SA_RESTART: poll returns EINTR at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    sa.sa_handler = on_tstp;
    sigaction(SIGTSTP, &sa, NULL);
    fputs("\033[?1049h\033[?25l", stdout);
    return 0;
}

static void term_size(unsigned *cols, unsigned *rows)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
        *cols = ws.ws_col;
        *rows = ws.ws_row;
    } else {
        *cols = 80;
        *rows = 24;
    }
}

/* The frame's lines in place: each cut to the width by top.c, ended by an
 * erase of the rest of its line; then the rest of the screen erased. The
 * last line gets no newline (it would scroll a full screen). */
static void draw(const char *frame, size_t len, unsigned rows)
{
    fputs("\033[H", stdout);
    unsigned n = 0;
    const char *p = frame, *end = frame + len;
    while (p < end && n < rows) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fwrite(p, 1, l, stdout);
        fputs("\033[K", stdout);
        n++;
        if (n < rows) fputs("\r\n", stdout);
        p = nl ? nl + 1 : end;
    }
    fputs("\033[J", stdout);
    fflush(stdout);
}

/* One frame into a buffer (NULL on a scan error: msg says why). With
 * progress (the frame before the screen is taken, and --once), the read
 * shows a progress line on a terminal's stderr; the later frames redraw
 * the screen instead. */
static char *make_frame(const char *file, const az_top_opts_t *to, int progress, size_t *len, char *msg, size_t mcap)
{
    az_scan_opts_t so = { .timeline_buckets = AZ_TOP_BUCKETS, .no_reuse = 1 };
    az_scan_t *s = NULL;
    cli_progress_t pg;
    if (progress && cli_progress_start(&pg, "top", file)) { so.progress = cli_progress; so.progress_ctx = &pg; }
    int rc = az_scan_file(file, &so, &s, msg, mcap);
    if (progress) cli_progress_done(&pg);
    if (rc) return NULL;
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) { az_scan_free(s); snprintf(msg, mcap, "out of memory"); return NULL; }
    az_top_frame(s, to, f);
    fclose(f);
    az_scan_free(s);
    return buf;
}

int cmd_top(int argc, char **argv)
{
    const char *file = NULL;
    int once = 0;
    top_args_t ta;
    memset(&ta, 0, sizeof ta);
    ta.sites.o = &ta.to.sites;
    const cli_opt_t opts[] = {
        { "--once", &once, NULL, NULL }, { "--interval", NULL, &ta.interval, NULL },
        { "--no-symbols", &ta.to.no_symbols, NULL, NULL }, { "--no-skip", &ta.to.sites.no_skip, NULL, NULL },
        { "--skip-frame --depth", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "top", cmd_top_help, opts, &ta, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file) { cli_cmd_err("top", "no trace file (usage: poolscope top FILE|PID [--once])"); return CLI_USAGE; }
    char bypid[PATH_MAX];
    if (access(file, F_OK) != 0 && strspn(file, "0123456789") == strlen(file)) {
        if (trace_of_pid(file, bypid, sizeof bypid)) {
            cli_cmd_err("top", "%s: no such file, and no process %s writing a trace that we may look at", file, file);
            return CLI_USAGE;
        }
        file = bypid;
    }
    double interval = 1.0;
    if (ta.interval) {
        uint64_t ns = 0;
        if (az_parse_time_ns(ta.interval, &ns) || ns < 200000000ull || ns > 3600000000000ull) {
            cli_cmd_err("top", "--interval takes 0.2 to 3600 seconds, not '%s'", ta.interval);
            return CLI_USAGE;
        }
        interval = (double)ns / 1e9;
    }
    char msg[512], em[2048];
    size_t len = 0;
    if (once || !isatty(STDOUT_FILENO)) {   /* a pipe gets one frame, never escapes */
        ta.to.interval_s = 0;
        unsigned cols = 80, rows = 24;
        if (isatty(STDOUT_FILENO)) term_size(&cols, &rows);
        ta.to.cols = cols;
        ta.to.rows = rows;
        char *fr = make_frame(file, &ta.to, 1, &len, msg, sizeof msg);
        if (!fr) return cli_file_err("top", file, psc_esc_text(msg, em, sizeof em));
        fwrite(fr, 1, len, stdout);
        free(fr);
        return cli_stdout_done("top", CLI_OK);
    }
    /* the first frame before the screen is taken: an unreadable file is
     * one line on the shell's screen, not a flash */
    ta.to.interval_s = interval;
    term_size(&ta.to.cols, &ta.to.rows);
    char *fr = make_frame(file, &ta.to, 1, &len, msg, sizeof msg);
    if (!fr) return cli_file_err("top", file, psc_esc_text(msg, em, sizeof em));
    term_setup();
    int keys = isatty(STDIN_FILENO);   /* no keyboard (< /dev/null): signals alone end it */
    int err = 0;
    for (;;) {
        if (fr) draw(fr, len, ta.to.rows);
        free(fr);
        fr = NULL;
        /* wait for a key, a signal or the interval */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int again = 0;
        for (;;) {
            if (quit_sig) break;
            if (resized) { resized = 0; again = 1; break; }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double left = interval - ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
            if (left <= 0) { again = 1; break; }
            struct pollfd pf = { .fd = keys ? STDIN_FILENO : -1, .events = POLLIN };
            int pr = poll(&pf, 1, (int)(left * 1000) + 1);
            if (pr < 0 && errno == EINTR) continue;
            if (pr > 0) {
                char c;
                ssize_t r = read(STDIN_FILENO, &c, 1);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) { quit_sig = -1; break; }   /* input gone */
                if (r == 1 && (c == 'q' || c == 'Q')) { quit_sig = -1; break; }
                if (r == 1 && c == ' ') { again = 1; break; }   /* space: now */
            }
        }
        if (!again) break;
        term_size(&ta.to.cols, &ta.to.rows);
        fflush(stdout);   /* nothing of ours is left in stdio's buffer if on_quit exits */
        scanning = 1;
        fr = make_frame(file, &ta.to, 0, &len, msg, sizeof msg);
        scanning = 0;
        if (!fr) { err = 1; break; }   /* the file went away: said after the screen is back */
    }
    free(fr);
    term_restore();
    if (err) return cli_file_err("top", file, psc_esc_text(msg, em, sizeof em));
    return CLI_OK;   /* q, Ctrl-C, SIGTERM: a clean quit */
}

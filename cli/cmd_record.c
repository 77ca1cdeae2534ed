/* cmd_record.c — `poolscope record`: run a program with the interposer
 * preloaded and say where its traces went. Argument parsing and printing
 * only; the work is in libtrace/launch.c (pl_*):
 *
 *   1. parse the options (usage errors: one line, exit 2);
 *   2. find the preload library, resolve CMD through PATH, refuse a target
 *      LD_PRELOAD cannot reach (static, setuid/setgid), check the output
 *      directory and refuse an existing -o FILE — all before anything runs;
 *   3. run CMD under the interposer; SIGINT/SIGTERM/SIGHUP sent to record
 *      are forwarded to it;
 *   4. list each trace with the counts of its END chunk (a trace without
 *      one, cut short, is read to see how far it goes), note an image that
 *      exec'd a program without the tracer;
 *   5. exit with the program's status (128+N if signal N killed it).
 *
 * Test hook: when POOLSCOPE_RECORD_STATS names a file, one line
 * "scanned_bytes=N" per listed trace is appended to it: the bytes record
 * read beyond the trace's header and END chunk (0 when END sufficed).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ctl.h"
#include "launch.h"
#include "units.h"
#include "poolscope/error.h"
#include "poolscope/format.h"

typedef struct rec_opts {
    const char *out;          /* -o, or NULL for poolscope.<pid>.pst */
    const char *stacks;       /* none|fp|dwarf; NULL = PL_STACKS_DEFAULT */
    long depth;               /* 0 = default */
    const char *follow_exec;  /* NULL = not set */
    int signo;                /* 0 = not set */
    int paused;
    int python_frames;        /* --python-frames: 1 on (default), 0 off */
    char scope_funcs[4096];   /* --scope-function FUNC[=NAME], comma-joined; "" = none */
    uint64_t duration_ns;     /* --duration: stop recording after this (0: never) */
    int until_signal;         /* --until-signal: stop recording at SIGUSR2 to record */
    char **cmd;               /* argv of the traced program */
} rec_opts_t;

void cmd_record_help(FILE *out)
{
    fputs("usage: poolscope record [-o FILE] [--stacks none|fp|dwarf] [--depth N]\n"
          "                        [--follow-exec PATTERN] [--signal SIG] [--paused]\n"
          "                        [--scope-function FUNC[=NAME]]... [--python-frames on|off]\n"
          "                        [--duration SECONDS] [--until-signal] -- CMD [ARGS...]\n\n"
          "Run CMD with the poolscope interposer preloaded and write a trace of its\n"
          "memory behaviour. Every process image gets its own trace file (fork\n"
          "children and exec'd images alike); an existing file is never overwritten.\n\n"
          "  -o, --output FILE     trace of the first image (default poolscope.<pid>.pst\n"
          "                        in the current directory); refused if FILE exists\n"
          "  --stacks MODE         call stacks per event: dwarf (the default: unwind\n"
          "                        tables, whole stacks through code without frame\n"
          "                        pointers), fp (frame pointers: cheaper, cut short\n"
          "                        in such code), none\n"
          "  --depth N             deepest stack recorded (1..128; default 32, and\n"
          "                        128 in a Python process)\n"
          "  --follow-exec PATTERN which exec'd programs to trace (see the preload\n"
          "                        README: matched against the program path)\n"
          "  --signal SIG          the signal that toggles recording on and off\n"
          "                        (USR2, a number, RTMIN+N; HUP INT QUIT USR1 USR2\n"
          "                        TERM PROF WINCH URG ALRM VTALRM or a real-time\n"
          "                        signal: never a fatal one such as SEGV or ABRT)\n"
          "  --paused              start with recording off (resume with --signal's\n"
          "                        signal or ps_trace_enable(1))\n"
          "  --scope-function FUNC[=NAME]\n"
          "                        record each call of FUNC as a scope NAME (default\n"
          "                        FUNC), as a marker would: FUNC is the dynamic\n"
          "                        symbol (a C name, or a C++ name as nm -D prints it\n"
          "                        without -C); only calls through a GOT are seen\n"
          "                        (between shared objects). Repeatable, up to 16\n"
          "  --python-frames on|off\n"
          "                        in a CPython 3.11 process, each stack shows the\n"
          "                        Python functions and lines it runs in place of\n"
          "                        the interpreter's frames (on, the default); off\n"
          "                        keeps the native frames. Either way the objects\n"
          "                        of Python's own allocator are recorded as heap\n"
          "                        calls (its arenas as its reserve)\n"
          "  --duration SECONDS    stop recording SECONDS after CMD started (30, 1.5,\n"
          "                        200ms); CMD runs on unchanged to its own exit, and\n"
          "                        record waits for it and exits with its status\n"
          "  --until-signal        stop recording when record gets SIGUSR2\n"
          "                        (kill -USR2 <record's pid>); with --duration, at\n"
          "                        whichever comes first. A stopped trace ends there:\n"
          "                        every event written, END, nothing after (not even\n"
          "                        frees); fork children and exec'd images started\n"
          "                        after the stop are not traced; report calls what\n"
          "                        is live at the end \"live at stop\", not leaked\n\n"
          "A static program or a setuid/setgid one cannot be traced by preloading and\n"
          "is refused. The preload library is looked for at <bindir>/../lib/ and\n"
          "<bindir>/../lib/poolscope/; POOLSCOPE_PRELOAD_LIB names another. The\n"
          "output directory (of -o FILE, else the current one) must take a new file.\n"
          "All of this is checked before CMD runs.\n\n"
          "Exit status: the program's own (128+N if signal N killed it); 2 for bad\n"
          "usage, a refused target or output directory; 126/127 if CMD cannot be\n"
          "run / is not found.\n\n"
          "At the end each trace is listed on stderr with the counts of its END chunk\n"
          "(nothing else is read; \"lost\" there is what the tracer dropped without a\n"
          "LOST record, `poolscope report` has every figure); a trace cut short is read\n"
          "to see how far it goes. Notes follow, one line each, for: an image that\n"
          "exec'd a program without the tracer (its environment dropped LD_PRELOAD,\n"
          "or the program is static or setuid); child processes that could not open\n"
          "their traces (descriptors or disk exhausted: their pids and the reason);\n"
          "a program that made no heap call the tracer could see (its own malloc\n"
          "linked in: only its mmap calls are in the trace); a Python other than\n"
          "CPython 3.11 (native frames only).\n", out);
}

/* ---- argument parsing --------------------------------------------------- */

/* The toggle signal: one of the asynchronous signals below or a real-time
 * one, by name (with or without SIG) or by number, and by the same rule
 * either way. The fatal and synchronous signals (SEGV, BUS, FPE, ILL, ABRT,
 * TRAP, SYS, KILL, STOP, ...) are never usable: the tracer's handler
 * returns to the faulting instruction, so a real SIGSEGV taken as a toggle
 * faults again for ever, and a program's abort() would no longer end it. */
static int usable_signal(long n)
{
    static const int ok[] = { SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGPROF, SIGWINCH,
                              SIGURG, SIGALRM, SIGVTALRM };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (n == ok[i]) return 1;
    return n >= SIGRTMIN && n <= SIGRTMAX;
}

static int parse_signal(const char *s)
{
    static const struct { const char *name; int no; } sigs[] = {
        { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "USR1", SIGUSR1 },
        { "USR2", SIGUSR2 }, { "TERM", SIGTERM }, { "PROF", SIGPROF }, { "WINCH", SIGWINCH },
        { "URG", SIGURG }, { "ALRM", SIGALRM }, { "VTALRM", SIGVTALRM },
    };
    char *end;
    long n = strtol(s, &end, 10);
    if (*s && !*end) return usable_signal(n) ? (int)n : -1;
    if (!strncmp(s, "SIG", 3)) s += 3;
    if (!strncmp(s, "RTMIN+", 6)) {
        n = strtol(s + 6, &end, 10);
        return (s[6] && !*end && n >= 0 && SIGRTMIN + n <= SIGRTMAX) ? SIGRTMIN + (int)n : -1;
    }
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (!strcmp(s, sigs[i].name)) return sigs[i].no;
    return -1;
}

/* One --scope-function: FUNC[=NAME], appended to o->scope_funcs. */
static int add_scope_func(rec_opts_t *o, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t fl = eq ? (size_t)(eq - arg) : strlen(arg);
    unsigned n = 0;
    for (const char *p = o->scope_funcs; *p; p++) n += *p == ',';
    if (!fl || strchr(arg, ',') || strpbrk(arg, " \t") || (eq && !eq[1])) {
        cli_err("record: --scope-function takes FUNC or FUNC=NAME (no spaces or commas), not '%s'", arg);
        return 1;
    }
    if (fl >= 256 || (eq && strlen(eq + 1) >= 128)) {
        cli_err("record: --scope-function '%s': the function name is limited to 255 bytes, the scope name to 127", arg);
        return 1;
    }
    if ((o->scope_funcs[0] && n + 1 >= 16) || strlen(o->scope_funcs) + strlen(arg) + 2 > sizeof o->scope_funcs) {
        cli_err("record: at most 16 --scope-function options");
        return 1;
    }
    /* functions that return twice outlive the stub's frame; the loader's
     * look at their caller, which would be the stub */
    static const char *const refused[] = { "setjmp", "_setjmp", "sigsetjmp", "__sigsetjmp", "vfork",
        "getcontext", "swapcontext", "savectx", "dlopen", "dlmopen", "dlsym", "dlvsym", "__libc_start_main" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (strlen(refused[i]) == fl && !strncmp(arg, refused[i], fl)) {
            cli_err("record: --scope-function %s: a function that returns twice or looks at its caller cannot be scoped", refused[i]);
            return 1;
        }
    if (o->scope_funcs[0]) strcat(o->scope_funcs, ",");
    strcat(o->scope_funcs, arg);
    return 0;
}

/* Returns 0, or CLI_USAGE after printing one line. */
static int parse_args(int argc, char **argv, rec_opts_t *o)
{
    enum { OPT_STACKS = 256, OPT_DEPTH, OPT_FOLLOW, OPT_SIGNAL, OPT_PAUSED, OPT_SCOPE_FN, OPT_PYFRAMES, OPT_HELP,
           OPT_DURATION, OPT_UNTIL_SIGNAL };
    static const struct option longopts[] = {
        { "output", required_argument, NULL, 'o' },
        { "stacks", required_argument, NULL, OPT_STACKS },
        { "depth", required_argument, NULL, OPT_DEPTH },
        { "follow-exec", required_argument, NULL, OPT_FOLLOW },
        { "signal", required_argument, NULL, OPT_SIGNAL },
        { "paused", no_argument, NULL, OPT_PAUSED },
        { "scope-function", required_argument, NULL, OPT_SCOPE_FN },
        { "python-frames", required_argument, NULL, OPT_PYFRAMES },
        { "duration", required_argument, NULL, OPT_DURATION },
        { "until-signal", no_argument, NULL, OPT_UNTIL_SIGNAL },
        { "help", no_argument, NULL, OPT_HELP },
        { NULL, 0, NULL, 0 },
    };
    memset(o, 0, sizeof *o);
    o->python_frames = 1;
    opterr = 0;
    optind = 1;
    int c;
    /* "+": stop at the first non-option, which is CMD. */
    while ((c = getopt_long(argc, argv, "+:o:h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'o':
            if (!*optarg) { cli_err("record: -o needs a file name"); return CLI_USAGE; }
            o->out = optarg;
            break;
        case OPT_STACKS:
            if (strcmp(optarg, "none") && strcmp(optarg, "fp") && strcmp(optarg, "dwarf")) {
                cli_err("record: --stacks takes none, fp or dwarf, not '%s'", optarg);
                return CLI_USAGE;
            }
            o->stacks = optarg;
            break;
        case OPT_DEPTH:
            errno = 0;
            o->depth = strtol(optarg, &end, 10);
            if (errno || !*optarg || *end || o->depth < 1 || o->depth > PST_MAX_DEPTH) {
                cli_err("record: --depth takes a number from 1 to %d, not '%s'", PST_MAX_DEPTH, optarg);
                return CLI_USAGE;
            }
            break;
        case OPT_FOLLOW:
            o->follow_exec = optarg;
            break;
        case OPT_SIGNAL:
            o->signo = parse_signal(optarg);
            if (o->signo < 0) {
                cli_err("record: --signal: '%s' is not a usable signal", optarg);
                return CLI_USAGE;
            }
            break;
        case OPT_PAUSED:
            o->paused = 1;
            break;
        case OPT_DURATION:
            if (az_parse_time_ns(optarg, &o->duration_ns) || !o->duration_ns) {
                cli_err("record: --duration takes a time above 0 (seconds: 30, 1.5, 200ms), not '%s'", optarg);
                return CLI_USAGE;
            }
            break;
        case OPT_UNTIL_SIGNAL:
            o->until_signal = 1;
            break;
        case OPT_SCOPE_FN:
            if (add_scope_func(o, optarg)) return CLI_USAGE;
            break;
        case OPT_PYFRAMES:
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                cli_err("record: --python-frames takes on or off, not '%s'", optarg);
                return CLI_USAGE;
            }
            o->python_frames = !strcmp(optarg, "on");
            break;
        case 'h':
        case OPT_HELP:
            cmd_record_help(stdout);
            return -1;
        case ':':
            cli_err("record: option '%s' needs a value", argv[optind - 1]);
            return CLI_USAGE;
        default:
            cli_err("record: unknown option '%s' (see poolscope help record)", argv[optind - 1]);
            return CLI_USAGE;
        }
    }
    if (optind >= argc) {
        cli_err("record: no command given (usage: poolscope record [OPTIONS] -- CMD [ARGS...])");
        return CLI_USAGE;
    }
    o->cmd = argv + optind;
    return 0;
}

/* ---- the run ------------------------------------------------------------ */

/* pl_run's `stopping`: said when it happens, as the program runs on. */
static void on_stopping(void *ctx, int why, int images)
{
    const rec_opts_t *o = ctx;
    if (images < 0)
        cli_err("record: could not ask the traced program to stop recording (%s); it records to its end",
                strerror(errno));
    else if (why == 1)
        cli_err("record: recording stopped after %.3g s (--duration); the program runs on untraced",
                (double)o->duration_ns / 1e9);
    else
        cli_err("record: recording stopped (SIGUSR2, --until-signal); the program runs on untraced");
}

static int fail(const char *msg, int code)
{
    cli_err("record: %s", msg);
    return code;
}

/* POOLSCOPE_RECORD_STATS: what reading the traces cost (a test hook). */
static void write_stats(const pl_summary_t *s)
{
    const char *path = getenv("POOLSCOPE_RECORD_STATS");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) { cli_err("record: POOLSCOPE_RECORD_STATS=%s: %s", path, strerror(errno)); return; }
    for (size_t i = 0; i < s->n; i++)
        fprintf(f, "scanned_bytes=%llu\n", (unsigned long long)s->entries[i].info.scanned_bytes);
    fclose(f);
}

int cmd_record(int argc, char **argv)
{
    rec_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) return CLI_OK;   /* --help */
    if (rc) return rc;

    char msg[PL_MSG_MAX], preload[PATH_MAX], target[PATH_MAX], out[PATH_MAX], manifest[PATH_MAX];
    if (pl_find_preload(NULL, preload, sizeof preload, msg, sizeof msg)) return fail(msg, CLI_USAGE);
    if ((rc = pl_resolve_cmd(o.cmd[0], NULL, target, sizeof target, msg, sizeof msg)))
        return fail(msg, pl_resolve_exit_code(rc));
    if (pl_check_target(target, msg, sizeof msg)) return fail(msg, CLI_USAGE);
    /* -o made absolute (the program may chdir); its directory, or the
     * working directory, must take a new file */
    if (pl_prepare_output(o.out, out, sizeof out, msg, sizeof msg)) return fail(msg, CLI_USAGE);
    if (pl_manifest_create(manifest, sizeof manifest, msg, sizeof msg)) return fail(msg, CLI_USAGE);
    char ctl[64];
    pl_ctl_dir_create(ctl, sizeof ctl);   /* the images' counters files: SIGKILL recovery */

    /* read by the preload (libtrace/preload/python.c); set either way, so a
     * stale value from outside does not decide */
    setenv("POOLSCOPE_PYTHON_FRAMES", o.python_frames ? "1" : "0", 1);
    pl_spec_t spec = {
        .target = target, .argv = o.cmd, .preload = preload, .out = o.out ? out : NULL,
        .manifest = manifest, .ctl_dir = ctl, .stacks = o.stacks ? o.stacks : PL_STACKS_DEFAULT, .depth = o.depth,
        .follow_exec = o.follow_exec, .signo = o.signo, .paused = o.paused,
        .scope_funcs = o.scope_funcs[0] ? o.scope_funcs : NULL,
    };
    if ((o.duration_ns || o.until_signal) && !ctl[0]) {
        unlink(manifest);
        return fail("--duration and --until-signal need /dev/shm (a tmpfs) to reach the traced images", CLI_USAGE);
    }
    spec.stop_after_ns = o.duration_ns;
    spec.stop_signo = o.until_signal ? SIGUSR2 : 0;
    spec.stopping = on_stopping;
    spec.started_ctx = &o;
    pl_result_t res;
    if (pl_run(&spec, &res, msg, sizeof msg)) {
        unlink(manifest);
        pl_ctl_dir_remove(ctl);
        return fail(msg, res.exit_code);
    }

    pl_summary_opts_t so = { .first_pid = res.pid, .first_comm = res.comm, .follow_exec = o.follow_exec,
                             .ctl_dir = ctl };
    int err = 0;
    pl_summary_t *s = pl_summary_read(manifest, &so, &err);
    unlink(manifest);
    pl_ctl_dir_remove(ctl);
    if (!s) {
        cli_err("record: cannot read the traces: %s", psc_strerror(err));
        return res.exit_code;
    }
    pl_summary_print(s, spec.out, stderr);
    write_stats(s);
    pl_summary_free(s);
    return res.exit_code;
}

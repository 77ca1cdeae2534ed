/* common_args.c — what the trace-reading subcommands of `poolscope` share:
 * one argument loop (flags, options with a value, help, positional files)
 * driven by a table of options, the check of every input file before it is
 * read (common/input.h), and the messages for bad usage, a file that
 * cannot be read and a trace that is damaged (see cli.h); and the options
 * saying where symbols come from (--debug-dir, --binary), which every
 * subcommand that names frames takes alike (cli_symbols_help).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "input.h"
#include "poolscope/error.h"
#include "poolscope/format.h"
#include "suppress.h"
#include "symbolize.h"
#include "units.h"

void cli_cmd_err(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_progress_clear();
    fprintf(stderr, "poolscope %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_file_err(const char *cmd, const char *file, const char *msg)
{
    cli_progress_clear();
    fprintf(stderr, "poolscope %s: %s: %s\n", cmd, file, msg);
    return CLI_USAGE;
}

int cli_stdout_done(const char *cmd, int rc)
{
    errno = 0;
    int bad = fflush(stdout) != 0;
    int e = errno;
    if (ferror(stdout)) bad = 1;
    if (!bad) return rc;
    fprintf(stderr, "poolscope %s: cannot write standard output: %s\n", cmd, e ? strerror(e) : "write error");
    return CLI_USAGE;
}

void cli_warn_damaged(const char *cmd, const char *file, const char *done)
{
    cli_progress_clear();
    fprintf(stderr, "poolscope %s: %s: warning: trace is damaged or cut short; %s what was readable\n",
            cmd, file, done);
}

/* Is arg one of the blank-separated words of names? */
static int spelled(const char *names, const char *arg)
{
    size_t n = strlen(arg);
    for (const char *p = names; (p = strstr(p, arg)) != NULL; p += n)
        if ((p == names || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

/* ---- inputs ------------------------------------------------------------------
 * Every file a reading command is given goes through psc_input_check here,
 * before the command opens it: the one place where a device, a directory,
 * a FIFO nobody writes to, bytes of the wrong kind or a JSON file too large
 * to read whole are refused (issue 25, item 6). What each command reads: */
static const psc_input_kind_t k_trace = { PST_MAGIC, sizeof PST_MAGIC, 0, 0, "a poolscope trace" };
static const psc_input_kind_t k_report = { "{", 1, 1, PSC_JSON_MAX, "a report --json document" };
static const psc_input_kind_t k_replay = { "{", 1, 1, PSC_JSON_MAX, "a replay --json document" };

/* "poolscope CMD: FILE: what is wrong" and CLI_USAGE, or 0. */
static int check_input(const char *cmd, const char *opt, const char *file)
{
    psc_input_kind_t k[2];
    size_t n = 0;
    unsigned flags = 0;
    if (opt && !strcmp(opt, "--baseline")) k[n++] = k_report;       /* gate */
    else if (opt) k[n++] = k_replay;                                 /* plot, html --replay */
    else {
        k[n++] = k_trace;
        if (!strcmp(cmd, "diff") || !strcmp(cmd, "gate")) k[n++] = k_report;
        /* replay opens a named FIFO without waiting for ever (replay/replay.c) */
        if (!strcmp(cmd, "replay")) flags |= PSC_IN_FIFO;
    }
    char msg[256];
    if (!psc_input_check(file, k, n, flags, msg, sizeof msg)) return 0;
    return cli_file_err(cmd, file, msg);
}

static const cli_opt_t *find_opt(const cli_opt_t *o, const char *arg)
{
    for (; o->names; o++)
        if (spelled(o->names, arg)) return o;
    return NULL;
}

/* The options cli_parse_args takes itself, and the subcommands that take
 * them (whose help prints cli_symbols_help, cli_suppress_help). One table,
 * so tests/integration/help_options.sh reads it as it reads each
 * subcommand's own. */
static const struct { const char *names, *cmds; } shared_opts[] = {
    /* the subcommands that symbolize frames (replay for --pool-sites, gate
     * for --phase-frame) */
    { "--debug-dir --binary", "report sql export html replay gate diff" },
    /* those whose leak figures suppressions change (suppress.h) */
    { "--suppress --no-default-suppressions", "report html gate diff" },
};

static int names_frames(const char *cmd) { return spelled(shared_opts[0].cmds, cmd); }

/* The symbolizer's one-per-module messages, as this command's. */
static void sym_warn(void *ctx, const char *msg)
{
    cli_cmd_err((const char *)ctx, "%s", msg);
}

const char cli_symbols_help[] =
    "  --debug-dir DIR   debug files by build-id: DIR/.build-id/xx/yyyy.debug (as\n"
    "                    under /usr/lib/debug, which is searched too); repeatable\n"
    "  --binary PATH=FILE\n"
    "                    read FILE for the module recorded as PATH (its path, or\n"
    "                    base name): a copy of the build that was recorded. A file\n"
    "                    that is not the recorded build (build-id) is never used:\n"
    "                    its frames show as module+0xOFFSET [binary changed]\n";

/* The subcommands that take --suppress and --no-default-suppressions
 * apply the default list unless told not to. */
static int suppresses(const char *cmd) { return spelled(shared_opts[1].cmds, cmd); }

const char cli_suppress_help[] =
    "  --suppress FILE   leaks to leave out of the leak figures and tables, counted\n"
    "                    apart as suppressed: one pattern a line, '#' comments;\n"
    "                    a glob on a frame's function, module:GLOB on its module,\n"
    "                    file:GLOB on its source path; 'A < B' for a frame A\n"
    "                    called from B (REPORT.md, \"Suppressions\"). Repeatable\n"
    "  --no-default-suppressions\n"
    "                    count the known one-time buffers of glibc and libstdc++\n"
    "                    (stdout's buffer, the emergency exception pool, locale\n"
    "                    data) as leaks too; by default they are suppressed\n";

static int symbols_take(const char *cmd, const char *opt, const char *v)
{
    int rc = !strcmp(opt, "--debug-dir") ? az_sym_add_debug_dir(v) : az_sym_add_binary(v);
    if (rc == PSC_ENOMEM) { cli_cmd_err(cmd, "out of memory"); return CLI_USAGE; }
    if (rc) {
        cli_cmd_err(cmd, "%s: %s", opt, !strcmp(opt, "--debug-dir") ? "needs a directory" : "needs PATH=FILE");
        return CLI_USAGE;
    }
    return 0;
}

int cli_parse_args(cli_args_t *a, int argc, char **argv)
{
    a->n_files = 0;
    if (names_frames(a->cmd)) az_sym_set_warn(sym_warn, (void *)a->cmd);
    if (suppresses(a->cmd)) az_supp_use_defaults(1);
    int only_files = 0;   /* after "--", as getopt_long: a file named "-x" can be given */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!only_files && !strcmp(arg, "--")) { only_files = 1; continue; }
        if (!only_files && (!strcmp(arg, "-h") || !strcmp(arg, "--help"))) {
            a->help(stdout);
            return CLI_OK;
        }
        if (only_files || arg[0] != '-' || !arg[1]) {   /* a file; "-" is one too */
            if (!arg[1] && arg[0] == '-') arg = "/dev/stdin";   /* read once, so a pipe works */
            if (a->n_files < a->max_files) { a->files[a->n_files++] = arg; continue; }
            if (a->max_files == 1) cli_cmd_err(a->cmd, "one trace file only ('%s' is extra)", arg);
            else cli_cmd_err(a->cmd, "takes %d files ('%s' is extra)", a->max_files, arg);
            return CLI_USAGE;
        }
        /* --opt=value, as getopt_long takes it: the name up to the first
         * '='; and -ovalue, a short option's value joined to it */
        char name[64];
        const char *eqv = NULL;
        const char *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
        if (eq) {
            size_t nl = (size_t)(eq - arg);
            if (nl >= sizeof name) nl = sizeof name - 1;
            memcpy(name, arg, nl);
            name[nl] = 0;
            arg = name;
            eqv = eq + 1;
        } else if (arg[1] != '-' && arg[2] && !find_opt(a->opts, arg)) {
            char sh[3] = { '-', arg[1], 0 };
            const cli_opt_t *so = find_opt(a->opts, sh);
            if (so && !so->flag) {
                memcpy(name, sh, sizeof sh);
                eqv = arg + 2;
                arg = name;
            }
        }
        const cli_opt_t *o = find_opt(a->opts, arg);
        if (!o && names_frames(a->cmd) && (!strcmp(arg, "--debug-dir") || !strcmp(arg, "--binary"))) {
            if (!eqv && i + 1 >= argc) { cli_cmd_err(a->cmd, "%s needs a value", arg); return CLI_USAGE; }
            if (symbols_take(a->cmd, arg, eqv ? eqv : argv[++i])) return CLI_USAGE;
            continue;
        }
        if (!o && suppresses(a->cmd) && !strcmp(arg, "--no-default-suppressions")) {
            if (eqv) { cli_cmd_err(a->cmd, "%s takes no value ('%s')", arg, argv[i]); return CLI_USAGE; }
            az_supp_use_defaults(0);
            continue;
        }
        if (!o && suppresses(a->cmd) && !strcmp(arg, "--suppress")) {
            if (!eqv && i + 1 >= argc) { cli_cmd_err(a->cmd, "%s needs a value", arg); return CLI_USAGE; }
            char m[4400];
            if (az_supp_load(eqv ? eqv : argv[++i], m, sizeof m)) { cli_cmd_err(a->cmd, "--suppress %s", m); return CLI_USAGE; }
            continue;
        }
        if (!o) {
            cli_cmd_err(a->cmd, "unknown option '%s' (see poolscope help %s)", arg, a->cmd);
            return CLI_USAGE;
        }
        if (o->flag) {
            if (eqv) { cli_cmd_err(a->cmd, "%s takes no value ('%s')", arg, argv[i]); return CLI_USAGE; }
            *o->flag = 1;
            continue;
        }
        if (!eqv && i + 1 >= argc) { cli_cmd_err(a->cmd, "%s needs a value", arg); return CLI_USAGE; }
        const char *v = eqv ? eqv : argv[++i];
        /* the options that name a JSON file to read */
        if ((!strcmp(arg, "--baseline") || !strcmp(arg, "--replay")) && check_input(a->cmd, arg, v)) return CLI_USAGE;
        if (o->value) *o->value = v;
        else if (o->take(a->ctx, arg, v)) return CLI_USAGE;
    }
    for (int k = 0; k < a->n_files; k++)
        if (check_input(a->cmd, NULL, a->files[k])) return CLI_USAGE;
    return CLI_CONTINUE;
}

const char cli_frames_help[] =
    "  --phase-frame FUNC[=NAME]\n"
    "                  each call of FUNC, as the recorded stacks show it, is a scope\n"
    "                  NAME (FUNC when no NAME), read like a marker: phases, decode\n"
    "                  steps (NAME decode), --phase. Repeatable. Frees carry no stack:\n"
    "                  calls with nothing allocated between them read as one\n"
    "                  (README, \"Phases from stacks\")\n";

int cli_frames_take(cli_frames_t *fr, const char *cmd, const char *v)
{
    if (fr->n == sizeof fr->specs / sizeof fr->specs[0]) {
        cli_cmd_err(cmd, "--phase-frame: at most %zu", fr->n);
        return CLI_USAGE;
    }
    if (!*v || *v == '=') { cli_cmd_err(cmd, "--phase-frame: '%s' names no function (FUNC or FUNC=NAME)", v); return CLI_USAGE; }
    fr->specs[fr->n++] = v;
    return 0;
}

int cli_time_take(const char *cmd, const char *opt, const char *v, uint64_t *from, uint64_t *to, int *given)
{
    uint64_t t;
    if (az_parse_time_ns(v, &t)) { cli_cmd_err(cmd, "%s: '%s' is not a time (e.g. 1.5s, 200ms)", opt, v); return CLI_USAGE; }
    if (!strcmp(opt, "--from")) { *from = t; *given |= 1; } else { *to = t; *given |= 2; }
    return 0;
}

int cli_window_done(const char *cmd, int given, int *window, uint64_t from, uint64_t *to)
{
    if (!given) return 0;
    *window = 1;
    if (!(given & 2)) *to = UINT64_MAX;
    if (from > *to) { cli_cmd_err(cmd, "--from is after --to"); return CLI_USAGE; }
    return 0;
}

/* poolscope.c — the `poolscope` front end: finds the subcommand and hands
 * it argc/argv. Each subcommand lives in its own cli/cmd_*.c and only parses
 * arguments and calls libraries; this file only dispatches.
 *
 * A subcommand whose `run` is NULL is announced in --help as coming and
 * answers "not implemented yet" with exit code 2.
 */
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct cli_cmd {
    const char *name;
    const char *summary;                /* one line for --help */
    int  (*run)(int argc, char **argv); /* NULL: not implemented yet */
    void (*help)(FILE *out);            /* NULL: the summary is all there is */
} cli_cmd_t;

static const cli_cmd_t commands[] = {
    { "record", "run a program under the tracer, write a .pst trace", cmd_record, cmd_record_help },
    { "attach", "record a window of a running process (PID), then detach", cmd_attach, cmd_attach_help },
    { "detach", "end the window of `poolscope attach PID`",           cmd_detach, cmd_attach_help },
    { "report", "summarize a trace (text or --json)",                  cmd_report, cmd_report_help },
    { "replay", "re-simulate a trace under allocation policies",      cmd_replay, cmd_replay_help },
    { "gate",   "compare a trace's metrics with a baseline (CI)",     cmd_gate,   cmd_gate_help },
    { "sql",    "load a trace into SQLite",                           cmd_sql,    cmd_sql_help },
    { "plot",   "draw a trace's memory over time with gnuplot",       cmd_plot,   cmd_plot_help },
    { "export", "convert a trace to chrome JSON, folded stacks or pprof",         cmd_export, cmd_export_help },
    { "diff",   "compare two traces",                                 cmd_diff,   cmd_diff_help },
    { "html",   "write a self-contained HTML report of a trace",     cmd_html,   cmd_html_help },
    { "top",    "watch a trace being written, refreshed every second", cmd_top,   cmd_top_help },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_progress_clear();
    fputs("poolscope: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const cli_cmd_t *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage(FILE *out)
{
    fputs("usage: poolscope COMMAND [ARGS...]\n"
          "       poolscope help COMMAND | --help | --version\n\n"
          "commands:\n", out);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-8s %s%s\n", commands[i].name, commands[i].summary,
                commands[i].run ? "" : " (coming)");
    fputs("\nExit codes: 0 success, 1 a gate/diff found a regression, 2 bad usage\n"
          "or input; `record` exits with the traced program's status.\n", out);
}

static int help_for(const char *name)
{
    const cli_cmd_t *c = find_command(name);
    if (!c) {
        cli_err("help: unknown command '%s' (see poolscope --help)", name);
        return CLI_USAGE;
    }
    if (c->help)
        c->help(stdout);
    else
        printf("poolscope %s: %s%s\n", c->name, c->summary, c->run ? "" : " (not implemented yet)");
    return CLI_OK;
}

int main(int argc, char **argv)
{
    /* a file-size limit (ulimit -f) must be a write error we report and
     * clean up after (the temporary output removed), not a signal that
     * kills us with a half-written file beside the target */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
        printf("poolscope %s\n", POOLSCOPE_VERSION);
        return CLI_OK;
    }
    if (!strcmp(a, "help")) {
        if (argc == 2) { usage(stdout); return CLI_OK; }
        if (argc > 3) { cli_err("help: takes one command name"); return CLI_USAGE; }
        return help_for(argv[2]);
    }
    if (a[0] == '-') {
        cli_err("unknown option '%s' (see poolscope --help)", a);
        return CLI_USAGE;
    }
    const cli_cmd_t *c = find_command(a);
    if (!c) {
        cli_err("unknown command '%s' (see poolscope --help)", a);
        return CLI_USAGE;
    }
    if (!c->run) {
        cli_err("%s: not implemented yet", c->name);
        return CLI_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}

/* cli.h — what the subcommands of `poolscope` share.
 *
 * Adding a subcommand: write cli/cmd_NAME.c with
 *     int  cmd_NAME(int argc, char **argv);   // argv[0] is "NAME"; returns the exit code
 *     void cmd_NAME_help(FILE *out);          // full usage text
 * declare both below and fill in its line of the table in cli/poolscope.c.
 *
 * Exit codes (docs/DESIGN.md, "Exit codes"): 0 success, 1 a gate/diff found
 * a regression, 2 bad usage or bad input (one line naming the file and what
 * is wrong).
 */
#ifndef POOLSCOPE_CLI_H
#define POOLSCOPE_CLI_H

#include <stdint.h>
#include <stdio.h>

#define POOLSCOPE_VERSION "0.1.0"

enum { CLI_OK = 0, CLI_REGRESSION = 1, CLI_USAGE = 2 };

/* Print "poolscope: " + message + newline to stderr (printf-style). */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Progress of a long read on stderr, only when stderr is a terminal
 * (cli/progress.c):
 *     cli_progress_t pg;
 *     if (cli_progress_start(&pg, "report", file)) { opts.progress = cli_progress; opts.progress_ctx = &pg; }
 *     ... the read ...
 *     cli_progress_done(&pg);          // clears the line
 * The line counts events against the END chunk's count (pst_read_end): a
 * trace still being written, or cut short, has none, so it shows the share
 * of the file's bytes read, marked '~' as an estimate. While a line is
 * shown, the message functions below clear it before they print. */
typedef struct cli_progress {
    const char *cmd, *file;
    int on;                            /* stderr is a terminal */
    int shown;                         /* a line is on the screen */
    uint64_t total;                    /* END's event count; 0: no END */
    int writing;                       /* no END and its writer has the file open */
    double last;                       /* when the line was last drawn (monotonic s) */
} cli_progress_t;
int  cli_progress_start(cli_progress_t *p, const char *cmd, const char *file);
void cli_progress(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes);
void cli_progress_done(cli_progress_t *p);
/* Clears the line of the progress being shown, if any (the message
 * functions call it). */
void cli_progress_clear(void);

/* ---- what the trace-reading subcommands share (cli/common_args.c) ---------
 * Their messages all start "poolscope CMD: ", a bad file's as
 * "poolscope CMD: FILE: what is wrong". */
void cli_cmd_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "poolscope CMD: FILE: MSG" on stderr; returns CLI_USAGE. */
int  cli_file_err(const char *cmd, const char *file, const char *msg);
/* "poolscope CMD: FILE: warning: trace is damaged or cut short; DONE what
 * was readable" (DONE: "exported", "plotted", ...). */
void cli_warn_damaged(const char *cmd, const char *file, const char *done);

/* End of a command that printed to stdout: flushes it; when any write to
 * it failed (a full disk, /dev/full, a closed pipe) prints "poolscope CMD:
 * cannot write standard output: WHY" and returns CLI_USAGE, else rc. */
int  cli_stdout_done(const char *cmd, int rc);

/* One option, or several handled alike: a flag (sets *flag to 1), or an
 * option taking a value, which goes to *value or to take() with the
 * spelling used (called again for a repeated option; returns 0, or
 * CLI_USAGE after printing one line). */
typedef struct cli_opt {
    const char *names;                 /* its spellings, blank-separated: "-o --output" */
    int *flag;
    const char **value;
    int (*take)(void *ctx, const char *opt, const char *value);
} cli_opt_t;

typedef struct cli_args {
    const char *cmd;                   /* "report": message prefix, `poolscope help CMD` */
    void (*help)(FILE *out);           /* printed for -h / --help */
    const cli_opt_t *opts;             /* ends with an entry whose names are NULL */
    void *ctx;                         /* passed to take() */
    const char **files;                /* the arguments that are not options ("-" is
                                        * one, given as "/dev/stdin") */
    int max_files;                     /* more is a usage error */
    int n_files;                       /* out */
} cli_args_t;

/* Returned by cli_parse_args when the subcommand should go on. */
#define CLI_CONTINUE (-1)
/* Parse argv[1..argc) against a->opts. Returns CLI_CONTINUE, or the exit code
 * to return at once: CLI_OK after the help, CLI_USAGE after one line saying
 * what is wrong (unknown option, missing value, one file too many). */
int  cli_parse_args(cli_args_t *a, int argc, char **argv);

/* --from T / --to T (T like 1.5s, 200ms; az_parse_time_ns) into *from /
 * *to, noting which in *given (1 from, 2 to): 0, or CLI_USAGE printed. */
int cli_time_take(const char *cmd, const char *opt, const char *v, uint64_t *from, uint64_t *to, int *given);
/* After parsing: with either given, *window = 1 and, without --to, *to =
 * UINT64_MAX (to the end). 0, or CLI_USAGE printed when from > to. */
int cli_window_done(const char *cmd, int given, int *window, uint64_t from, uint64_t *to);

/* --debug-dir DIR and --binary PATH=FILE (analyzer/symbolize.h): taken by
 * cli_parse_args itself for the subcommands that name frames (report,
 * sql, export, html, diff, replay, gate), which print this in their help. */
extern const char cli_symbols_help[];

/* --suppress FILE and --no-default-suppressions (analyzer/suppress.h):
 * taken by cli_parse_args itself for report, html, gate and diff, which
 * print this in their help. */
extern const char cli_suppress_help[];

/* --phase-frame FUNC[=NAME], repeatable (analyzer/phase_frame.h) */
typedef struct cli_frames { const char *specs[16]; size_t n; } cli_frames_t;
int cli_frames_take(cli_frames_t *fr, const char *cmd, const char *v);
extern const char cli_frames_help[];

int  cmd_attach(int argc, char **argv);   /* cmd_attach.c */
int  cmd_detach(int argc, char **argv);
void cmd_attach_help(FILE *out);
int  cmd_record(int argc, char **argv);
void cmd_record_help(FILE *out);
int  cmd_report(int argc, char **argv);
void cmd_report_help(FILE *out);
int  cmd_replay(int argc, char **argv);
void cmd_replay_help(FILE *out);
int  cmd_gate(int argc, char **argv);
void cmd_gate_help(FILE *out);
int  cmd_sql(int argc, char **argv);
void cmd_sql_help(FILE *out);
int  cmd_plot(int argc, char **argv);
void cmd_plot_help(FILE *out);
int  cmd_export(int argc, char **argv);
void cmd_export_help(FILE *out);
int  cmd_diff(int argc, char **argv);
void cmd_diff_help(FILE *out);
int  cmd_html(int argc, char **argv);
void cmd_html_help(FILE *out);
int  cmd_top(int argc, char **argv);
void cmd_top_help(FILE *out);

#endif

/* launch.h — running a program under the interposer and reading back what
 * it wrote: the library half of `poolscope record` (prefix pl_). Internal
 * to the tree (the CLI and the tests use it; it is not installed).
 *
 *   char msg[PL_MSG_MAX], pre[PATH_MAX], target[PATH_MAX], out[PATH_MAX], man[PATH_MAX];
 *   pl_find_preload(NULL, pre, sizeof pre, msg, sizeof msg);
 *   pl_resolve_cmd(argv[0], NULL, target, sizeof target, msg, sizeof msg);
 *   pl_check_target(target, msg, sizeof msg);          // static, setuid: refused
 *   pl_prepare_output(o_flag, out, sizeof out, msg, sizeof msg);
 *   pl_manifest_create(man, sizeof man, msg, sizeof msg);
 *   pl_ctl_dir_create(ctl, sizeof ctl);                // "" when there is no tmpfs
 *   pl_spec_t spec = { .target = target, .argv = argv, .preload = pre, .out = out, .manifest = man,
 *                      .ctl_dir = ctl };
 *   pl_result_t res;
 *   pl_run(&spec, &res, msg, sizeof msg);              // forwards SIGINT/TERM/HUP meanwhile
 *   pl_summary_t *s = pl_summary_read(man, &opts, &err);   // opts.ctl_dir = ctl: SIGKILL recovery
 *   pl_summary_print(s, o_flag, stderr);
 *   pl_ctl_dir_remove(ctl);
 *   return res.exit_code;
 *
 * Every function that can fail returns 0 or a negative PSC_* code
 * (include/poolscope/error.h) and writes one line saying what is wrong into
 * msg (no trailing newline, no "poolscope:" prefix). Nothing here exits or
 * prints on its own: the caller prints msg. No global state.
 */
#ifndef POOLSCOPE_LAUNCH_H
#define POOLSCOPE_LAUNCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define PL_MSG_MAX 8400            /* room for two paths and a sentence */
#define PL_PRELOAD_NAME "libpoolscope-preload.so"
/* Exit statuses of a command that never ran, as a shell reports them. */
enum { PL_EXIT_USAGE = 2, PL_EXIT_NOT_EXEC = 126, PL_EXIT_NOT_FOUND = 127 };

/* ---- finding things -------------------------------------------------------- */

/* The preload library as an absolute path: $POOLSCOPE_PRELOAD_LIB if set
 * (it must name a readable file), else <bindir>/../lib/ and then
 * <bindir>/../lib/poolscope/ (bindir NULL: the directory of
 * /proc/self/exe). 0, PSC_ENOENT (message names the places looked at),
 * PSC_ERANGE (out too small), PSC_EIO. */
int pl_find_preload(const char *bindir, char *out, size_t cap, char *msg, size_t mcap);

/* Resolve a command name as execvp does: a name with a slash as it is
 * (it must be an executable regular file), otherwise the first executable
 * regular file along `path_env` (NULL: $PATH; unset or empty:
 * /usr/local/bin:/usr/bin:/bin). An empty PATH element is the current
 * directory; an element too long to join with the name is skipped.
 * 0; PSC_ENOENT not found (a shell exits 127), PSC_ERANGE name too long
 * (127), PSC_EINVAL not an executable file (126). */
int pl_resolve_cmd(const char *name, const char *path_env, char *out, size_t cap,
                   char *msg, size_t mcap);
/* The exit status a shell reports for a pl_resolve_cmd error. */
int pl_resolve_exit_code(int err);

/* Refuse a target LD_PRELOAD cannot reach: a setuid or setgid file (the
 * loader ignores LD_PRELOAD in secure-execution mode), a static ELF (no
 * PT_INTERP). A "#!" script is judged by its interpreter (4 levels, as the
 * kernel). A file that is neither ELF nor "#!" is fine (exec hands it to
 * /bin/sh). 0; PSC_EUNSUP refused; PSC_ENOENT missing; PSC_EINVAL not a
 * regular file; PSC_ECORRUPT a malformed ELF file; PSC_EIO unreadable. */
int pl_check_target(const char *path, char *msg, size_t mcap);

/* Where the first trace goes, checked before anything runs. `out` is the
 * -o file or NULL (then <cwd>/poolscope.<pid>.pst is chosen by the child).
 * Writes the absolute path of `out` (or the working directory when out is
 * NULL) into abs. The directory must exist, be writable and take a new
 * file (a probe file is created and removed: access() alone says yes to
 * root on a read-only mount). An existing `out` is refused (a trace is
 * never overwritten). 0; PSC_EINVAL `out` exists; PSC_ENOENT / PSC_EIO the
 * directory is missing / not writable (the message names it); PSC_ERANGE. */
int pl_prepare_output(const char *out, char *abs, size_t cap, char *msg, size_t mcap);

/* A new empty manifest file in $TMPDIR (default /tmp); the caller unlinks
 * it. 0 or PSC_EIO. */
int pl_manifest_create(char *path, size_t cap, char *msg, size_t mcap);

/* The run's private directory for the images' counters files (ctl.h):
 * mkdtemp of PST_CTL_DIR_TMPL, mode 0700. dir is "" when it cannot be made
 * (no /dev/shm): the run goes on without SIGKILL recovery. */
void pl_ctl_dir_create(char *dir, size_t cap);
/* Removes the counters files left in it (images still running, or killed
 * ones whose trace could not be finished) and the directory. "" : nothing. */
void pl_ctl_dir_remove(const char *dir);

/* ---- running ---------------------------------------------------------------- */

/* The stack mode `poolscope record` uses without --stacks: dwarf, the one
 * mode that gives whole stacks through code built without frame pointers
 * (python3, libstdc++, most distribution libraries), measured by
 * scripts/bench-stacks.sh (README, "Sites"). */
#define PL_STACKS_DEFAULT "dwarf"

typedef struct pl_spec {
    const char *target;        /* resolved path (pl_resolve_cmd) */
    char *const *argv;         /* argv of the program, NULL-terminated */
    const char *preload;       /* absolute path of the preload library; NULL: run the
                                  program plainly (no LD_PRELOAD, no POOLSCOPE_*) */
    const char *out;           /* absolute trace path; NULL: <cwd>/poolscope.<pid>.pst */
    const char *manifest;      /* POOLSCOPE_MANIFEST, NULL = unset */
    const char *ctl_dir;       /* POOLSCOPE_CTL_DIR (pl_ctl_dir_create), NULL or "" = unset */
    const char *stacks;        /* POOLSCOPE_STACKS none|fp|dwarf, NULL = the preload's own
                                  default (none); `record` passes PL_STACKS_DEFAULT */
    long depth;                /* POOLSCOPE_DEPTH, 0 = default */
    const char *follow_exec;   /* POOLSCOPE_FOLLOW_EXEC, NULL = unset */
    int signo;                 /* POOLSCOPE_SIGNAL, 0 = unset */
    int paused;                /* POOLSCOPE_PAUSED=1 */
    const char *scope_funcs;   /* POOLSCOPE_SCOPE_FUNCS "FUNC=NAME,...", NULL = unset */
    /* Called in the parent once the exec has happened (NULL: not called). */
    void (*started)(void *ctx, pid_t pid);
    void *started_ctx;
    /* Bounded windows (record --duration, --until-signal): recording of
     * every image of the run stops (pst_ctl_stop, ctl.h; needs ctl_dir)
     * stop_after_ns after the exec (0: never), or when this process gets
     * stop_signo (0: none; it is not forwarded); the program runs on.
     * `stopping` is called once then, with what stopped it (1 duration,
     * 2 signal) and the images asked (-1: the stop could not be asked).
     * stop_signo stays blocked in the calling thread after pl_run returns. */
    uint64_t stop_after_ns;
    int stop_signo;
    void (*stopping)(void *ctx, int why, int images);
} pl_spec_t;

typedef struct pl_result {
    pid_t pid;                 /* the child, 0 if none was forked */
    int status;                /* its wait status */
    int exit_code;             /* what record exits with: the program's code, 128+N if
                                  signal N killed it; for a program that never ran
                                  2 (setup), 126 (could not exec) or 127 (not found) */
    char comm[16];             /* the kernel's name of the child's last image when it
                                  exited (/proc/PID/comm of the zombie), "" if unknown */
} pl_result_t;

/* Fork, set the environment of libtrace/preload/README.md in the child
 * (LD_PRELOAD prepended, POOLSCOPE_OUT/MANIFEST, the POOLSCOPE_* flags;
 * stale POOLSCOPE_* flags from outside dropped) and exec the target (a
 * file exec refuses with ENOEXEC runs under /bin/sh, as execvp does).
 * While waiting, SIGINT, SIGTERM and SIGHUP sent to this process are
 * forwarded to the child (not the kernel's: a terminal's ^C already reaches
 * the whole foreground group). They and SIGCHLD are blocked in the calling
 * thread and read from a signalfd meanwhile (SIGCHLD set to its default
 * action); mask and SIGCHLD action are back on return. In a process with
 * other threads those must block the three signals too, or the kernel may
 * hand them to one of them (a CLI has no other threads). SIGCHLD need not
 * be: the child's exit is seen through a pidfd (Linux 5.3), so a SIGCHLD
 * another thread takes cannot leave pl_run waiting forever; without a
 * pidfd it looks for the exit every 100 ms as well.
 * 0 when the program ran (res->status, res->exit_code); a negative code
 * with msg when it never ran: PSC_ENOENT (exit code 127), PSC_EUNSUP
 * (could not exec, 126), PSC_EINVAL / PSC_EIO (setup in the child or the
 * fork failed, 2). */
int pl_run(const pl_spec_t *spec, pl_result_t *res, char *msg, size_t mcap);

/* Exit status as a shell reports it: the code, 128+N for signal N. */
int pl_exit_code(int wait_status);

/* ---- what was written ------------------------------------------------------ */

/* Parse one manifest line "pid<TAB>path" (trailing newline allowed).
 * 0 with *pid and *path (pointing into line, cut in place), or -1 for a
 * malformed line. */
int pl_manifest_line(char *line, long *pid, char **path);

/* What one trace says. From its END chunk alone when it has a valid one
 * (nothing else is read: scanned_bytes 0); otherwise the trace is read
 * with the streaming reader as far as it goes. */
typedef struct pl_trace_info {
    int      err;              /* 0, or PSC_E*: the file could not be read */
    int      from_end;         /* 1: the counts are the END chunk's */
    uint64_t events;           /* event records (TS not counted) */
    uint64_t lost;             /* from END: lost outside LOST records; read: all lost */
    uint64_t streams;
    int      truncated;        /* no END chunk (the process did not finish cleanly) */
    int      corrupt;          /* reading stopped at a damaged chunk */
    uint64_t pid, exec_gen, parent_pid;   /* from the header */
    char     exe[64];          /* basename of the traced executable, "" if unknown */
    char     arg0[64];         /* basename of its argv[0], "" if unknown */
    uint64_t scanned_bytes;    /* bytes read beyond the file header and the END chunk */
    int      killed;           /* the process was killed: END written by recovery (ctl.h), lost exact */
    int      own_malloc;       /* its executable (header EXE) defines malloc, calloc, realloc or
                                  free in its dynamic symbol table: that definition, not the
                                  tracer's, serves every call (the loader looks in the
                                  executable first) */
    int      no_heap;          /* own_malloc, and the complete trace holds no malloc-family
                                  event (set by pl_summary_read) */
} pl_trace_info_t;

/* Fills *info; returns info->err. A trace without END whose counters file
 * is in ctl_dir (NULL: none) is finished first (pst_recover). */
int pl_trace_info(const char *path, const char *ctl_dir, pl_trace_info_t *info);

typedef struct pl_summary_opts {
    pid_t first_pid;           /* record's own child, 0 = unknown */
    const char *first_comm;    /* pl_result_t.comm; NULL or "" = unknown */
    const char *follow_exec;   /* the --follow-exec pattern, NULL = none */
    const char *ctl_dir;       /* the run's counters directory, NULL = none */
} pl_summary_opts_t;

typedef struct pl_entry {
    long pid;                  /* as the manifest says */
    char *path;
    pl_trace_info_t info;
} pl_entry_t;

typedef struct pl_untraced {
    long pid;                  /* a fork child that could not open its trace */
    int err;                   /* errno of the failure (EMFILE: no descriptor left), 0 unknown */
} pl_untraced_t;

typedef struct pl_summary {
    pl_entry_t *entries;       /* in manifest order */
    size_t n;
    char **notes;              /* "pid N: child exec'd PATH without the tracer (...)",
                                  "record: ..." for the warnings below */
    size_t n_notes;
    pl_untraced_t *untraced;   /* by pid; from the counters directory */
    size_t n_untraced;
    size_t n_no_heap;          /* entries with info.no_heap */
} pl_summary_t;

/* Read the manifest and every trace it lists, then look for images that
 * exec'd a program which was not traced (see launch.c, "Untraced
 * children", for exactly what is relied on). A missing manifest is an
 * empty summary. NULL only on allocation failure (*err PSC_ENOMEM).
 * Also warns (notes "record: ...", see launch.c, "Silent gaps"):
 *   - fork children that could not open their trace: the interposer
 *     leaves "<pid>.<k>.untraced" -> "<errno>" in opts->ctl_dir; one note
 *     per errno, naming the count and the pids;
 *   - an image whose executable has its own malloc (own_malloc) and whose
 *     complete trace holds no malloc-family event: one note per program
 *     (its trace read as far as the first such event, counted in
 *     scanned_bytes). */
pl_summary_t *pl_summary_read(const char *manifest, const pl_summary_opts_t *opts, int *err);
void pl_summary_free(pl_summary_t *s);   /* accepts NULL */

/* One line per trace ("poolscope: pid N: PATH: E events[, L lost]
 * [, truncated ...][, corrupt ...] [exe]"), then the notes, then a warning
 * if nothing was written (`expected_out`, may be NULL, is named in it).
 * Returns the number of traces listed. */
size_t pl_summary_print(const pl_summary_t *s, const char *expected_out, FILE *out);

#endif

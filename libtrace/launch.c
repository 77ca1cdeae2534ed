/* launch.c — the library half of `poolscope record`: check that a program
 * can be traced, run it under the interposer, and say what was written.
 *
 * In the order record uses it:
 *   1. find the preload library (an override, else next to the executable:
 *      build tree <bin>/../lib/, installed <prefix>/lib/poolscope/);
 *   2. resolve the command through PATH as execvp would, and refuse what
 *      LD_PRELOAD cannot reach: a static ELF (no PT_INTERP) or a setuid /
 *      setgid file (the loader drops LD_PRELOAD in secure-execution mode);
 *      a "#!" script is judged by its interpreter;
 *   3. check the output directory before anything runs (exists, writable,
 *      takes a new file) and refuse an existing -o file;
 *   4. fork and exec with the environment of libtrace/preload/README.md,
 *      built in the parent so the child only fills in its pid and calls
 *      execve (nothing that takes a lock between fork and exec). A
 *      close-on-exec pipe carries a failure before or at the exec back;
 *   5. forward SIGINT/SIGTERM/SIGHUP sent to us while the program runs
 *      (blocked and read from a signalfd, with SIGCHLD); see the child
 *      exit through a pidfd, not through SIGCHLD, which another thread
 *      may take; wait without reaping first, to read the zombie's
 *      /proc/PID/comm (the kernel's name of its last image), then reap;
 *   6. read the manifest (one "pid<TAB>path" line per traced image) and
 *      each trace's END chunk (pst_read_end: header and last bytes only; a
 *      trace without a valid END is read with the streaming reader, as far
 *      as it goes), and look for images that exec'd an untraced program.
 *
 * Untraced children. The interposer hands LD_PRELOAD on to every child but
 * cannot stop a program from removing it (`env -u LD_PRELOAD prog`, an
 * execve with a cleaned environment). Such a child writes no trace and no
 * manifest line. What this file relies on to notice it, without reading
 * the traces' events (which is what record must no longer do):
 *   - the interposer records EXEC(path) just before an exec, flushes every
 *     stream and writes END (hooks_proc.c, end.c ps_exec_begin), so after a
 *     successful exec the EXEC record is the last record of its thread's
 *     stream, in that stream's last EVENTS chunk;
 *   - a traced successor image has the same pid and a higher EXEC_GEN in
 *     its header, and a manifest line. So only the LAST traced image of
 *     each pid can have exec'd without the tracer;
 *   - for a pid other than record's own child there is no cheap evidence
 *     that it exec'd, so its last image is always looked at: the chunk
 *     headers are walked (16 bytes each) and each stream's last EVENTS chunk
 *     is decoded (bounded by one flush per thread, not by the trace's
 *     length), plus the META chunks back to the EXEC path's definition;
 *   - for record's own child, whose traces are usually the big ones, the
 *     look happens only when the kernel's name of its final image (the
 *     zombie's comm) is neither the basename of the last traced image's
 *     executable nor of its argv[0]: an exec into something else happened,
 *     or the program renamed itself (then the look finds no EXEC and costs
 *     the bounded read above);
 *   - an EXEC whose path does not resolve to an executable file now (via
 *     PATH when it has no slash) is taken as a failed exec and not noted;
 *     one LD_PRELOAD cannot reach (static, setuid) is noted as such;
 *     with --follow-exec, a path the pattern does not match was left
 *     untraced on purpose and is not noted either.
 * Not seen: a posix_spawn'd child with a cleaned environment (its FORK
 * record can sit anywhere in the parent's trace, so finding it means
 * reading the whole trace), and record's own child exec'ing, untraced, a
 * program of the same name (its comm does not change). The bytes read for
 * the look are counted in the entry's scanned_bytes.
 *
 * Silent gaps. Two ways a program runs without the trace showing what it
 * did, each said in a "record: ..." note:
 *   - a fork child that cannot open its trace file (RLIMIT_NOFILE reached,
 *     the directory full) runs untraced. It cannot write a manifest line
 *     then (no descriptor), so the interposer makes a symbolic link
 *     "<pid>.<k>.untraced" -> "<errno>" in the run's counters directory
 *     (hooks_proc.c, ps_note_untraced: a link takes no descriptor), read
 *     here. Not covered: an exec'd or first image that cannot open its
 *     trace (the first: "no trace was written"), and runs without a
 *     counters directory (no /dev/shm).
 *   - a program whose executable defines malloc (or calloc, realloc,
 *     free) in its dynamic symbol table: the loader finds the
 *     executable's definition before the preloaded one, so the tracer sees
 *     no heap call at all (a statically linked allocator, jemalloc or
 *     tcmalloc linked in). The rule: the executable named in the trace's
 *     header exports such a definition AND its complete trace holds no
 *     malloc-family event. The symbol table is read for every trace (a
 *     few KiB); the events only for such a program's traces, up to the
 *     first malloc-family event, so an ordinary trace is still read from
 *     its END alone. Not seen: a program that never calls malloc without
 *     defining it (its own mmap-based allocator, e.g. Go's): telling it
 *     from one that made no allocation would mean reading every trace.
 */
#include "launch.h"
#include "launch_int.h"
#include "ctl.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "poolscope/error.h"
#include "poolscope/format.h"
#include "poolscope/reader.h"

#include "escape.h"


void pl_set_msg(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

const char *pl_base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int pl_is_readable_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

int pl_is_exec_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}


/* ---- 1. the preload library ---------------------------------------------------- */

static int copy_out(char *out, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap) return PSC_ERANGE;
    memcpy(out, s, n + 1);
    return 0;
}

int pl_find_preload(const char *bindir, char *out, size_t cap, char *msg, size_t mcap)
{
    char real[PATH_MAX];
    const char *env = getenv("POOLSCOPE_PRELOAD_LIB");
    if (env && *env) {
        if (!realpath(env, real) || !pl_is_readable_file(real)) {
            pl_set_msg(msg, mcap, "POOLSCOPE_PRELOAD_LIB=%s: no such readable file", env);
            return PSC_ENOENT;
        }
        if (copy_out(out, cap, real)) { pl_set_msg(msg, mcap, "%s: path too long", real); return PSC_ERANGE; }
        return 0;
    }
    char dir[PATH_MAX];
    if (bindir) {
        if (copy_out(dir, sizeof dir, bindir)) { pl_set_msg(msg, mcap, "%s: path too long", bindir); return PSC_ERANGE; }
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0) { pl_set_msg(msg, mcap, "cannot read /proc/self/exe: %s", strerror(errno)); return PSC_EIO; }
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
    }
    static const char *const rel[] = { "/../lib/" PL_PRELOAD_NAME, "/../lib/poolscope/" PL_PRELOAD_NAME };
    char tried[2][PATH_MAX];
    for (size_t i = 0; i < 2; i++) {
        /* a path too long to hold is simply not a candidate */
        if ((size_t)snprintf(tried[i], sizeof tried[i], "%s%s", dir, rel[i]) >= sizeof tried[i]) {
            tried[i][0] = 0;
            continue;
        }
        if (pl_is_readable_file(tried[i]) && realpath(tried[i], real)) {
            if (copy_out(out, cap, real)) { pl_set_msg(msg, mcap, "%s: path too long", real); return PSC_ERANGE; }
            return 0;
        }
    }
    pl_set_msg(msg, mcap, "preload library not found (looked for %s and %s); build it with `make` or set "
            "POOLSCOPE_PRELOAD_LIB", tried[0], tried[1]);
    return PSC_ENOENT;
}

/* ---- 3. the output ---------------------------------------------------------------- */

/* Can a new file be made in dir? 0, or PSC_ENOENT / PSC_EIO with msg
 * "<what>cannot write in <where>: <why>". */
static int dir_takes_files(const char *dir, const char *what, const char *where, char *msg, size_t mcap)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        pl_set_msg(msg, mcap, "%scannot write in %s: %s", what, where, strerror(e));
        return e == ENOENT || e == ENOTDIR ? PSC_ENOENT : PSC_EIO;
    }
    if (!S_ISDIR(st.st_mode)) {
        pl_set_msg(msg, mcap, "%scannot write in %s: not a directory", what, where);
        return PSC_ENOENT;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        pl_set_msg(msg, mcap, "%scannot write in %s: %s", what, where, strerror(errno));
        return PSC_EIO;
    }
    /* access() says yes to root on a read-only mount and in /proc: try it */
    char probe[PATH_MAX];
    if ((size_t)snprintf(probe, sizeof probe, "%s/.poolscope-probe.XXXXXX", dir) >= sizeof probe) {
        pl_set_msg(msg, mcap, "%scannot write in %s: path too long", what, where);
        return PSC_ERANGE;
    }
    int fd = mkostemp(probe, O_CLOEXEC);
    if (fd < 0) {
        pl_set_msg(msg, mcap, "%scannot write in %s: %s", what, where, strerror(errno));
        return PSC_EIO;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int pl_prepare_output(const char *out, char *abs, size_t cap, char *msg, size_t mcap)
{
    char cwd[PATH_MAX];
    if ((!out || out[0] != '/') && !getcwd(cwd, sizeof cwd)) {
        pl_set_msg(msg, mcap, "cannot get the current directory: %s", strerror(errno));
        return PSC_EIO;
    }
    if (!out) {
        if (copy_out(abs, cap, cwd)) { pl_set_msg(msg, mcap, "%s: path too long", cwd); return PSC_ERANGE; }
        char where[PATH_MAX + 32];
        snprintf(where, sizeof where, "the current directory %s", cwd);
        return dir_takes_files(cwd, "", where, msg, mcap);
    }
    struct stat st;
    if (lstat(out, &st) == 0) {
        pl_set_msg(msg, mcap, "%s exists; not overwriting it", out);
        return PSC_EINVAL;
    }
    int n = out[0] == '/' ? snprintf(abs, cap, "%s", out) : snprintf(abs, cap, "%s/%s", cwd, out);
    if (n < 0 || (size_t)n >= cap) { pl_set_msg(msg, mcap, "%s: path too long", out); return PSC_ERANGE; }
    char dir[PATH_MAX];
    if (copy_out(dir, sizeof dir, abs)) { pl_set_msg(msg, mcap, "%s: path too long", out); return PSC_ERANGE; }
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;   /* "/x.pst": the root */
    else *slash = 0;
    char what[PATH_MAX + 8];
    snprintf(what, sizeof what, "%s: ", out);
    return dir_takes_files(dir, what, dir, msg, mcap);
}

int pl_manifest_create(char *path, size_t cap, char *msg, size_t mcap)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(path, cap, "%s/poolscope-manifest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= cap) { pl_set_msg(msg, mcap, "TMPDIR is too long"); return PSC_ERANGE; }
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        pl_set_msg(msg, mcap, "cannot create a manifest file %s: %s", path, strerror(errno));
        return PSC_EIO;
    }
    close(fd);
    return 0;
}

void pl_ctl_dir_create(char *dir, size_t cap)
{
    if (cap <= sizeof PST_CTL_DIR_TMPL) { if (cap) dir[0] = 0; return; }
    memcpy(dir, PST_CTL_DIR_TMPL, sizeof PST_CTL_DIR_TMPL);
    if (!mkdtemp(dir)) dir[0] = 0;
}

void pl_ctl_dir_remove(const char *dir)
{
    if (!dir || !*dir) return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[PATH_MAX];
        while ((de = readdir(d))) {
            size_t n = strlen(de->d_name);
            if ((n < 5 || strcmp(de->d_name + n - 4, ".ctl")) &&
                (n < 10 || strcmp(de->d_name + n - 9, ".untraced")) && strcmp(de->d_name, PST_CTL_STOP))
                continue;   /* only what the images made */
            if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- 4, 5. running ------------------------------------------------------------------ */

/* Forwarded while the program runs. They (and SIGCHLD) are blocked and read
 * from a signalfd instead of caught: no handler, no static for it to find
 * the child's pid in, and nothing a sanitizer's deferred signal delivery
 * could hold back until the program has exited. */
static const int fwd_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define N_FWD (sizeof fwd_signals / sizeof fwd_signals[0])

/* What the child needs, all made before fork. */
typedef struct plan {
    char **envp;          /* the child's environment */
    size_t n_env, cap_env;
    char **owned;         /* strings we allocated */
    size_t n_owned, cap_owned;
    char **sh_argv;       /* for a file exec refuses with ENOEXEC */
    char *out_var;        /* "POOLSCOPE_OUT=<cwd>/poolscope." + digits + ".pst" room, or NULL */
    size_t out_digits;    /* offset where the pid goes */
} plan_t;

/* What a failing child reports through the pipe. */
typedef struct child_report { int stage, err; } child_report_t;
enum { STAGE_EXISTS = 1, STAGE_EXEC = 2 };

static int plan_push(plan_t *p, char *s)
{
    if (p->n_env + 2 > p->cap_env) {
        size_t nc = p->cap_env ? 2 * p->cap_env : 64;
        char **v = realloc(p->envp, nc * sizeof *v);
        if (!v) return PSC_ENOMEM;
        p->envp = v;
        p->cap_env = nc;
    }
    p->envp[p->n_env++] = s;
    p->envp[p->n_env] = NULL;
    return 0;
}

/* A new "NAME=value" string, owned by the plan and added to envp. */
static int plan_set(plan_t *p, const char *name, const char *value)
{
    if (p->n_owned + 1 > p->cap_owned) {
        size_t nc = p->cap_owned ? 2 * p->cap_owned : 16;
        char **v = realloc(p->owned, nc * sizeof *v);
        if (!v) return PSC_ENOMEM;
        p->owned = v;
        p->cap_owned = nc;
    }
    size_t n = strlen(name) + strlen(value) + 2;
    char *s = malloc(n);
    if (!s) return PSC_ENOMEM;
    snprintf(s, n, "%s=%s", name, value);
    p->owned[p->n_owned++] = s;
    return plan_push(p, s);
}

static void plan_free(plan_t *p)
{
    for (size_t i = 0; i < p->n_owned; i++) free(p->owned[i]);
    free(p->owned);
    free(p->envp);
    free(p->sh_argv);
    free(p->out_var);
    memset(p, 0, sizeof *p);
}

static int env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* record's flags are authoritative: stale settings from outside go. The
 * library's own POOLSCOPE_GEN / POOLSCOPE_EXEC_PATH are left as they are. */
static const char *const dropped_vars[] = {
    "LD_PRELOAD", "POOLSCOPE_OUT", "POOLSCOPE_MANIFEST", "POOLSCOPE_STACKS", "POOLSCOPE_DEPTH",
    "POOLSCOPE_FOLLOW_EXEC", "POOLSCOPE_SIGNAL", "POOLSCOPE_PAUSED", "POOLSCOPE_SCOPE_FUNCS",
    PST_CTL_DIR_ENV,
};

static int plan_make(const pl_spec_t *s, plan_t *p, char *msg, size_t mcap)
{
    memset(p, 0, sizeof *p);
    size_t argc = 0;
    while (s->argv[argc]) argc++;
    if (!(p->sh_argv = calloc(argc + 2, sizeof *p->sh_argv))) goto nomem;
    p->sh_argv[0] = (char *)"/bin/sh";
    p->sh_argv[1] = (char *)s->target;
    for (size_t i = 1; i < argc; i++) p->sh_argv[i + 1] = s->argv[i];

    if (!s->preload) {   /* run plainly: the environment as it is */
        for (char **e = environ; e && *e; e++)
            if (plan_push(p, *e)) goto nomem;
        if (!p->envp && plan_push(p, NULL)) goto nomem;
        return 0;
    }
    const char *old = NULL;
    for (char **e = environ; e && *e; e++) {
        int drop = 0;
        for (size_t i = 0; i < sizeof dropped_vars / sizeof dropped_vars[0]; i++)
            if (env_is(*e, dropped_vars[i])) drop = 1;
        if (env_is(*e, "LD_PRELOAD")) old = *e + strlen("LD_PRELOAD=");
        if (!drop && plan_push(p, *e)) goto nomem;
    }
    /* LD_PRELOAD: ours first, what was there after it */
    if (old && *old && !strstr(old, s->preload)) {
        size_t n = strlen(s->preload) + strlen(old) + 2;
        char *v = malloc(n);
        if (!v) goto nomem;
        snprintf(v, n, "%s:%s", s->preload, old);
        int rc = plan_set(p, "LD_PRELOAD", v);
        free(v);
        if (rc) goto nomem;
    } else if (plan_set(p, "LD_PRELOAD", old && *old ? old : s->preload)) {
        goto nomem;
    }
    if (s->out) {
        if (plan_set(p, "POOLSCOPE_OUT", s->out)) goto nomem;
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            pl_set_msg(msg, mcap, "cannot get the current directory: %s", strerror(errno));
            plan_free(p);
            return PSC_EIO;
        }
        size_t n = strlen("POOLSCOPE_OUT=") + strlen(cwd) + strlen("/poolscope.") + 24 + 5;
        if (!(p->out_var = malloc(n))) goto nomem;
        int k = snprintf(p->out_var, n, "POOLSCOPE_OUT=%s/poolscope.", cwd);
        p->out_digits = (size_t)k;
        if (plan_push(p, p->out_var)) goto nomem;
    }
    char num[32];
    if (s->manifest && plan_set(p, "POOLSCOPE_MANIFEST", s->manifest)) goto nomem;
    if (s->ctl_dir && *s->ctl_dir && plan_set(p, PST_CTL_DIR_ENV, s->ctl_dir)) goto nomem;
    if (s->stacks && plan_set(p, "POOLSCOPE_STACKS", s->stacks)) goto nomem;
    if (s->depth) {
        snprintf(num, sizeof num, "%ld", s->depth);
        if (plan_set(p, "POOLSCOPE_DEPTH", num)) goto nomem;
    }
    if (s->follow_exec && plan_set(p, "POOLSCOPE_FOLLOW_EXEC", s->follow_exec)) goto nomem;
    if (s->signo) {
        snprintf(num, sizeof num, "%d", s->signo);
        if (plan_set(p, "POOLSCOPE_SIGNAL", num)) goto nomem;
    }
    if (s->paused && plan_set(p, "POOLSCOPE_PAUSED", "1")) goto nomem;
    if (s->scope_funcs && plan_set(p, "POOLSCOPE_SCOPE_FUNCS", s->scope_funcs)) goto nomem;
    return 0;
nomem:
    pl_set_msg(msg, mcap, "out of memory setting up the environment");
    plan_free(p);
    return PSC_ENOMEM;
}

/* After fork, before exec: async-signal-safe calls only. Never returns. */
static void child_exec(const pl_spec_t *s, plan_t *p, int errfd, const sigset_t *oldmask,
                       const struct sigaction *oldchld)
{
    child_report_t rep = { 0, 0 };
    for (size_t i = 0; i < N_FWD; i++) signal(fwd_signals[i], SIG_DFL);
    sigaction(SIGCHLD, oldchld, NULL);
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    if (p->out_var) {
        /* <cwd>/poolscope.<pid>.pst, never an existing file */
        char digits[24];
        int n = 0;
        unsigned long v = (unsigned long)getpid();
        do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
        char *q = p->out_var + p->out_digits;
        while (n) *q++ = digits[--n];
        memcpy(q, ".pst", 5);
        struct stat st;
        if (lstat(p->out_var + strlen("POOLSCOPE_OUT="), &st) == 0) {
            rep.stage = STAGE_EXISTS;
            rep.err = EEXIST;
            if (write(errfd, &rep, sizeof rep) < 0) { /* nothing more to do */ }
            _exit(PL_EXIT_USAGE);
        }
    }
    execve(s->target, s->argv, p->envp);
    if (errno == ENOEXEC)   /* as execvp: a file without a known header is a shell script */
        execve("/bin/sh", p->sh_argv, p->envp);
    rep.stage = STAGE_EXEC;
    rep.err = errno;
    if (write(errfd, &rep, sizeof rep) < 0) { /* nothing more to do */ }
    _exit(rep.err == ENOENT ? PL_EXIT_NOT_FOUND : PL_EXIT_NOT_EXEC);
}

int pl_exit_code(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

/* A descriptor that polls readable once `pid` has exited (Linux 5.3), -1
 * when the kernel has none. */
static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);   /* close-on-exec by itself */
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Without a pidfd, how long a SIGCHLD taken by another thread can delay
 * seeing the child's exit: the wait looks again this often. */
#define PL_NO_PIDFD_POLL_MS 100

static void read_comm(pid_t pid, char comm[16])
{
    char p[64];
    comm[0] = 0;
    snprintf(p, sizeof p, "/proc/%ld/comm", (long)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, comm, 15);
    close(fd);
    if (n <= 0) { comm[0] = 0; return; }
    comm[n] = 0;
    char *nl = strchr(comm, '\n');
    if (nl) *nl = 0;
}

int pl_run(const pl_spec_t *s, pl_result_t *res, char *msg, size_t mcap)
{
    memset(res, 0, sizeof *res);
    res->exit_code = PL_EXIT_USAGE;
    if (!s || !s->target || !s->argv || !s->argv[0]) {
        pl_set_msg(msg, mcap, "nothing to run");
        return PSC_EINVAL;
    }
    plan_t plan;
    int rc = plan_make(s, &plan, msg, mcap);
    if (rc) return rc;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        pl_set_msg(msg, mcap, "pipe: %s", strerror(errno));
        plan_free(&plan);
        return PSC_EIO;
    }

    /* Block the forwarded signals and SIGCHLD before fork: whatever comes
     * before the child's pid is known waits in the signalfd. SIGCHLD must
     * not be ignored meanwhile (the kernel would reap the child itself). */
    sigset_t block, oldmask;
    sigemptyset(&block);
    for (size_t i = 0; i < N_FWD; i++) sigaddset(&block, fwd_signals[i]);
    sigaddset(&block, SIGCHLD);
    if (s->stop_signo > 0) sigaddset(&block, s->stop_signo);
    struct sigaction dfl, oldchld;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &oldchld);
    pthread_sigmask(SIG_BLOCK, &block, &oldmask);
    /* non-blocking: another thread may take what poll said was there */
    int sfd = signalfd(-1, &block, SFD_CLOEXEC | SFD_NONBLOCK);

    fflush(NULL);
    pid_t pid = sfd >= 0 ? fork() : -1;
    if (pid == 0) {
        close(pfd[0]);
        child_exec(s, &plan, pfd[1], &oldmask, &oldchld);
    }
    int fork_errno = errno;
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        if (sfd >= 0) close(sfd);
        pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
        sigaction(SIGCHLD, &oldchld, NULL);
        plan_free(&plan);
        pl_set_msg(msg, mcap, "%s: %s", sfd < 0 ? "signalfd" : "fork", strerror(fork_errno));
        return PSC_EIO;
    }
    res->pid = pid;

    /* EOF on the pipe: the exec happened. A report: the child failed first. */
    child_report_t rep = { 0, 0 };
    size_t got = 0;
    while (got < sizeof rep) {
        ssize_t r = read(pfd[0], (char *)&rep + got, sizeof rep - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(pfd[0]);
    if (got == 0 && s->started) s->started(s->started_ctx, pid);

    /* Until the child has exited: forward what was sent to us (si_code <= 0:
     * kill, sigqueue, tkill), not what the kernel sent (a terminal's ^C
     * reaches the whole foreground group, the child has it already). The
     * child is waited for without reaping, so the zombie's comm can be
     * read, then reaped.
     * Its exit is seen through a pidfd. SIGCHLD is process-directed and
     * blocked in this thread only: the kernel hands it to any other thread
     * that does not block it, where the default action drops it, and a
     * wait on the signalfd alone then never ends (a test's helper thread
     * did that under tsan). Without a pidfd (kernel < 5.3) the wait looks
     * every PL_NO_PIDFD_POLL_MS instead. */
    int pidfd = open_pidfd(pid);
    uint64_t t_stop = s->stop_after_ns && got == 0 ? mono_now() + s->stop_after_ns : 0;
    int stopped = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si.si_pid == pid) break;
        if (w < 0 && errno != EINTR) break;
        int timeout = pidfd >= 0 ? -1 : PL_NO_PIDFD_POLL_MS;
        if (t_stop && !stopped) {   /* --duration: wait for a signal until then */
            uint64_t now = mono_now();
            if (now >= t_stop) {
                stopped = 1;
                int k = pst_ctl_stop(s->ctl_dir);
                if (s->stopping) s->stopping(s->started_ctx, 1, k);
                continue;
            }
            int left = (int)((t_stop - now + 999999) / 1000000);
            if (timeout < 0 || left < timeout) timeout = left;
        }
        struct pollfd pf[2] = { { .fd = sfd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
        int np = poll(pf, 2, timeout);   /* a pidfd of -1 is left out */
        if (np < 0 && errno != EINTR) {   /* ENOMEM; wait without forwarding */
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        if (np > 0 && pf[1].revents) {
            /* exited: the next waitid sees it, unless a tracer holds the
             * zombie; then keep it from making this loop spin */
            close(pidfd);
            pidfd = -1;
        }
        if (np <= 0 || !(pf[0].revents & POLLIN)) continue;   /* time, EINTR, the child exited */
        struct signalfd_siginfo fi;
        ssize_t n = read(sfd, &fi, sizeof fi);
        if (n == (ssize_t)sizeof fi && s->stop_signo > 0 && (int)fi.ssi_signo == s->stop_signo) {
            if (!stopped && got == 0) {
                stopped = 1;
                int k = pst_ctl_stop(s->ctl_dir);
                if (s->stopping) s->stopping(s->started_ctx, 2, k);
            }
            continue;
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n != (ssize_t)sizeof fi) {   /* cannot happen; wait without forwarding */
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        if (fi.ssi_signo != SIGCHLD && fi.ssi_code <= 0) kill(pid, (int)fi.ssi_signo);
    }
    if (pidfd >= 0) close(pidfd);
    read_comm(pid, res->comm);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    close(sfd);
    /* the stop signal stays blocked: one sent late (the program has just
     * ended) must not kill the caller before it says what was written */
    if (s->stop_signo > 0) sigaddset(&oldmask, s->stop_signo);
    pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
    sigaction(SIGCHLD, &oldchld, NULL);
    res->status = status;
    res->exit_code = pl_exit_code(status);

    if (got == sizeof rep) {
        res->comm[0] = 0;
        if (rep.stage == STAGE_EXISTS) {
            const char *o = plan.out_var ? plan.out_var + strlen("POOLSCOPE_OUT=") : "?";
            pl_set_msg(msg, mcap, "%s exists; not overwriting it (use -o)", o);
            rc = PSC_EINVAL;
        } else {
            pl_set_msg(msg, mcap, "%s: %s", s->target, strerror(rep.err));
            rc = rep.err == ENOENT ? PSC_ENOENT : PSC_EUNSUP;
        }
    }
    plan_free(&plan);
    return rc;
}

/* ---- 6. what was written -------------------------------------------------------------- */

int pl_manifest_line(char *line, long *pid, char **path)
{
    char *tab = strchr(line, '\t');
    if (!tab || tab == line) return -1;
    char *end;
    errno = 0;
    long p = strtol(line, &end, 10);
    if (errno || end != tab || p <= 0) return -1;
    char *s = tab + 1;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
    if (!n) return -1;
    *pid = p;
    *path = s;
    return 0;
}

static void set_base(char *dst, size_t cap, const char *path)
{
    const char *b = *path ? pl_base_name(path) : "";
    size_t n = strlen(b);
    if (n >= cap) n = cap - 1;   /* cut to fit */
    memcpy(dst, b, n);
    dst[n] = 0;
}

/* A trace without a valid END: read it with the streaming reader as far as
 * it goes, as record always did. */
static int scan_trace(const char *path, uint64_t header_bytes, pl_trace_info_t *info)
{
    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) {
        info->err = err ? err : PSC_EIO;
        if (info->err == PSC_ETRUNC) info->truncated = 1;
        return info->err;
    }
    pst_event_t ev;
    int rc;
    uint64_t n = 0;
    while ((rc = pst_next(r, &ev)) > 0) n++;
    const pst_status_t *st = pst_status(r);
    info->events = n;
    info->err = rc < 0 ? rc : 0;
    info->lost = st->lost;
    info->streams = st->streams;
    info->truncated = st->truncated;
    info->corrupt = st->corrupt;
    uint64_t seen = st->bytes + st->unread_bytes;
    info->scanned_bytes = seen > header_bytes ? seen - header_bytes : 0;
    pst_close(r);
    return info->err;
}

int pl_trace_info(const char *path, const char *ctl_dir, pl_trace_info_t *info)
{
    memset(info, 0, sizeof *info);
    pst_end_info_t *e = malloc(sizeof *e);   /* 4 KiB of path: not on the stack */
    if (!e) return info->err = PSC_ENOMEM;
    int rc = pst_read_end(path, e);
    if (rc == PSC_ENOENT) {
        /* no END: if the process was killed, its counters file says what
         * its rings held; recovery appends END (ctl.h), then read it */
        pst_recover_info_t ri;
        if (pst_recover(path, ctl_dir, &ri) == 1) rc = pst_read_end(path, e);
    }
    if (rc == 0 || rc == PSC_ENOENT) {
        info->pid = e->pid;
        info->exec_gen = e->exec_gen;
        info->parent_pid = e->parent_pid;
        set_base(info->exe, sizeof info->exe, e->exe);
        set_base(info->arg0, sizeof info->arg0, e->argv0);
        info->own_malloc = e->exe[0] == '/' && pl_elf_defines_malloc(e->exe) == 1;
    }
    if (rc == 0) {
        info->from_end = 1;
        info->events = e->events;
        info->lost = e->lost;
        info->streams = e->streams;
        info->killed = (e->flags & PST_END_KILLED) != 0;
    }
    uint64_t header_bytes = e->header_bytes;
    free(e);
    if (rc == 0) return 0;
    if (rc != PSC_ENOENT) return info->err = rc;
    return scan_trace(path, header_bytes, info);
}

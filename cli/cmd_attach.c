/* cmd_attach.c — `poolscope attach PID -o FILE` and `poolscope detach PID`:
 * record a window of a process that is already running.
 *
 * Injection is our own ptrace caller (libtrace/inject.c): it stops one
 * thread at a point where calling dlopen is safe, calls dlopen on the
 * preload library and then poolscope_attach_start (libtrace/preload/
 * attach.c) in it, puts every register back and lets it go; the other
 * threads run on meanwhile. (gdb did this until a kernel with a larger
 * XSAVE area than gdb 13 knows refused its register writes.) The library
 * then hooks GOT slots and records until told to stop through its counters
 * file (libtrace/ctl.h: stop_req, as `record --duration` does), which
 * restores the slots and writes END. The process runs on.
 *
 * Why the refusals: ptrace needs the permission yama gives
 * (/proc/sys/kernel/yama/ptrace_scope: 0 any process of ours, 1 only our
 * descendants unless root, 2 root only, 3 nobody); another user's process
 * and a static binary (no loader to dlopen with) cannot be attached; a
 * process with its own allocator would mix our glibc calls with its.
 *
 * While attached, /dev/shm/poolscope-attach.<uid>.<pid> is a link to the
 * counters directory, so `detach PID` finds what to stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "poolscope/error.h"
#include "ctl.h"
#include "inject.h"
#include "launch.h"

void cmd_attach_help(FILE *out)
{
    fputs("usage: poolscope attach PID -o FILE [--duration SECONDS] [--stacks dwarf|fp|none]\n"
          "       poolscope detach PID\n"
          "\n"
          "Records a window of a running process that was not started by poolscope:\n"
          "loads the tracer into it through ptrace, records every\n"
          "malloc-family and mmap-family call until --duration ends, Ctrl-C, or\n"
          "`poolscope detach PID`, then puts the process back as it was and writes FILE.\n"
          "The process runs on. In the report, frees of blocks allocated before the\n"
          "attach are 'freed, allocated before attach', and blocks still live at the\n"
          "end are 'live at detach', not leaks.\n"
          "\n"
          "  -o, --output FILE     trace to write (must not exist)\n"
          "  --duration SECONDS    stop after this long (default: until Ctrl-C or detach)\n"
          "  --stacks MODE         dwarf (default), fp or none\n"
          "\n"
          "Refused: a process of another user (root too: attach as that user), a static\n"
          "binary, no ptrace permission\n"
          "(/proc/sys/kernel/yama/ptrace_scope), a process already traced.\n", out);
}

static volatile sig_atomic_t got_sig;
static void on_sig(int s) { got_sig = s; }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void link_path(char *out, size_t cap, long pid)
{
    snprintf(out, cap, "/dev/shm/poolscope-attach.%u.%ld", (unsigned)geteuid(), pid);
}

/* A counters file (a recording under way) in dir? */
static int ctl_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".ctl")) n++;
    }
    closedir(d);
    return n;
}

/* The link of an attach that was killed: the attach that made it (the pid
 * in its directory's "owner") is gone and no window is recording there.
 * A window still recording is not stale: `detach` ends it first. */
static int link_stale(const char *lp, const char *dir)
{
    /* only a link and a directory of ours, where attach makes them: the
     * files in it are about to be removed */
    struct stat ls, ds;
    if (lstat(lp, &ls) != 0 || ls.st_uid != geteuid() || lstat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode) ||
        ds.st_uid != geteuid() || (ds.st_mode & 077) ||
        strncmp(dir, PST_CTL_DIR_TMPL, sizeof PST_CTL_DIR_TMPL - 7) != 0)
        return 0;
    char p[PATH_MAX + 16], b[32];
    snprintf(p, sizeof p, "%s/owner", dir);
    FILE *f = fopen(p, "r");
    long owner = 0;
    if (f) {
        if (fgets(b, sizeof b, f)) owner = strtol(b, NULL, 10);
        fclose(f);
    }
    int alive = owner > 0 && (kill((pid_t)owner, 0) == 0 || errno == EPERM);
    return !alive && !ctl_files(dir);
}

static void cleanup(const char *dir, const char *lp);

static int maps_has(long pid, const char *needle)
{
    char p[64], line[4608];
    snprintf(p, sizeof p, "/proc/%ld/maps", pid);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* The one-line refusal, or 0 when attaching may go ahead. */
static int refuse(long pid)
{
    char p[64];
    struct stat st;
    snprintf(p, sizeof p, "/proc/%ld", pid);
    if (pid <= 0 || stat(p, &st) != 0) {
        cli_err("attach: no such process: %ld", pid);
        return 1;
    }
    if (pid == (long)getpid()) {
        cli_err("attach: pid %ld is this poolscope", pid);
        return 1;
    }
    /* root too: the tracer runs as the process's user, and could neither
     * write the counters file into our private directory (so the window
     * could not be stopped) nor, often, the trace */
    if (st.st_uid != geteuid()) {
        cli_err("attach: pid %ld belongs to user %u, not to you (%u): attach as that user",
                pid, (unsigned)st.st_uid, (unsigned)geteuid());
        return 1;
    }
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1) scope = 0;
        fclose(f);
    }
    if (scope >= 3 || (scope >= 1 && geteuid() != 0)) {
        cli_err("attach: no ptrace permission: /proc/sys/kernel/yama/ptrace_scope is %d "
                "(attach needs 0, or root with 1 or 2)", scope);
        return 1;
    }
    int ld = maps_has(pid, "/ld-linux");
    if (ld < 0) {
        cli_err("attach: cannot read /proc/%ld/maps: %s", pid, strerror(errno));
        return 1;
    }
    char exe[PATH_MAX], line[128];
    snprintf(p, sizeof p, "/proc/%ld/status", pid);
    int zombie = 0;
    if ((f = fopen(p, "r"))) {
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "State:", 6)) zombie = strchr(line, 'Z') != NULL;
        fclose(f);
    }
    if (zombie) {   /* its maps read empty, whether or not other threads run on */
        cli_err("attach: pid %ld is a zombie (or its main thread has exited): nothing to load the tracer into", pid);
        return 1;
    }
    snprintf(p, sizeof p, "/proc/%ld/exe", pid);
    if (!ld && readlink(p, exe, sizeof exe) < 0 && errno == ENOENT) {   /* no program file: a kernel thread */
        cli_err("attach: pid %ld is a kernel thread, not a program", pid);
        return 1;
    }
    if (!ld) {
        cli_err("attach: pid %ld is a static binary (no dynamic loader): it cannot load the tracer", pid);
        return 1;
    }
    static const char *const own[] = { "libjemalloc", "libtcmalloc", "libmimalloc" };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (maps_has(pid, own[i]) == 1) {
            cli_err("attach: pid %ld uses its own allocator (%s): attach records glibc's only", pid, own[i]);
            return 1;
        }
    if (maps_has(pid, PL_PRELOAD_NAME) == 1) {
        char lp[128], dir[PATH_MAX];
        link_path(lp, sizeof lp, pid);
        ssize_t n = readlink(lp, dir, sizeof dir - 1);
        if (n > 0) {
            dir[n] = 0;
            if (link_stale(lp, dir)) {
                cleanup(dir, lp);
            } else {
                cli_err("attach: pid %ld is being recorded by another `poolscope attach`; `poolscope detach %ld` first", pid, pid);
                return 1;
            }
        }
    }
    return 0;
}

/* pi_call, waiting as long as the call takes: a thread let go in the
 * middle of our call would crash the process when the call returns. Said
 * once when it takes long (the loader busy in another thread, say). */
static int call(pi_proc_t *p, uint64_t fn, const uint64_t *args, int n, uint64_t *ret, char *msg, size_t mcap)
{
    int rc = pi_call(p, fn, args, n, 10000, ret, msg, mcap);
    if (rc == PSC_EBUSY) {
        cli_err("attach: %s; waiting for it (leaving now would crash the process)", msg);
        rc = pi_wait(p, 0, ret, msg, mcap);
    }
    return rc;
}

/* Load the tracer into pid and start a window (libtrace/inject.h picks
 * the thread and saves and restores it): dlopen the library, look up its
 * entry points with dlsym, call poolscope_attach_start. The library's
 * answer (0 recording), or -1 with msg. */
static int inject(long pid, const char *lib, const char *out, int stacks, const char *dir, char *msg, size_t mcap)
{
    pi_proc_t *p;
    if (pi_open((pid_t)pid, 5000, &p, msg, mcap) != 0) return -1;
    int rc = -1;
    uint64_t h = 0, fn = 0, api = 0, r = 0;
    uint64_t dl = pi_libc_sym(p, "dlopen"), sym = pi_libc_sym(p, "dlsym"), err = pi_libc_sym(p, "dlerror");
    if (!dl || !sym) {
        snprintf(msg, mcap, "pid %ld: no dlopen or dlsym in its C library", pid);
        goto out;
    }
    uint64_t a_lib = pi_put_str(p, lib), a_start = pi_put_str(p, "poolscope_attach_start"),
             a_api = pi_put_str(p, "poolscope_api"), a_out = pi_put_str(p, out), a_dir = pi_put_str(p, dir);
    if (!a_lib || !a_start || !a_api || !a_out || !a_dir) {
        snprintf(msg, mcap, "pid %ld: cannot write into the stack of thread %d", pid, (int)pi_tid(p));
        goto out;
    }
    if (call(p, dl, (uint64_t[]){ a_lib, RTLD_NOW }, 2, &h, msg, mcap) != 0) goto out;
    if (!h) {
        uint64_t e = 0;
        char why[256] = "";
        if (err && call(p, err, NULL, 0, &e, msg, mcap) == 0 && e) pi_read_str(p, e, why, sizeof why);
        for (char *c = why; *c; c++)   /* the process's text, bound for a terminal */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        snprintf(msg, mcap, "dlopen of the tracer failed in the process%s%s", why[0] ? ": " : "", why);
        goto out;
    }
    if (call(p, sym, (uint64_t[]){ h, a_start }, 2, &fn, msg, mcap) != 0 ||
        call(p, sym, (uint64_t[]){ h, a_api }, 2, &api, msg, mcap) != 0)
        goto out;
    if (!fn) { snprintf(msg, mcap, "%.300s has no poolscope_attach_start", lib); goto out; }
    if (call(p, fn, (uint64_t[]){ a_out, (uint64_t)stacks, a_dir }, 3, &r, msg, mcap) != 0) goto out;
    rc = (int)(int32_t)r;
    /* pool and KV events go through the program's ps__api pointer (libtrace/
     * api.c), filled by a constructor that ran before we were loaded: point
     * it at our table (it stays so after detach: a stopped tracer's emit
     * records nothing). A stripped program has no symbol to find. */
    uint64_t at = rc == 0 && api ? pi_data_sym(p, "ps__api") : 0;
    if (at && pi_write(p, at, &api, sizeof api) != 0 && getenv("POOLSCOPE_ATTACH_DEBUG"))
        fprintf(stderr, "poolscope: attach: could not set ps__api at %#llx\n", (unsigned long long)at);
    if (getenv("POOLSCOPE_ATTACH_DEBUG"))
        fprintf(stderr, "poolscope: attach: thread %d (%s), result %d, ps__api %s\n", (int)pi_tid(p),
                pi_how(p) == PI_AT_SYSCALL ? "asleep in a system call" : "stepped out to its own code", rc,
                at ? "set" : "not found");
out:
    pi_close(p);
    return rc;
}

static int parse_pid(const char *s, long *pid)
{
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || *e || v <= 0 || v > INT_MAX) return -1;
    *pid = v;
    return 0;
}

/* Stop the window in dir, wait for END (the counters file gone) or the
 * process's end, at most 10 s. 0 ended, -1 not. */
static int stop_and_wait(const char *dir, long pid)
{
    pst_ctl_stop(dir);
    char p[64];
    snprintf(p, sizeof p, "/proc/%ld", pid);
    for (int i = 0; i < 1000; i++) {
        if (!ctl_files(dir)) return 0;
        if (access(p, F_OK) != 0) return 0;
        struct timespec d = { 0, 10 * 1000 * 1000 };
        nanosleep(&d, NULL);
    }
    return -1;
}

static void cleanup(const char *dir, const char *lp)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/%s", dir, PST_CTL_STOP);
    unlink(p);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
    unlink(lp);
}

int cmd_attach(int argc, char **argv)
{
    const char *out = NULL, *dur = NULL, *stk = "dwarf", *pids = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        const char *eq = strchr(a, '=');
        size_t al = eq && a[0] == '-' && a[1] == '-' ? (size_t)(eq - a) : strlen(a);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cmd_attach_help(stdout); return 0; }
#define OPT(name) (al == strlen(name) && !strncmp(a, name, al))
        if (OPT("-o") || OPT("--output") || OPT("--duration") || OPT("--stacks")) {
            v = eq && al != 2 ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) { cli_err("attach: %.*s needs a value", (int)al, a); return CLI_USAGE; }
            if (OPT("-o") || OPT("--output")) out = v;
            else if (OPT("--duration")) dur = v;
            else stk = v;
        } else if (a[0] == '-') {
            cli_err("attach: unknown option %s (poolscope attach --help)", a);
            return CLI_USAGE;
        } else if (!pids) {
            pids = a;
        } else {
            cli_err("attach: one PID only");
            return CLI_USAGE;
        }
#undef OPT
    }
    long pid;
    if (!pids || parse_pid(pids, &pid) != 0) { cli_err("attach: give the PID of a running process"); return CLI_USAGE; }
    if (!out) { cli_err("attach: -o FILE is required"); return CLI_USAGE; }
    int stacks = !strcmp(stk, "none") ? 0 : !strcmp(stk, "fp") ? 1 : !strcmp(stk, "dwarf") ? 2 : -1;
    if (stacks < 0) { cli_err("attach: --stacks takes dwarf, fp or none"); return CLI_USAGE; }
    double duration = 0;
    if (dur) {
        char *e;
        duration = strtod(dur, &e);
        if (*e || !(duration > 0)) { cli_err("attach: --duration takes seconds > 0"); return CLI_USAGE; }
    }
    if (refuse(pid)) return CLI_USAGE;

    /* the process writes the trace: an absolute path, a file that is not there */
    char abs[PATH_MAX];
    if (out[0] == '/') {
        snprintf(abs, sizeof abs, "%s", out);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd) || (size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, out) >= sizeof abs) {
            cli_err("attach: %s: path too long", out);
            return CLI_USAGE;
        }
    }
    if (access(abs, F_OK) == 0) { cli_err("attach: %s exists; give a new file", abs); return CLI_USAGE; }
    {   /* said before anything runs: the process creates the file in this folder */
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", abs);
        char *sl = strrchr(parent, '/');
        if (sl == parent) sl[1] = 0; else *sl = 0;
        struct stat pst, tst;
        char tp[64];
        snprintf(tp, sizeof tp, "/proc/%ld", pid);
        if (stat(parent, &pst) != 0 || !S_ISDIR(pst.st_mode)) {
            cli_err("attach: %s: %s", parent, stat(parent, &pst) != 0 ? strerror(errno) : "not a directory");
            return CLI_USAGE;
        }
        if (stat(tp, &tst) == 0 && tst.st_uid == geteuid() && access(parent, W_OK | X_OK) != 0) {
            cli_err("attach: %s: cannot write there: %s", parent, strerror(errno));
            return CLI_USAGE;
        }
    }
    char lib[PATH_MAX], msg[512];
    if (pl_find_preload(NULL, lib, sizeof lib, msg, sizeof msg) != 0) { cli_err("attach: %s", msg); return CLI_USAGE; }

    char dir[] = PST_CTL_DIR_TMPL, lp[128];
    if (!mkdtemp(dir)) { cli_err("attach: cannot make a directory in /dev/shm: %s", strerror(errno)); return CLI_USAGE; }
    link_path(lp, sizeof lp, pid);
    char old[PATH_MAX];
    ssize_t on = readlink(lp, old, sizeof old - 1);
    if (on > 0) {   /* a stale link of an attach that was killed (the pid's earlier process) */
        old[on] = 0;
        if (link_stale(lp, old)) cleanup(old, lp);
    }
    unlink(lp);
    char op[sizeof dir + 16];
    snprintf(op, sizeof op, "%s/owner", dir);
    FILE *of = fopen(op, "w");
    int obad = !of;
    if (of) {
        obad |= fprintf(of, "%ld\n", (long)getpid()) < 0;
        obad |= fclose(of) != 0;
    }
    if (obad) {
        cli_err("attach: %s: %s", op, strerror(errno));
        unlink(op);
        rmdir(dir);
        return CLI_USAGE;
    }
    if (symlink(dir, lp) != 0) { cli_err("attach: %s: %s", lp, strerror(errno)); unlink(op); rmdir(dir); return CLI_USAGE; }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    double t0 = now_s();
    int rc = inject(pid, lib, abs, stacks, dir, msg, sizeof msg);
    double t_attach = now_s() - t0;
    if (rc != 0) {
        static const char *const why[] = {
            [1] = "a window of this process is still open (poolscope detach it first)",
            [2] = "this process was started under `poolscope record`: it is being recorded already",
            [3] = "",   /* said with the path, below */
            [4] = "the tracer could not set itself up in the process",
        };
        if (rc == 3) cli_err("attach: pid %ld: the tracer could not create %s in the process (can its user write there?)", pid, abs);
        else if (rc > 0 && rc <= 4) cli_err("attach: pid %ld: %s", pid, why[rc]);
        else if (!strncmp(msg, "pid ", 4)) cli_err("attach: %s", msg);   /* names the pid itself */
        else cli_err("attach: pid %ld: %s", pid, msg);
        cleanup(dir, lp);
        return CLI_USAGE;
    }
    fprintf(stderr, "poolscope: attached to pid %ld in %.2f s, recording to %s (%s; `poolscope detach %ld` ends it)\n",
            pid, t_attach, abs, dur ? "until --duration ends, Ctrl-C" : "until Ctrl-C", pid);
    char procp[64];
    snprintf(procp, sizeof procp, "/proc/%ld", pid);
    const char *why = "detach";
    for (;;) {
        if (got_sig) { why = "signal"; break; }
        if (duration > 0 && now_s() - t0 - t_attach >= duration) { why = "duration"; break; }
        if (!ctl_files(dir)) { why = "detach"; break; }   /* stopped by `detach`, or the process ended */
        if (access(procp, F_OK) != 0) { why = "exit"; break; }
        struct timespec d = { 0, 20 * 1000 * 1000 };
        nanosleep(&d, NULL);
    }
    double t1 = now_s();
    int ok = stop_and_wait(dir, pid) == 0;
    double t_detach = now_s() - t1;
    cleanup(dir, lp);
    if (!ok) {
        cli_err("attach: pid %ld did not finish its trace within 10 s; %s may lack its end", pid, abs);
        return CLI_USAGE;
    }
    fprintf(stderr, "poolscope: pid %ld: %s: window ended (%s), detached in %.2f s\n", pid, abs,
            !strcmp(why, "exit") ? "the process exited" : why, t_detach);
    return 0;
}

int cmd_detach(int argc, char **argv)
{
    long pid;
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) { cmd_attach_help(stdout); return 0; }
    if (argc != 2 || parse_pid(argv[1], &pid) != 0) { cli_err("detach: usage: poolscope detach PID"); return CLI_USAGE; }
    char lp[128], dir[PATH_MAX];
    link_path(lp, sizeof lp, pid);
    ssize_t n = readlink(lp, dir, sizeof dir - 1);
    struct stat st;
    char pp[64];
    snprintf(pp, sizeof pp, "/proc/%ld", pid);
    if (n <= 0 && stat(pp, &st) != 0) { cli_err("detach: no such process: %ld", pid); return CLI_USAGE; }
    if (n <= 0) { cli_err("detach: pid %ld is not attached by poolscope attach (no %s)", pid, lp); return CLI_USAGE; }
    dir[n] = 0;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        cli_err("detach: %s is not a directory of yours: not stopping anything", dir);
        return CLI_USAGE;
    }
    if (stop_and_wait(dir, pid) != 0) { cli_err("detach: pid %ld did not stop within 10 s", pid); return CLI_USAGE; }
    fprintf(stderr, "poolscope: detached from pid %ld\n", pid);
    return 0;
}

/* cmd_attach.c — `poolscope attach PID -o FILE` and `poolscope detach PID`:
 * record a window of a process that is already running.
 *
 * Injection is gdb in batch mode: it stops the process, calls dlopen on
 * the preload library and then poolscope_attach_start (libtrace/preload/
 * attach.c) in one of its threads, and lets it go. gdb is on every
 * machine this runs on, it restores every register and handles a thread
 * stopped inside a system call (the call is restarted as if nothing
 * happened), which a ptrace injector of our own would have to redo for
 * each case; its cost is about a second per attach. The library then
 * hooks GOT slots and records until told to stop through its counters
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
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ctl.h"
#include "launch.h"

void cmd_attach_help(FILE *out)
{
    fputs("usage: poolscope attach PID -o FILE [--duration SECONDS] [--stacks dwarf|fp|none]\n"
          "       poolscope detach PID\n"
          "\n"
          "Records a window of a running process that was not started by poolscope:\n"
          "loads the tracer into it with gdb (which must be installed), records every\n"
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
          "Refused: a process of another user, a static binary, no ptrace permission\n"
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
    if (geteuid() != 0 && st.st_uid != geteuid()) {
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
    char exe[PATH_MAX];
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

/* The gdb script (Python): the calls are made in a thread that is not
 * inside the allocator, the loader, stdio or a mutex at the moment gdb
 * stopped the process. dlopen allocates and takes the loader's lock: run
 * in a thread stopped halfway through malloc (holding its arena's lock)
 * or through a dlopen, it would wait for ever on itself. A thread
 * sleeping, polling, reading or waiting on a condition holds none of
 * those. The frames are named from the symbol tables, no debug info
 * needed; a stack gdb cannot walk far is taken as it reads. */
static const char inject_py[] =
    "import gdb\n"
    "BAD = ('malloc', 'free', 'calloc', 'realloc', 'memalign', 'valloc', '_int_', 'arena', 'tcache',\n"
    "       'dl_', '_dl', 'dlopen', 'dlclose', 'dlsym', 'lll_lock', 'mutex', 'fork', 'exit', 'IO_',\n"
    "       'printf', 'lockfile', 'sigaction', 'poolscope', 'ps_')\n"
    "ALLOC = ('malloc', 'free', 'calloc', 'realloc', 'memalign', 'valloc', '_int_', 'tcache')\n"
    "def outermost_bad(t):\n"
    "    t.switch()\n"
    "    f, n, bad = gdb.newest_frame(), 0, None\n"
    "    while f is not None and n < 48:\n"
    "        name = f.name() or ''\n"
    "        if any(b in name for b in BAD):\n"
    "            bad = (n, name)\n"
    "        try:\n"
    "            f = f.older()\n"
    "        except gdb.error:\n"
    "            break\n"
    "        n += 1\n"
    "    return bad\n"
    "pick = None\n"
    "threads = sorted(gdb.selected_inferior().threads(), key=lambda t: t.num)\n"
    "for t in threads:\n"
    "    if t.is_valid() and outermost_bad(t) is None:\n"
    "        pick = t\n"
    "        break\n"
    /* none: a thread inside malloc or free (a program that allocates all
     * the time) is let run until that call returns, then looked at again */
    "for t in threads if pick is None else []:\n"
    "    for k in range(3):\n"
    "        if not t.is_valid():\n"
    "            break\n"
    "        bad = outermost_bad(t)\n"
    "        if bad is None:\n"
    "            pick = t\n"
    "            break\n"
    "        if not any(a in bad[1] for a in ALLOC):\n"
    "            break\n"
    "        gdb.execute('frame %%d' %% bad[0], to_string=True)\n"
    "        gdb.execute('finish', to_string=True)\n"
    "    if pick is not None:\n"
    "        break\n"
    "if pick is None:\n"
    "    print('POOLSCOPE_NO_SAFE_THREAD')\n"
    "else:\n"
    "    pick.switch()\n"
    "    h = int(gdb.parse_and_eval('(void *)dlopen(\"%s\", 2)'))\n"   /* RTLD_NOW, local */
    "    print('POOLSCOPE_DLOPEN %%d' %% (h != 0))\n"
    "    if h:\n"
    "        gdb.execute('sharedlibrary libpoolscope-preload')\n"
    "        r = int(gdb.parse_and_eval('(int)poolscope_attach_start(\"%s\", %d, \"%s\")'))\n"
    "        print('POOLSCOPE_RESULT %%d' %% r)\n"
    /* pool and KV events go through the program's ps__api pointer (libtrace/
     * api.c), filled by a constructor that ran before we were loaded: point
     * it at our table (it stays so after detach: a stopped tracer's emit
     * records nothing) */
    "        if r == 0 and gdb.lookup_global_symbol('ps__api') is not None:\n"
    "            try:\n"
    "                gdb.execute('set var ps__api = (const ps_api_t *)&poolscope_api', to_string=True)\n"
    "                print('POOLSCOPE_API 1')\n"
    "            except gdb.error as e:\n"
    "                print('POOLSCOPE_API 0 %%s' %% e)\n";

/* gdb -p PID with the script: dlopen the library, start recording. The
 * library's answer (0 recording), -1 with msg, or -2: no thread was safe
 * to call in (try again). */
static int inject(long pid, const char *lib, const char *out, int stacks, const char *dir, char *msg, size_t mcap)
{
    char pids[32], script[PATH_MAX + 32];
    snprintf(pids, sizeof pids, "%ld", pid);
    snprintf(script, sizeof script, "%s/inject.py", dir);
    FILE *f = fopen(script, "w");
    if (!f) { snprintf(msg, mcap, "cannot write the gdb script: %s", strerror(errno)); return -1; }
    fprintf(f, inject_py, lib, out, stacks, dir);
    if (fclose(f) != 0) { snprintf(msg, mcap, "cannot write the gdb script: %s", strerror(errno)); return -1; }
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t c = fork();
    if (c < 0) return -1;
    if (c == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        alarm(60);   /* gdb stuck on a process in D state: give up */
        execlp("gdb", "gdb", "-nx", "-batch", "-q", "-p", pids, "-ex", "set confirm off",
               "-ex", "set auto-solib-add off", "-ex", "sharedlibrary libc.so", "-x", script, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[16384];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && ((r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0) n += (size_t)r;
    close(fds[0]);
    buf[n] = 0;
    int st = 0;
    while (waitpid(c, &st, 0) < 0 && errno == EINTR) {}
    unlink(script);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
        snprintf(msg, mcap, "gdb not found: attach loads the tracer with gdb (apt-get install gdb)");
        return -1;
    }
    if (strstr(buf, "ptrace: Operation not permitted")) {
        snprintf(msg, mcap, "no ptrace permission for pid %ld (/proc/sys/kernel/yama/ptrace_scope, "
                 "or a container without CAP_SYS_PTRACE)", pid);
        return -1;
    }
    if (getenv("POOLSCOPE_ATTACH_DEBUG")) fputs(buf, stderr);
    if (strstr(buf, "POOLSCOPE_NO_SAFE_THREAD")) return -2;
    const char *v = strstr(buf, "POOLSCOPE_RESULT ");
    if (!v) {
        snprintf(msg, mcap, "%s", strstr(buf, "POOLSCOPE_DLOPEN 0") ? "dlopen of the tracer failed in the process"
                 : "gdb could not call into the process (POOLSCOPE_ATTACH_DEBUG=1 shows its output)");
        return -1;
    }
    return atoi(v + 17);
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
    {   /* said before gdb runs: the process creates the file in this folder */
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
    if (strpbrk(abs, "\"'\\\n%")) { cli_err("attach: %s: quotes, backslashes, %% and newlines are not supported", abs); return CLI_USAGE; }
    char lib[PATH_MAX], msg[512];
    if (pl_find_preload(NULL, lib, sizeof lib, msg, sizeof msg) != 0) { cli_err("attach: %s", msg); return CLI_USAGE; }
    if (strpbrk(lib, "\"'\\\n%")) { cli_err("attach: %s: quotes, backslashes, %% and newlines are not supported", lib); return CLI_USAGE; }

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
    int rc = -2;
    /* every thread inside the allocator or the loader at that instant: a
     * moment later they are elsewhere */
    for (int tries = 0; rc == -2 && tries < 5 && !got_sig; tries++) {
        if (tries) { struct timespec d = { 0, 200 * 1000 * 1000 }; nanosleep(&d, NULL); }
        rc = inject(pid, lib, abs, stacks, dir, msg, sizeof msg);
    }
    if (rc == -2)
        snprintf(msg, sizeof msg, "every thread was inside the allocator or the loader at each of 5 tries: try again");
    double t_attach = now_s() - t0;
    if (rc != 0) {
        static const char *const why[] = {
            [1] = "a window of this process is still open (poolscope detach it first)",
            [2] = "this process was started under `poolscope record`: it is being recorded already",
            [3] = "",   /* said with the path, below */
            [4] = "the tracer could not set itself up in the process",
        };
        if (rc == 3) cli_err("attach: pid %ld: the tracer could not create %s in the process (can its user write there?)", pid, abs);
        else cli_err("attach: pid %ld: %s", pid, rc > 0 && rc <= 4 ? why[rc] : msg);
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

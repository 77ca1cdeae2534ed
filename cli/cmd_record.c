/* cmd_record.c — `poolscope record`: run a program with the interposer
 * preloaded and say where its traces went.
 *
 * What happens, in order:
 *   1. parse the options (usage errors: one line, exit 2);
 *   2. find the preload library next to this binary (build tree:
 *      <bin>/../lib/libpoolscope-preload.so; installed: $PREFIX/lib/poolscope/);
 *   3. resolve CMD through PATH as execvp would and refuse a target the
 *      preload cannot reach: a static ELF (no PT_INTERP), a setuid/setgid
 *      file (the loader drops LD_PRELOAD in secure-execution mode). A "#!"
 *      script is judged by its interpreter;
 *   4. refuse an existing -o FILE (a trace is never overwritten);
 *   5. fork; the child sets LD_PRELOAD (prepended) and the POOLSCOPE_*
 *      variables of libtrace/preload/README.md and execs CMD. A close-on-exec
 *      pipe carries a failure before or at exec back to the parent;
 *   6. while waiting, SIGINT/SIGTERM/SIGHUP sent to `record` are forwarded
 *      to the child (a terminal's ^C already reaches the whole foreground
 *      group, so kernel-generated ones are not sent twice);
 *   7. read the manifest (one "pid<TAB>path" line per traced image), open
 *      each trace with the reader and print its event count, lost events and
 *      whether it was cut short;
 *   8. exit with the child's status: its exit code, or 128+N if signal N
 *      killed it, as a shell reports it.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "poolscope/format.h"
#include "record_summary.h"

#define PRELOAD_NAME "libpoolscope-preload.so"
/* Exit codes for a command that never ran, as a shell uses them. */
enum { EXIT_NOT_EXEC = 126, EXIT_NOT_FOUND = 127 };

typedef struct rec_opts {
    const char *out;          /* -o, or NULL for poolscope.<pid>.pst */
    const char *stacks;       /* none|fp|dwarf, NULL = the preload's default */
    long depth;               /* 0 = default */
    const char *follow_exec;  /* NULL = not set */
    int signo;                /* 0 = not set */
    int paused;
    char **cmd;               /* argv of the traced program */
} rec_opts_t;

void cmd_record_help(FILE *out)
{
    fputs("usage: poolscope record [-o FILE] [--stacks none|fp|dwarf] [--depth N]\n"
          "                        [--follow-exec PATTERN] [--signal SIG] [--paused]\n"
          "                        -- CMD [ARGS...]\n\n"
          "Run CMD with the poolscope interposer preloaded and write a trace of its\n"
          "memory behaviour. Every process image gets its own trace file (fork\n"
          "children and exec'd images alike); an existing file is never overwritten.\n\n"
          "  -o FILE               trace of the first image (default poolscope.<pid>.pst\n"
          "                        in the current directory); refused if FILE exists\n"
          "  --stacks MODE         call stacks per event: none, fp (frame pointers),\n"
          "                        dwarf (unwind tables; slower, works without frame\n"
          "                        pointers)\n"
          "  --depth N             deepest stack recorded (1..128)\n"
          "  --follow-exec PATTERN which exec'd programs to trace (see the preload\n"
          "                        README: matched against the program path)\n"
          "  --signal SIG          the signal that toggles recording on and off\n"
          "                        (name like USR2 or a number)\n"
          "  --paused              start with recording off (resume with --signal's\n"
          "                        signal or ps_trace_enable(1))\n\n"
          "A static program or a setuid/setgid one cannot be traced by preloading and\n"
          "is refused. The preload library is looked for at <bindir>/../lib/ and\n"
          "<bindir>/../lib/poolscope/; POOLSCOPE_PRELOAD_LIB names another.\n\n"
          "Exit status: the program's own (128+N if signal N killed it); 2 for bad\n"
          "usage or a refused target; 126/127 if CMD cannot be run / is not found.\n"
          "At the end each trace is listed on stderr with its event count.\n", out);
}

/* ---- argument parsing --------------------------------------------------- */

static int parse_signal(const char *s)
{
    static const struct { const char *name; int no; } sigs[] = {
        { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "USR1", SIGUSR1 },
        { "USR2", SIGUSR2 }, { "TERM", SIGTERM }, { "PROF", SIGPROF }, { "WINCH", SIGWINCH },
        { "URG", SIGURG }, { "ALRM", SIGALRM }, { "VTALRM", SIGVTALRM },
    };
    char *end;
    long n = strtol(s, &end, 10);
    if (*s && !*end) return (n > 0 && n < NSIG && n != SIGKILL && n != SIGSTOP) ? (int)n : -1;
    if (!strncmp(s, "SIG", 3)) s += 3;
    if (!strncmp(s, "RTMIN+", 6)) {
        n = strtol(s + 6, &end, 10);
        return (s[6] && !*end && n >= 0 && SIGRTMIN + n <= SIGRTMAX) ? SIGRTMIN + (int)n : -1;
    }
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (!strcmp(s, sigs[i].name)) return sigs[i].no;
    return -1;
}

/* Returns 0, or CLI_USAGE after printing one line. */
static int parse_args(int argc, char **argv, rec_opts_t *o)
{
    enum { OPT_STACKS = 256, OPT_DEPTH, OPT_FOLLOW, OPT_SIGNAL, OPT_PAUSED, OPT_HELP };
    static const struct option longopts[] = {
        { "output", required_argument, NULL, 'o' },
        { "stacks", required_argument, NULL, OPT_STACKS },
        { "depth", required_argument, NULL, OPT_DEPTH },
        { "follow-exec", required_argument, NULL, OPT_FOLLOW },
        { "signal", required_argument, NULL, OPT_SIGNAL },
        { "paused", no_argument, NULL, OPT_PAUSED },
        { "help", no_argument, NULL, OPT_HELP },
        { NULL, 0, NULL, 0 },
    };
    memset(o, 0, sizeof *o);
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

/* ---- finding things ----------------------------------------------------- */

static int is_readable_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

/* The preload library as an absolute path, into buf (PATH_MAX bytes, as
 * realpath wants). 0, or -1 after printing. */
static int find_preload(char buf[PATH_MAX])
{
    const char *env = getenv("POOLSCOPE_PRELOAD_LIB");
    if (env && *env) {
        if (!realpath(env, buf) || !is_readable_file(buf)) {
            cli_err("record: POOLSCOPE_PRELOAD_LIB=%s: no such readable file", env);
            return -1;
        }
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) { cli_err("record: cannot read /proc/self/exe: %s", strerror(errno)); return -1; }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    static const char *const rel[] = { "/../lib/" PRELOAD_NAME, "/../lib/poolscope/" PRELOAD_NAME };
    char tried[2][PATH_MAX];
    for (size_t i = 0; i < 2; i++) {
        /* A path too long to hold is simply not a candidate. */
        if ((size_t)snprintf(tried[i], sizeof tried[i], "%s%s", exe, rel[i]) >= sizeof tried[i])
            continue;
        if (is_readable_file(tried[i]) && realpath(tried[i], buf)) return 0;
    }
    cli_err("record: preload library not found (looked for %s and %s); build it with `make` or set POOLSCOPE_PRELOAD_LIB",
            tried[0], tried[1]);
    return -1;
}

/* Resolve a command name as execvp does: a name with a slash as is,
 * otherwise the first executable regular file along PATH. 0, or
 * EXIT_NOT_FOUND / EXIT_NOT_EXEC after printing. */
static int resolve_cmd(const char *name, char *out, size_t cap)
{
    if (strchr(name, '/')) {
        struct stat st;
        if (stat(name, &st) != 0) { cli_err("record: %s: %s", name, strerror(errno)); return EXIT_NOT_FOUND; }
        if (!S_ISREG(st.st_mode) || access(name, X_OK) != 0) {
            cli_err("record: %s: not an executable file", name);
            return EXIT_NOT_EXEC;
        }
        snprintf(out, cap, "%s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        int n = len ? snprintf(out, cap, "%.*s/%s", (int)len, path, name)
                    : snprintf(out, cap, "%s", name);   /* empty entry: current dir */
        struct stat st;
        if (n > 0 && (size_t)n < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0)
            return 0;
        path += len + (colon ? 1 : 0);
        if (!colon) break;
    }
    cli_err("record: %s: command not found", name);
    return EXIT_NOT_FOUND;
}

/* Does this ELF file name a program interpreter? 1 yes, 0 no (static),
 * -1 not an ELF file, -2 unreadable/malformed. */
static int elf_has_interp(int fd)
{
    unsigned char id[EI_NIDENT];
    if (pread(fd, id, sizeof id, 0) != (ssize_t)sizeof id) return -1;
    if (memcmp(id, ELFMAG, SELFMAG) != 0) return -1;
    uint64_t phoff, phnum, phentsize;
    if (id[EI_CLASS] == ELFCLASS64) {
        Elf64_Ehdr eh;
        if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return -2;
        phoff = eh.e_phoff; phnum = eh.e_phnum; phentsize = eh.e_phentsize;
        if (phentsize < sizeof(Elf64_Phdr)) return -2;
    } else if (id[EI_CLASS] == ELFCLASS32) {
        Elf32_Ehdr eh;
        if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return -2;
        phoff = eh.e_phoff; phnum = eh.e_phnum; phentsize = eh.e_phentsize;
        if (phentsize < sizeof(Elf32_Phdr)) return -2;
    } else {
        return -2;
    }
    for (uint64_t i = 0; i < phnum; i++) {
        uint32_t type;   /* p_type is the first word in both classes */
        if (pread(fd, &type, sizeof type, (off_t)(phoff + i * phentsize)) != (ssize_t)sizeof type)
            return -2;
        if (type == PT_INTERP) return 1;
    }
    return 0;
}

/* Refuse what LD_PRELOAD cannot reach. 0 ok, or CLI_USAGE after printing. */
static int check_target(const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) != 0) { cli_err("record: %s: %s", path, strerror(errno)); return CLI_USAGE; }
    if (st.st_mode & (S_ISUID | S_ISGID)) {
        cli_err("record: %s is set%s: the loader ignores LD_PRELOAD for it, refusing to record",
                path, (st.st_mode & S_ISUID) ? "uid" : "gid");
        return CLI_USAGE;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { cli_err("record: %s: %s", path, strerror(errno)); return CLI_USAGE; }
    char head[256] = { 0 };
    ssize_t n = pread(fd, head, sizeof head - 1, 0);
    int r = elf_has_interp(fd);
    close(fd);
    if (n >= 2 && head[0] == '#' && head[1] == '!') {
        if (depth >= 4) return 0;   /* the kernel gives up here too; let exec say so */
        char *p = head + 2;
        while (*p == ' ' || *p == '\t') p++;
        char *e = p;
        while (*e && *e != ' ' && *e != '\t' && *e != '\n') e++;
        *e = 0;
        return *p ? check_target(p, depth + 1) : 0;
    }
    if (r == 0) {
        cli_err("record: %s is statically linked: LD_PRELOAD cannot trace it, refusing to record", path);
        return CLI_USAGE;
    }
    if (r == -2) {
        cli_err("record: %s: malformed ELF file", path);
        return CLI_USAGE;
    }
    return 0;   /* dynamic ELF, or something execvp hands to /bin/sh */
}

/* ---- running ------------------------------------------------------------ */

static volatile sig_atomic_t child_pid;
static const int fwd_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define N_FWD (sizeof fwd_signals / sizeof fwd_signals[0])

static void forward(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    /* si_code > 0: sent by the kernel (a terminal's ^C goes to the whole
     * foreground process group, so the child has it already). */
    if (child_pid > 0 && (!si || si->si_code <= 0)) kill((pid_t)child_pid, sig);
}

static int setenv_num(const char *name, long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    return setenv(name, buf, 1);
}

/* Runs in the forked child: set the environment and exec. Never returns. A
 * failure is written to `errfd` as "code message". */
static void child_exec(const rec_opts_t *o, const char *target, const char *preload,
                       const char *out_abs, const char *manifest, int errfd, const sigset_t *oldmask)
{
    char msg[PATH_MAX + 192];
    int code = CLI_USAGE;
    for (size_t i = 0; i < N_FWD; i++) signal(fwd_signals[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, oldmask, NULL);

    char out[PATH_MAX + 32];
    if (out_abs) {
        snprintf(out, sizeof out, "%s", out_abs);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            snprintf(msg, sizeof msg, "%d cannot get the current directory: %s", code, strerror(errno));
            goto fail;
        }
        snprintf(out, sizeof out, "%s/poolscope.%ld.pst", cwd, (long)getpid());
        struct stat st;
        if (lstat(out, &st) == 0) {
            snprintf(msg, sizeof msg, "%d %s exists; not overwriting it (use -o)", code, out);
            goto fail;
        }
    }

    const char *old = getenv("LD_PRELOAD");
    char *ld;
    if (old && *old && !strstr(old, preload)) {
        size_t n = strlen(preload) + strlen(old) + 2;
        ld = malloc(n);
        if (ld) snprintf(ld, n, "%s:%s", preload, old);
    } else {
        ld = strdup(old && *old ? old : preload);
    }
    if (!ld || setenv("LD_PRELOAD", ld, 1) || setenv("POOLSCOPE_OUT", out, 1) ||
        setenv("POOLSCOPE_MANIFEST", manifest, 1)) {
        snprintf(msg, sizeof msg, "%d cannot set the environment: %s", code, strerror(errno));
        goto fail;
    }
    free(ld);
    /* record's flags are authoritative: drop stale settings from outside */
    unsetenv("POOLSCOPE_STACKS"); unsetenv("POOLSCOPE_DEPTH"); unsetenv("POOLSCOPE_FOLLOW_EXEC");
    unsetenv("POOLSCOPE_SIGNAL"); unsetenv("POOLSCOPE_PAUSED");
    if (o->stacks) setenv("POOLSCOPE_STACKS", o->stacks, 1);
    if (o->depth) setenv_num("POOLSCOPE_DEPTH", o->depth);
    if (o->follow_exec) setenv("POOLSCOPE_FOLLOW_EXEC", o->follow_exec, 1);
    if (o->signo) setenv_num("POOLSCOPE_SIGNAL", o->signo);
    if (o->paused) setenv("POOLSCOPE_PAUSED", "1", 1);

    execv(target, o->cmd);
    if (errno == ENOEXEC) {
        /* as execvp does: a file without a recognised header is a shell script */
        size_t n = 0;
        while (o->cmd[n]) n++;
        char **argv = calloc(n + 2, sizeof *argv);
        if (argv) {
            argv[0] = (char *)"/bin/sh";
            argv[1] = (char *)target;
            for (size_t i = 1; i <= n; i++) argv[i + 1] = o->cmd[i];
            execv("/bin/sh", argv);
        }
    }
    code = errno == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXEC;
    snprintf(msg, sizeof msg, "%d %s: %s", code, target, strerror(errno));
fail:
    if (write(errfd, msg, strlen(msg)) < 0) { /* nothing more to do */ }
    _exit(code);
}

static int exit_code_of(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

int cmd_record(int argc, char **argv)
{
    rec_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) return CLI_OK;   /* --help */
    if (rc) return rc;

    char preload[PATH_MAX];
    if (find_preload(preload)) return CLI_USAGE;

    char target[PATH_MAX];
    if ((rc = resolve_cmd(o.cmd[0], target, sizeof target))) return rc;
    if ((rc = check_target(target, 0))) return rc;

    /* -o: absolute (the program may chdir), never an existing file */
    char out_abs[PATH_MAX];
    const char *out = NULL;
    if (o.out) {
        struct stat st;
        if (lstat(o.out, &st) == 0) {
            cli_err("record: %s exists; not overwriting it", o.out);
            return CLI_USAGE;
        }
        if (o.out[0] == '/') {
            snprintf(out_abs, sizeof out_abs, "%s", o.out);
        } else {
            char cwd[PATH_MAX];
            if (!getcwd(cwd, sizeof cwd)) { cli_err("record: getcwd: %s", strerror(errno)); return CLI_USAGE; }
            if (snprintf(out_abs, sizeof out_abs, "%s/%s", cwd, o.out) >= (int)sizeof out_abs) {
                cli_err("record: %s: path too long", o.out);
                return CLI_USAGE;
            }
        }
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", out_abs);
        *strrchr(dir, '/') = 0;
        if (access(*dir ? dir : "/", W_OK | X_OK) != 0) {
            cli_err("record: %s: cannot write in %s: %s", o.out, *dir ? dir : "/", strerror(errno));
            return CLI_USAGE;
        }
        out = out_abs;
    }

    const char *tmp = getenv("TMPDIR");
    char manifest[PATH_MAX];
    snprintf(manifest, sizeof manifest, "%s/poolscope-manifest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int mfd = mkstemp(manifest);
    if (mfd < 0) { cli_err("record: cannot create a manifest file %s: %s", manifest, strerror(errno)); return CLI_USAGE; }
    close(mfd);

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        cli_err("record: pipe: %s", strerror(errno));
        unlink(manifest);
        return CLI_USAGE;
    }

    /* Block the forwarded signals across fork so none is lost between
     * fork and knowing the child's pid. */
    sigset_t block, oldmask;
    sigemptyset(&block);
    for (size_t i = 0; i < N_FWD; i++) sigaddset(&block, fwd_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &oldmask);
    struct sigaction sa, oldsa[N_FWD];
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_FWD; i++) sigaction(fwd_signals[i], &sa, &oldsa[i]);

    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        cli_err("record: fork: %s", strerror(errno));
        unlink(manifest);
        return CLI_USAGE;
    }
    if (pid == 0) {
        close(pfd[0]);
        child_exec(&o, target, preload, out, manifest, pfd[1], &oldmask);
    }
    child_pid = pid;
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    close(pfd[1]);

    /* EOF on the pipe: the exec happened. Text: the child failed before. */
    char msg[PATH_MAX + 128];
    ssize_t got = 0, r;
    while ((r = read(pfd[0], msg + got, sizeof msg - 1 - (size_t)got)) != 0) {
        if (r < 0) { if (errno == EINTR) continue; break; }
        got += r;
        if ((size_t)got >= sizeof msg - 1) break;
    }
    close(pfd[0]);

    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    child_pid = 0;
    for (size_t i = 0; i < N_FWD; i++) sigaction(fwd_signals[i], &oldsa[i], NULL);

    if (got > 0) {
        msg[got] = 0;
        char *sp = strchr(msg, ' ');
        cli_err("record: %s", sp ? sp + 1 : msg);
        unlink(manifest);
        return exit_code_of(status);
    }

    record_summary(manifest, out, stderr);
    unlink(manifest);
    return exit_code_of(status);
}

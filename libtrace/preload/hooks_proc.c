/* hooks_proc.c — process-level hooks and the event API table.
 *
 *   fork/vfork     the pthread_atfork handlers (fork.c) do the work; the
 *                  hook records PST_EV_FORK with the child pid. vfork is a
 *                  fork: a wrapper cannot return twice into a shared stack.
 *   exec*          the envp handed on gets POOLSCOPE_GEN and
 *                  POOLSCOPE_EXEC_PATH; EXEC is recorded, everything flushed
 *                  and END written; if the exec returns, END is cut off again.
 *   posix_spawn*   the same environment rewrite (glibc's child calls the
 *                  internal execve, which no hook sees); FORK with the pid.
 *   _exit/_Exit    final flush and END.
 *   dlclose        module maps updated at once (dlopen is NOT wrapped: glibc
 *                  takes the caller's return address to pick RUNPATH,
 *                  $ORIGIN and the namespace, so a wrapper would change what
 *                  the program loads. New modules are found by the flusher's
 *                  poll of the loader's counters and before any new stack
 *                  is defined, see stacks.c).
 *   close*, dup2/3 protect the trace fd.
 *   pthread_create passes the parent's stream id to the child's THREAD_START,
 *                  and records the thread's stack as a mapping of the thread
 *                  (see "Thread stacks" below).
 */
#include "preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

#define EXPORT __attribute__((visibility("default")))

/* The next definitions of the hooked process functions: ps_g.proc. */

static void stack_key_make(void);   /* "Thread stacks" below */

#define R(name) ps_g.proc.name = (__typeof__(ps_g.proc.name))dlsym(RTLD_NEXT, #name)
void ps_proc_resolve(void)
{
    ps_alloc_resolve_mm();
    R(fork); R(_Fork); R(execve); R(execvpe); R(fexecve); R(posix_spawn); R(posix_spawnp);
    R(_exit); R(_Exit); R(dlclose); R(close); R(close_range); R(closefrom);
    R(dup2); R(dup3); R(pthread_create);
    stack_key_make();
}
#define ENSURE_REAL() do { if (PS_UNLIKELY(!ps_real_ready)) ps_resolve_real(); } while (0)

/* ---- environment handed to a new image ------------------------------------- */

typedef struct env_rw {
    char **envp;    /* what to pass on */
    void *map;
    size_t map_len;
} env_rw_t;

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static void fmt_num(char **p, unsigned long long v)
{
    char t[24]; int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *(*p)++ = t[--n];
}

/* Copy envp with POOLSCOPE_GEN=<pid>:<gen> and POOLSCOPE_EXEC_PATH=<path>,
 * only when it still carries POOLSCOPE_OUT. Raw mmap: no allocation. */
static void env_rewrite(env_rw_t *rw, char *const envp[], const char *path, pid_t pid, uint64_t gen)
{
    rw->envp = (char **)envp;
    rw->map = NULL;
    if (!envp) return;
    size_t n = 0;
    int ours = 0;
    for (; envp[n]; n++) if (has_prefix(envp[n], "POOLSCOPE_OUT=")) ours = 1;
    if (!ours) return;
    size_t plen = path ? strlen(path) : 0;
    size_t len = (n + 3) * sizeof(char *) + 64 + plen + 32;
    len = (len + 4095) & ~(size_t)4095;
    char **v = ps_sys_mmap(len);
    if (!v) return;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!has_prefix(envp[i], "POOLSCOPE_GEN=") && !has_prefix(envp[i], "POOLSCOPE_EXEC_PATH="))
            v[k++] = envp[i];
    char *s = (char *)(v + n + 3);
    v[k++] = s;
    memcpy(s, "POOLSCOPE_GEN=", 14); s += 14;
    fmt_num(&s, (unsigned long long)pid);
    *s++ = ':';
    fmt_num(&s, gen);
    *s++ = 0;
    v[k++] = s;
    memcpy(s, "POOLSCOPE_EXEC_PATH=", 20); s += 20;
    if (plen) memcpy(s, path, plen);
    s[plen] = 0;
    v[k] = NULL;
    rw->envp = v;
    rw->map = v;
    rw->map_len = len;
}

static void env_free(env_rw_t *rw) { ps_sys_munmap(rw->map, rw->map_len); }

/* ---- exec ---------------------------------------------------------------------- */

static void exec_prepare(env_rw_t *rw, const char *path, char *const envp[])
{
    ENSURE_REAL();
    if (ps_g.child_pending) ps_ensure_child();
    env_rewrite(rw, envp, path, getpid(), ps_g.gen + 1);
    ps_exec_begin(path);
}

static int exec_done(env_rw_t *rw, int rc)
{
    int e = errno;
    ps_exec_failed();
    env_free(rw);
    errno = e;
    return rc;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    env_rw_t rw;
    if (ps_tls.busy) { ENSURE_REAL(); return ps_g.proc.execve(path, argv, envp); }
    exec_prepare(&rw, path, envp);
    return exec_done(&rw, ps_g.proc.execve(path, argv, rw.envp));
}

EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    env_rw_t rw;
    if (ps_tls.busy) { ENSURE_REAL(); return ps_g.proc.execvpe(file, argv, envp); }
    exec_prepare(&rw, file, envp);
    return exec_done(&rw, ps_g.proc.execvpe(file, argv, rw.envp));
}

EXPORT int execvp(const char *file, char *const argv[])
{
    return execvpe(file, argv, environ);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    env_rw_t rw;
    char link[64], path[4096];
    char *p = link;
    memcpy(p, "/proc/self/fd/", 14); p += 14;
    fmt_num(&p, (unsigned long long)(fd < 0 ? 0 : fd));
    *p = 0;
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    if (ps_tls.busy) { ENSURE_REAL(); return ps_g.proc.fexecve(fd, argv, envp); }
    exec_prepare(&rw, path, envp);
    return exec_done(&rw, ps_g.proc.fexecve(fd, argv, rw.envp));
}

/* execl*: gather the variadic arguments into an array (raw mmap: no VLA, no
 * malloc between the program's last event and the exec). */
static char **gather(const char *arg0, va_list ap, char ***envp_out, size_t *map_len)
{
    va_list cp;
    va_copy(cp, ap);
    size_t n = 1;
    while (va_arg(cp, char *)) n++;
    va_end(cp);
    size_t len = ((n + 1) * sizeof(char *) + 4095) & ~(size_t)4095;
    char **v = ps_sys_mmap(len);
    if (!v) return NULL;
    v[0] = (char *)arg0;
    for (size_t i = 1; i < n; i++) v[i] = va_arg(ap, char *);
    v[n] = NULL;
    (void)va_arg(ap, char *);
    if (envp_out) *envp_out = va_arg(ap, char **);
    *map_len = len;
    return v;
}

EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap; size_t len; va_start(ap, arg);
    char **v = gather(arg, ap, NULL, &len);
    va_end(ap);
    if (!v) { errno = ENOMEM; return -1; }
    int rc = execve(path, v, environ);
    ps_sys_munmap(v, len);
    return rc;
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap; size_t len; va_start(ap, arg);
    char **v = gather(arg, ap, NULL, &len);
    va_end(ap);
    if (!v) { errno = ENOMEM; return -1; }
    int rc = execvpe(file, v, environ);
    ps_sys_munmap(v, len);
    return rc;
}

EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap; size_t len; char **envp = NULL; va_start(ap, arg);
    char **v = gather(arg, ap, &envp, &len);
    va_end(ap);
    if (!v) { errno = ENOMEM; return -1; }
    int rc = execve(path, v, envp);
    ps_sys_munmap(v, len);
    return rc;
}

/* ---- fork, spawn ------------------------------------------------------------------ */

static void record_fork(pid_t child)
{
    ps_thr_t *t = ps_enter();
    if (!t) return;
    pst_event_t ev = { .type = PST_EV_FORK, .f = { (uint64_t)child } };
    ps_emit_generic(t, &ev);
    ps_leave();
}

EXPORT pid_t fork(void)
{
    ENSURE_REAL();
    pid_t pid = ps_g.proc.fork();
    if (pid > 0) {
        int e = errno;
        record_fork(pid);
        errno = e;
    }
    return pid;
}

EXPORT pid_t vfork(void)
{
    return fork();
}

/* glibc's _Fork (2.34+) runs no atfork handlers: without ours the child
 * would keep the parent's locks (a deadlock at its exit if the flusher held
 * one) and write into the parent's file. glibc's fork() reaches its _Fork
 * through an internal alias, never through this hook. */
EXPORT pid_t _Fork(void)
{
    ENSURE_REAL();
    if (!ps_g.proc._Fork) { errno = ENOSYS; return -1; }
    ps_prepare_fork();
    pid_t pid = ps_g.proc._Fork();
    int e = errno;
    if (pid == 0) ps_child_after_fork();
    else ps_parent_after_fork();
    if (pid > 0) record_fork(pid);
    errno = e;
    return pid;
}

static int spawn_common(int p, pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
    ENSURE_REAL();
    env_rw_t rw;
    pid_t child = 0;
    env_rewrite(&rw, envp, path, 0, 1);   /* pid 0: "another pid", generation 1 */
    int rc = p ? ps_g.proc.posix_spawnp(&child, path, fa, at, argv, rw.envp)
               : ps_g.proc.posix_spawn(&child, path, fa, at, argv, rw.envp);
    env_free(&rw);
    if (rc == 0) {
        if (pid) *pid = child;
        if (!ps_tls.busy) record_fork(child);
    }
    return rc;
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                       const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
    return spawn_common(0, pid, path, fa, at, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
    return spawn_common(1, pid, file, fa, at, argv, envp);
}

/* ---- a fork child that could not open its trace ------------------------------------ */

static char *put_dec(char *p, unsigned long v)
{
    char t[24];
    int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = t[--n];
    *p = 0;
    return p;
}

/* Called by ps_ensure_child (fork.c) when the child's trace cannot be
 * opened (errno err): the child runs untraced, and `poolscope record` is
 * told so. With no descriptor to spare (RLIMIT_NOFILE reached: the usual
 * cause) nothing can be opened, not even the manifest, so the note is a
 * symbolic link, which takes no descriptor to make:
 * <POOLSCOPE_CTL_DIR>/<pid>.<k>.untraced -> "<errno>" (k from 0, for a pid
 * reused within the run). The directory is record's private one (ctl.h);
 * without it nothing is said. */
void ps_note_untraced(int err)
{
    if (!ps_g.ctl_dir[0]) return;
    int e = errno;
    char path[sizeof ps_g.ctl_dir + 64], target[24];
    put_dec(target, (unsigned long)(err > 0 ? err : 0));
    size_t dl = strlen(ps_g.ctl_dir);
    memcpy(path, ps_g.ctl_dir, dl);
    for (unsigned k = 0; k < 100; k++) {
        char *p = path + dl;
        *p++ = '/';
        p = put_dec(p, (unsigned long)ps_g.pid);
        *p++ = '.';
        p = put_dec(p, k);
        memcpy(p, ".untraced", sizeof ".untraced");
        if (symlink(target, path) == 0 || errno != EEXIST) break;
    }
    errno = e;
}

/* ---- exit ------------------------------------------------------------------------- */

EXPORT __attribute__((noreturn)) void _exit(int status)
{
    ENSURE_REAL();
    if (!ps_tls.busy) ps_final();
    if (ps_g.proc._exit) ps_g.proc._exit(status);
    ps_sys_exit_group(status);
}

EXPORT __attribute__((noreturn)) void _Exit(int status)
{
    ENSURE_REAL();
    if (!ps_tls.busy) ps_final();
    if (ps_g.proc._Exit) ps_g.proc._Exit(status);
    ps_sys_exit_group(status);
}

/* ---- modules ---------------------------------------------------------------------- */

EXPORT int dlclose(void *h)
{
    ENSURE_REAL();
    int rc = ps_g.proc.dlclose(h);
    if (rc == 0 && ps_g.active && !ps_tls.busy) {
        int e = errno;
        ps_tls.busy += PS_BUSY_OWN;
        ps_modules_scan(0);
        ps_tls.busy -= PS_BUSY_OWN;
        errno = e;
    }
    return rc;
}

/* ---- the trace fd ------------------------------------------------------------------- */

EXPORT int close(int fd)
{
    ENSURE_REAL();
    if (PS_UNLIKELY(fd == ps_g.fd) && !ps_tls.busy && ps_is_trace_fd(fd))
        return 0;   /* ours: pretend success, keep it */
    return ps_g.proc.close ? ps_g.proc.close(fd) : ps_real_close(fd);
}

static int sys_close_range(unsigned lo, unsigned hi, int flags)
{
    if (ps_g.proc.close_range) return ps_g.proc.close_range(lo, hi, flags);
    return ps_sys_close_range(lo, hi, flags);
}

EXPORT int close_range(unsigned lo, unsigned hi, int flags)
{
    ENSURE_REAL();
    int fd = ps_g.fd;
    if (ps_tls.busy || fd < 0 || (unsigned)fd < lo || (unsigned)fd > hi ||
        (flags & CLOSE_RANGE_CLOEXEC) || !ps_is_trace_fd(fd))
        return sys_close_range(lo, hi, flags);
    /* Split the range around our fd. */
    int rc = 0, first = 1;
    if ((unsigned)fd > lo) {
        rc = sys_close_range(lo, (unsigned)fd - 1, flags);
        first = 0;
    }
    if (rc == 0 && (unsigned)fd < hi)
        rc = sys_close_range((unsigned)fd + 1, hi, first ? flags : (int)(flags & ~(int)CLOSE_RANGE_UNSHARE));
    return rc;
}

EXPORT void closefrom(int lo)
{
    ENSURE_REAL();
    int fd = ps_g.fd;
    if (ps_tls.busy || fd < 0 || fd < lo || !ps_is_trace_fd(fd)) {
        if (ps_g.proc.closefrom) ps_g.proc.closefrom(lo);
        else ps_sys_close_range((unsigned)lo, ~0U, 0);
        return;
    }
    long rc = 0;
    if (fd > lo) rc = ps_sys_close_range((unsigned)lo, (unsigned)fd - 1, 0);
    if (rc == 0) rc = ps_sys_close_range((unsigned)fd + 1, ~0U, 0);
    if (rc != 0 && ps_g.proc.closefrom)
        ps_g.proc.closefrom(lo);   /* no close_range: our fd goes too; re-opened by path */
}

EXPORT int dup2(int old, int nfd)
{
    ENSURE_REAL();
    if (nfd == ps_g.fd && old != nfd && !ps_tls.busy) ps_move_trace_fd_from(nfd, nfd);
    return ps_g.proc.dup2 ? ps_g.proc.dup2(old, nfd) : ps_sys_dup2(old, nfd);
}

EXPORT int dup3(int old, int nfd, int flags)
{
    ENSURE_REAL();
    if (nfd == ps_g.fd && old != nfd && !ps_tls.busy) ps_move_trace_fd_from(nfd, nfd);
    return ps_g.proc.dup3 ? ps_g.proc.dup3(old, nfd, flags) : ps_sys_dup3(old, nfd, flags);
}

/* ---- threads ----------------------------------------------------------------------- */

/* Thread stacks. glibc maps a thread's stack inside pthread_create with
 * its internal mmap (no hook sees it) and keeps freed stacks in a cache, so
 * the trace would show no stack at all. The trampoline records it itself:
 * when the thread starts, from pthread_getattr_np of the thread (the only
 * true source: a stack from the cache may be larger than the attribute
 * asked for), as two anonymous MMAP events of the thread's stream, the
 * guard below the stack PROT_NONE (reserved) and the stack read-write
 * (committed, named PS_STACK_NAME by an MMAP_NAME), both with
 * PS_MMAP_THREAD_STACK in their flags (no call of the program: FORMAT.md,
 * "Thread stacks"); and a MUNMAP of each when the thread ends (its
 * function returns, pthread_exit, a cancellation: the destructor of our
 * own pthread key): the stack then goes back to glibc's cache or is
 * unmapped, either way it is no longer that thread's.
 *
 * The end is a key destructor, not code after the thread's function in
 * the trampoline: the trampoline calls the function last (a tail call),
 * so no frame of this library lies under the program's frames, where the
 * stack walkers stop (stacks.c). The key is made when the real functions
 * are resolved, before init.c's (ps_init): glibc runs destructors in key
 * order, so the MUNMAPs come before the thread's THREAD_END, in its
 * stream. A key past glibc's first 32 would make pthread_setspecific
 * allocate for us and the thread's exit free it where the trace sees it:
 * then no stack is recorded.
 *
 * Not recorded: the main thread's stack, the tracer's own thread, a stack
 * the program gave with pthread_attr_setstack (its own memory, in its own
 * mmap call if it mapped it), a thread started while not recording (no
 * MUNMAP either), and in a fork child the MUNMAP of the thread that forked
 * (the child's trace never had its MMAP). Every thread of the program
 * registers at its start, before its function runs, so a first allocation
 * made inside pthread_getattr_np (which holds the thread's lock) does not
 * register it there: threads.c's registration asks pthread_getattr_np too,
 * and with stacks on the thread deadlocked on its own lock. */
#define PS_MMAP_THREAD_STACK PST_MMAP_THREAD_STACK   /* format.h */
#define PS_STACK_NAME "[stack]"
#define PS_KEY_STATIC 32u                   /* glibc's PTHREAD_KEY_2NDLEVEL_SIZE */

typedef struct tramp {
    void *(*fn)(void *);
    void *arg;
    uint32_t parent;
    int stack;               /* 0 the tracer's thread, 1 register the thread at its start,
                                2 and record its stack (glibc's, not the program's own) */
} tramp_t;

typedef struct thr_stack {
    uintptr_t lo;            /* the stack's lowest address; the guard lies below it */
    size_t len, guard;       /* len 0: nothing recorded */
    pid_t pid;               /* the image that recorded it */
} thr_stack_t;

static __thread thr_stack_t stk_tls __attribute__((tls_model("initial-exec")));
static pthread_key_t stk_key;
static int stk_key_ok;       /* 0 not made, 1 made and below PS_KEY_STATIC, -1 unusable */

static void stack_end(void *p);

/* Once, from ps_proc_resolve (ps_init calls it before making its key). */
static void stack_key_make(void)
{
    int z = 0;
    if (!__atomic_compare_exchange_n(&stk_key_ok, &z, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    if (pthread_key_create(&stk_key, stack_end) == 0 && (unsigned)stk_key < PS_KEY_STATIC)
        __atomic_store_n(&stk_key_ok, 1, __ATOMIC_RELEASE);
}

static void stack_emit(ps_thr_t *t, unsigned type, uintptr_t a, size_t len, unsigned prot)
{
    const uint64_t flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | PS_MMAP_THREAD_STACK;
    pst_event_t ev = { .type = (uint8_t)type, .f = { a, len, prot, flags, (uint64_t)(int64_t)-1, 0 } };
    if (type == PST_EV_MUNMAP) ev.f[2] = ev.f[3] = ev.f[4] = 0;   /* munmap: addr, len */
    ps_emit_generic(t, &ev);
}

/* At the thread's start, before its function: its stack as a mapping of
 * its stream. pthread_getattr_np allocates (the cpuset) and runs inside
 * the guard: the tracer's own calls, passed through unrecorded. Not
 * inlined: its frame is gone before the thread's function is called. */
static __attribute__((noinline)) void stack_begin(void)
{
    if (!ps_g.on) return;
    pthread_attr_t at;
    void *addr = NULL;
    size_t size = 0, guard = 0;
    int ok = 0;
    ps_tls.busy += PS_BUSY_OWN;
    if (pthread_getattr_np(pthread_self(), &at) == 0) {
        ok = pthread_attr_getstack(&at, &addr, &size) == 0 && pthread_attr_getguardsize(&at, &guard) == 0;
        pthread_attr_destroy(&at);
    }
    ps_tls.busy -= PS_BUSY_OWN;
    uintptr_t lo = (uintptr_t)addr, here = (uintptr_t)&at;
    /* what glibc says must hold this very frame, and the guard must fit below */
    ok = ok && size && here >= lo && here - lo < size && guard <= lo;
    ps_thr_t *t = ps_enter();   /* registers the thread: THREAD_START first */
    if (!t) return;
    if (ok && pthread_setspecific(stk_key, &stk_tls) == 0) {   /* below PS_KEY_STATIC: no allocation */
        if (guard) stack_emit(t, PST_EV_MMAP, lo - guard, guard, PROT_NONE);
        stack_emit(t, PST_EV_MMAP, lo, size, PROT_READ | PROT_WRITE);
        pst_event_t nm = { .type = PST_EV_MMAP_NAME, .f = { lo, ps_string_id(PS_STACK_NAME) } };
        ps_emit_generic(t, &nm);   /* right after its MMAP, as a file's name */
        stk_tls = (thr_stack_t){ .lo = lo, .len = size, .guard = guard, .pid = ps_g.pid };
    }
    ps_leave();
}

/* The key's destructor, at the thread's end. Recorded while paused too,
 * as munmap is, so the stack is not left live. */
static void stack_end(void *p)
{
    thr_stack_t *s = p;
    if (!s || !s->len || s->pid != ps_g.pid) return;   /* nothing recorded, or a fork child's copy */
    int e = errno;
    ps_thr_t *t = ps_enter();
    if (!t && ps_g.paused) t = ps_enter_paused();
    if (t) {
        stack_emit(t, PST_EV_MUNMAP, s->lo, s->len, 0);
        if (s->guard) stack_emit(t, PST_EV_MUNMAP, s->lo - s->guard, s->guard, 0);
        ps_leave();
    }
    s->len = 0;
    errno = e;
}

static void *tramp_main(void *a)
{
    tramp_t tr = *(tramp_t *)a;
    ps_tls.busy += PS_BUSY_OWN;
    ps_real.free(a);
    ps_tls.busy -= PS_BUSY_OWN;
    ps_tls.parent_stream = tr.parent;
    if (tr.stack == 2) {
        stack_begin();
    } else if (tr.stack == 1) {
        ps_thr_t *t = ps_enter();   /* registers the thread: see "Thread stacks" */
        if (t) ps_leave();
    }
    return tr.fn(tr.arg);   /* a tail call: see "Thread stacks" */
}

/* A stack the program gave (pthread_attr_setstack, setstackaddr): glibc
 * keeps its top, and pthread_attr_getstack returns top - size, so with no
 * stack given the result plus the size is 0 (or the result is NULL). */
static int own_stack_given(const pthread_attr_t *attr)
{
    void *lo = NULL;
    size_t size = 0;
    return attr && pthread_attr_getstack(attr, &lo, &size) == 0 && lo && (uintptr_t)lo + size != 0;
}

EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    ENSURE_REAL();
    ps_thr_t *t = ps_tls.thr;
    if (ps_tls.busy || !ps_g.active) return ps_g.proc.pthread_create(th, attr, fn, arg);
    /* A second thread of the program: from now on every ordered address
     * carries a version (format.h), set before the thread can touch one. */
    if (fn != ps_flusher_main) {
        ps_g.multi = 1;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);   /* see ps_recompute_on */
        ps_g.fast1 = 0;   /* malloc and free take versions from now on */
        ps_tick_now();
    }
    ps_tls.busy += PS_BUSY_OWN;
    tramp_t *tr = ps_real.malloc(sizeof *tr);
    ps_tls.busy -= PS_BUSY_OWN;
    if (!tr) return ps_g.proc.pthread_create(th, attr, fn, arg);
    tr->fn = fn;
    tr->arg = arg;
    tr->parent = (uintptr_t)t > 1 ? t->c.stream : 0;
    tr->stack = fn == ps_flusher_main ? 0 :
                !own_stack_given(attr) && __atomic_load_n(&stk_key_ok, __ATOMIC_ACQUIRE) == 1 ? 2 : 1;
    int rc = ps_g.proc.pthread_create(th, attr, tramp_main, tr);
    if (rc != 0) {
        ps_tls.busy += PS_BUSY_OWN;
        ps_real.free(tr);
        ps_tls.busy -= PS_BUSY_OWN;
    }
    return rc;
}

/* ---- selective tracing --------------------------------------------------------------- */

static void on_toggle(int sig)
{
    (void)sig;
    if (ps_g.stopped) return;    /* record stopped the recording for good (ctl.h) */
    ps_g.toggle_ts = ps_now();   /* clock_gettime: async-signal-safe */
    ps_g.paused = !ps_g.paused;
    ps_recompute_on();
    /* Recording flips now; the TRACE_ON/OFF marker cannot be written from
     * here (the thread may be inside the tracer), so the flusher's next
     * tick or the final flush writes it, stamped with the signal's time. */
    ps_g.toggle_req = 1;
}

void ps_install_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_toggle;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(ps_g.sig, &sa, NULL);
}

static void api_marker(unsigned type)
{
    ps_thr_t *t = ps_enter();
    if (!t) return;
    pst_event_t ev = { .type = (uint8_t)type };
    ps_emit_generic(t, &ev);
    ps_leave();
}

static void api_enable(int on)
{
    if (!ps_g.active || ps_g.stopped) return;
    if (!on && !ps_g.paused) {
        api_marker(PST_EV_TRACE_OFF);
        ps_g.paused = 1;
        ps_recompute_on();
    } else if (on && ps_g.paused) {
        ps_g.paused = 0;
        ps_recompute_on();
        api_marker(PST_EV_TRACE_ON);
    }
}

static int api_enabled(void) { return ps_g.on; }

static uint64_t api_session(void) { return __atomic_load_n(&ps_g.trace_files, __ATOMIC_ACQUIRE); }

/* Layers 2-4 and thread names; MPROTECT and MMAP_NAME (22, 23) lie inside
 * that range but are the interposer's own heap events. */
static int api_type_ok(unsigned type)
{
    return (type >= PST_EV_TENSOR_ACQUIRE && type <= PST_EV_MARK_END && type != PST_EV_MPROTECT &&
            type != PST_EV_MMAP_NAME) || type == PST_EV_THREAD_NAME;
}

/* The events that hand memory out get the caller's stack, as a malloc
 * does: a pool's acquire and a KV pool's block allocation. The walk starts
 * here, so its innermost frames are the pool's and the adapter's (the
 * observer that called us); the analyzer skips them as it skips malloc's
 * wrappers (analyzer/sites.c). The other API events (reclaims, frees,
 * markers, tensors) carry none: a release is named by what it releases. */
static int api_wants_stack(unsigned type)
{
    return type == PST_EV_POOL_ACQUIRE || type == PST_EV_KVB_ALLOC;
}

static void api_emit(const ps_event_t *in)
{
    if (!in || !api_type_ok(in->type)) return;
    const char *lay = pst_event_layout(in->type);
    if (!lay) return;
    int e = errno;
    ps_thr_t *t = ps_enter();
    if (!t) { errno = e; return; }
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = (uint8_t)in->type;
    if (PS_UNLIKELY(ps_g.stacks != PST_STACKS_NONE) && api_wants_stack(in->type))
        ev.stack = ps_stack_id(t);   /* every piece of a split list carries it */
    int li = -1, pi = -1;
    for (int i = 0; lay[i] && i < PST_MAX_FIELDS; i++) {
        switch (lay[i]) {
        case 'S': ev.f[i] = ps_string_id(in->name); break;
        case 'L': li = i; break;
        case 'P': pi = i; break;
        default: ev.f[i] = in->f[i]; break;
        }
    }
    if (pi >= 0) {
        uint32_t n = in->payload ? in->n_payload : 0;
        if (n > PST_MAX_PAYLOAD) n = PST_MAX_PAYLOAD;
        if (n) memcpy(ev.payload, in->payload, n * sizeof *ev.payload);
        ev.n_payload = n;
        ev.f[pi] = n;
    }
    if (li < 0) {
        ps_emit_generic(t, &ev);
    } else {   /* long lists are split: a record must fit the ring's slack */
        uint32_t total = in->ids ? in->n_ids : 0, off = 0;
        do {
            uint32_t n = total - off > PS_IDS_PER_REC ? PS_IDS_PER_REC : total - off;
            ev.ids = in->ids ? in->ids + off : NULL;
            ev.n_ids = n;
            ev.f[li] = n;
            ps_emit_generic(t, &ev);
            off += n;
            if (ev.type == PST_EV_KVB_ALLOC) ev.f[5] = 0;   /* n_tokens on the first piece only */
        } while (off < total);
    }
    ps_leave();
    errno = e;
}

static int api_flush(void)
{
    int e = errno;
    int rc = ps_flush_sync();
    errno = e;
    return rc;
}

EXPORT const ps_api_t poolscope_api = {
    .version = PS_API_VERSION,
    .size = sizeof(ps_api_t),
    .emit = api_emit,
    .enable = api_enable,
    .enabled = api_enabled,
    .flush = api_flush,
    .session = api_session,
};

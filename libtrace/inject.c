/* inject.c — calling functions inside a running process through ptrace
 * (inject.h), for `poolscope attach`.
 *
 * Why our own and not gdb's `call`: gdb (13, Debian 12's) saves and puts
 * back a thread's vector registers with a fixed-size XSAVE buffer, and a
 * kernel whose XSAVE area is larger (AMX machines: about 11 KiB) refuses a
 * write of any other size ("Couldn't write extended state status: Bad
 * address"): attach failed on every such machine. Here the buffer is as
 * large as the kernel says, and gdb is no longer needed at all.
 *
 * Where the call runs. dlopen takes the loader's lock and allocates, so the
 * thread it runs in must not be inside the loader or malloc (it would
 * deadlock on its own lock or corrupt the heap), nor in libgcc_s's unwinder
 * (which holds the loader's lock through dl_iterate_phdr). Threads are
 * taken in this order:
 *   1. asleep in a system call neither the loader nor malloc makes
 *      (nanosleep, poll, select, accept, read, wait4, ...): the thread is
 *      interrupted, the call is made, and the system call restarts as if
 *      nothing happened (the kernel restarts most; one it ended with EINTR
 *      because of our stop is issued again: reissue);
 *   2. asleep in futex with the program's code among its nearest frames
 *      (pthread_cond_wait, pthread_join, sem_wait, a mutex): a thread
 *      waiting for a lock does not hold it;
 *   3. running: interrupted wherever it is, then single-stepped until its
 *      instruction pointer is outside libc, the loader, libgcc_s and the
 *      tracer (a thread inside malloc is let finish that call), and not in
 *      a signal handler run over one of those;
 *   4. asleep in epoll_wait or sigtimedwait (issued again afterwards, its
 *      timeout starting afresh: hence last).
 * In 1, 2 and 4 no lock-holding libc function may be among the nearest
 * frames either (way_up_clean).
 * Only that thread is stopped; the others run on, as when a program calls
 * dlopen itself. Everything the thread had is saved first (general
 * registers and the whole XSAVE area: at an arbitrary instruction its
 * vector registers are live) and put back at pi_close. The call runs on the
 * thread's own stack, below the red zone, and returns to address 0: the
 * fault that follows is caught before any handler of the program sees it.
 */
#include "inject.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "poolscope/error.h"

#if defined(__x86_64__)
#include <elf.h>
#include <sys/user.h>

#define SCRATCH 4096      /* room for strings below the red zone */
#define RED_ZONE 128
#define XSAVE_MAX 65536   /* more than any XSAVE area (AMX: about 11 KiB) */

/* The kernel's restart codes, left in rax of a thread stopped in a sleep
 * that it will restart (include/linux/errno.h; never seen by programs). */
enum { ERESTARTSYS_ = 512, ERESTARTNOINTR_ = 513, ERESTARTNOHAND_ = 514, ERESTART_RESTARTBLOCK_ = 516 };

typedef struct map {
    uint64_t lo, hi, off;
    int x;              /* executable */
    char *path;         /* "" for anonymous */
    unsigned long ino;
    char dev[16];
} map_t;

typedef struct { uint64_t lo[96], hi[96]; int n; } ranges_t;   /* [lo, hi) code ranges */

struct pi_proc {
    pid_t pid, tid;
    int how;
    struct user_regs_struct regs;      /* as stopped */
    unsigned char *xs;                 /* XSAVE area, xs_len bytes; NULL: fpregs */
    size_t xs_len;
    struct user_fpregs_struct fp;
    int have_fp;
    uint64_t scratch_top, scratch_low; /* strings go downward from top */
    uint64_t mask;                     /* the thread's signal mask, as stopped */
    int have_mask, stuck;              /* stuck: the thread is gone, nothing to put back */
    int in_call;                       /* a call under way (pi_wait) */
    int trap_set, trap_sig;            /* where calls return to, and the fault that follows */
    uint64_t trap;
    int deliver;                       /* a signal to hand over at release (0: none) */
    map_t *maps;
    size_t n_maps;
    int ranges_read;                   /* the three below, from libc's symbols (way_up_clean) */
    ranges_t lock_holders, loader, calls_back;
};

static int msgf(char *msg, size_t cap, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int msgf(char *msg, size_t cap, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (msg && cap) vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return rc;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- the process's mappings ---------------------------------------------- */

static void maps_free(pi_proc_t *p)
{
    for (size_t i = 0; i < p->n_maps; i++) free(p->maps[i].path);
    free(p->maps);
    p->maps = NULL;
    p->n_maps = 0;
}

static int maps_read(pi_proc_t *p)
{
    maps_free(p);
    char fn[64];
    snprintf(fn, sizeof fn, "/proc/%d/maps", (int)p->pid);
    FILE *f = fopen(fn, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0, n = 0, room = 0;
    while (getline(&line, &cap, f) > 0) {
        unsigned long lo, hi, off, ino;
        char perm[8], dev[16];
        int pos = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perm, &off, dev, &ino, &pos) < 6) continue;
        char *path = line + pos;
        path[strcspn(path, "\n")] = 0;
        if (n == room) {
            room = room ? room * 2 : 256;
            map_t *m = realloc(p->maps, room * sizeof *m);
            if (!m) break;
            p->maps = m;
        }
        p->maps[n] = (map_t){ lo, hi, off, perm[2] == 'x', strdup(path), ino, "" };
        snprintf(p->maps[n].dev, sizeof p->maps[n].dev, "%s", dev);
        if (!p->maps[n].path) break;
        n++;
        p->n_maps = n;
    }
    free(line);
    fclose(f);
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Code where a stopped thread may hold the loader's or malloc's lock, or
 * the tracer's own state. */
static int unsafe_object(const char *path)
{
    static const char *const pre[] = { "libc.so", "libc-", "ld-linux", "ld-2.", "ld64.so", "libgcc_s",
                                       "libpthread", "libdl.so", "libdl-", "libpoolscope-preload" };
    if (!strcmp(path, "[vdso]")) return 1;
    const char *b = base_name(path);
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (!strncmp(b, pre[i], strlen(pre[i]))) return 1;
    return 0;
}

static int unsafe_pc(const pi_proc_t *p, uint64_t pc)
{
    for (size_t i = 0; i < p->n_maps; i++)
        if (pc >= p->maps[i].lo && pc < p->maps[i].hi) return p->maps[i].x && unsafe_object(p->maps[i].path);
    return 1;   /* nowhere known (a map that just changed): not now */
}

/* ---- symbols from the files the process mapped ----------------------------- */

/* The load bias of the object whose first mapping (offset 0) is m. */
static int elf_bias(Elf *e, uint64_t map_lo, uint64_t *bias)
{
    size_t n;
    if (elf_getphdrnum(e, &n) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD) {
            *bias = map_lo - (ph.p_vaddr & ~(uint64_t)0xfff);
            return 0;
        }
    }
    return -1;
}

/* Every defined global or weak symbol of one of `names` (types: a mask of
 * 1 << STT_*) in the object whose first mapping is m, handed to cb with
 * its address in the process and size; .symtab first unless dyn_only.
 * cb returns nonzero to stop. */
typedef int (*sym_cb)(void *ctx, size_t which, uint64_t addr, uint64_t size);
static void elf_scan(const pi_proc_t *p, const map_t *m, int dyn_only, unsigned types, const char *const *names,
                     size_t nn, sym_cb cb, void *ctx)
{
    char fn[PATH_MAX + 32];
    /* the file the process mapped, even when it was replaced since (a
     * libc upgraded under a running server: "... (deleted)"); map_files
     * needs more privilege than the path, so the path comes second */
    snprintf(fn, sizeof fn, "/proc/%d/map_files/%llx-%llx", (int)p->pid, (unsigned long long)m->lo,
             (unsigned long long)m->hi);
    int fd = open(fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(fn, sizeof fn, "/proc/%d/root%s", (int)p->pid, m->path);
        fd = open(fn, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    uint64_t bias;
    int stop = 0;
    if (!e || elf_kind(e) != ELF_K_ELF || elf_bias(e, m->lo, &bias) != 0) goto out;
    for (int pass = dyn_only ? 1 : 0; pass < 2 && !stop; pass++) {
        Elf_Scn *s = NULL;
        while (!stop && (s = elf_nextscn(e, s))) {
            GElf_Shdr sh;
            if (!gelf_getshdr(s, &sh) || sh.sh_type != (pass ? SHT_DYNSYM : SHT_SYMTAB) || !sh.sh_entsize) continue;
            Elf_Data *d = elf_getdata(s, NULL);
            if (!d) continue;
            size_t cnt = sh.sh_size / sh.sh_entsize;
            for (size_t i = 0; i < cnt && !stop; i++) {
                GElf_Sym sym;
                if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_value) continue;
                int bind = GELF_ST_BIND(sym.st_info);
                if (!(types & (1u << GELF_ST_TYPE(sym.st_info))) || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
                const char *nm = elf_strptr(e, sh.sh_link, sym.st_name);
                for (size_t k = 0; nm && k < nn && !stop; k++)
                    if (!strcmp(nm, names[k])) stop = cb(ctx, k, sym.st_value + bias, sym.st_size);
            }
        }
    }
out:
    if (e) elf_end(e);
    close(fd);
}

static int first_cb(void *ctx, size_t which, uint64_t addr, uint64_t size)
{
    (void)which; (void)size;
    *(uint64_t *)ctx = addr;
    return 1;
}

/* The first mapping (offset 0) of the object whose base name starts with
 * one of the prefixes. */
static const map_t *object_map(const pi_proc_t *p, const char *const *pre, size_t n)
{
    for (size_t i = 0; i < p->n_maps; i++) {
        const map_t *m = &p->maps[i];
        if (m->off || m->path[0] != '/') continue;
        const char *b = base_name(m->path);
        for (size_t k = 0; k < n; k++)
            if (!strncmp(b, pre[k], strlen(pre[k]))) return m;
    }
    return NULL;
}

static const char *const libc_names[] = { "libc.so", "libc-" }, *const libdl_names[] = { "libdl.so", "libdl-" };
#define FUNC_TYPES (1u << STT_FUNC | 1u << STT_GNU_IFUNC)

uint64_t pi_libc_sym(pi_proc_t *p, const char *name)
{
    if (!p->maps && maps_read(p) != 0) return 0;
    uint64_t a = 0;
    const map_t *m = object_map(p, libc_names, 2);
    if (m) elf_scan(p, m, 1, FUNC_TYPES, &name, 1, first_cb, &a);
    if (!a && (m = object_map(p, libdl_names, 2))) elf_scan(p, m, 1, FUNC_TYPES, &name, 1, first_cb, &a);
    return a;
}

uint64_t pi_data_sym(pi_proc_t *p, const char *name)
{
    if (maps_read(p) != 0) return 0;
    char exe[PATH_MAX], lp[64];
    snprintf(lp, sizeof lp, "/proc/%d/exe", (int)p->pid);
    ssize_t n = readlink(lp, exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    /* the executable first, with its full symbol table (a program's
     * globals are not exported); then other objects' exported ones */
    uint64_t a = 0;
    for (int pass = 0; pass < 2 && !a; pass++)
        for (size_t i = 0; i < p->n_maps && !a; i++) {
            const map_t *m = &p->maps[i];
            if (m->off || m->path[0] != '/' || unsafe_object(m->path)) continue;
            int is_exe = !strcmp(m->path, exe);
            if (is_exe == !pass) elf_scan(p, m, !is_exe, 1u << STT_OBJECT, &name, 1, first_cb, &a);
        }
    return a;
}

/* ---- memory ---------------------------------------------------------------- */

static int mem_read(const pi_proc_t *p, uint64_t addr, void *buf, size_t n)
{
    struct iovec l = { buf, n }, r = { (void *)(uintptr_t)addr, n };
    if (process_vm_readv(p->pid, &l, 1, &r, 1, 0) == (ssize_t)n) return 0;
    for (size_t i = 0; i < n; i += 8) {   /* process_vm_readv refused: through ptrace */
        errno = 0;
        long w = ptrace(PTRACE_PEEKDATA, p->tid, (void *)(uintptr_t)(addr + i), NULL);
        if (errno) return -1;
        memcpy((char *)buf + i, &w, n - i < 8 ? n - i : 8);
    }
    return 0;
}

int pi_write(pi_proc_t *p, uint64_t addr, const void *buf, size_t n)
{
    struct iovec l = { (void *)buf, n }, r = { (void *)(uintptr_t)addr, n };
    if (process_vm_writev(p->pid, &l, 1, &r, 1, 0) == (ssize_t)n) return 0;
    for (size_t i = 0; i < n; i += 8) {
        long w = 0;
        if (n - i < 8) {   /* a partial word: keep the bytes after it */
            errno = 0;
            w = ptrace(PTRACE_PEEKDATA, p->tid, (void *)(uintptr_t)(addr + i), NULL);
            if (errno) return PSC_EIO;
        }
        memcpy(&w, (const char *)buf + i, n - i < 8 ? n - i : 8);
        if (ptrace(PTRACE_POKEDATA, p->tid, (void *)(uintptr_t)(addr + i), (void *)w) != 0) return PSC_EIO;
    }
    return 0;
}

int pi_read_str(pi_proc_t *p, uint64_t addr, char *buf, size_t cap)
{
    if (!cap) return PSC_EIO;
    size_t n = 0;
    while (n + 1 < cap) {
        char c[64];
        size_t k = cap - 1 - n < sizeof c ? cap - 1 - n : sizeof c;
        if (mem_read(p, addr + n, c, k) != 0) break;
        size_t z = strnlen(c, k);
        memcpy(buf + n, c, z);
        n += z;
        if (z < k) break;
    }
    buf[n] = 0;
    return n ? 0 : PSC_EIO;
}

uint64_t pi_put_str(pi_proc_t *p, const char *s)
{
    size_t n = strlen(s) + 1;
    uint64_t at = (p->scratch_low - n) & ~(uint64_t)7;
    if (at < p->scratch_top - SCRATCH || pi_write(p, at, s, n) != 0) return 0;
    p->scratch_low = at;
    return at;
}

/* ---- stops ----------------------------------------------------------------- */

/* Wait for tid's next stop for at most ms: 0 stopped (*st), 1 timed out,
 * -1 gone (exited or killed). A single step answers within microseconds,
 * so the first rounds only yield. */
static int wait_stop(pid_t tid, double ms, int *st)
{
    double t0 = now_ms();
    for (int i = 0;; i++) {
        pid_t r = waitpid(tid, st, WNOHANG | __WALL);
        if (r == tid) return WIFSTOPPED(*st) ? 0 : -1;
        if (r < 0 && errno != EINTR) return -1;
        if (now_ms() - t0 >= ms) return 1;
        if (i < 100) {
            sched_yield();
        } else {
            struct timespec d = { 0, 500 * 1000 };
            nanosleep(&d, NULL);
        }
    }
}

/* glibc's own signals (SIGCANCEL, SIGSETXID: 32 and 33): a thread calling
 * setuid waits, holding the loader's stack-cache lock, until every thread
 * has run the SIGSETXID handler; ours must run it during the call too. */
static int libc_internal_signal(int sig)
{
    return sig == 32 || sig == 33;
}

/* Stop a running or sleeping tid: 0 stopped, -1 gone or stuck. */
static int interrupt(pi_proc_t *p, double ms)
{
    if (ptrace(PTRACE_INTERRUPT, p->tid, NULL, NULL) != 0) return -1;
    double t0 = now_ms();
    for (;;) {
        int st, r = wait_stop(p->tid, ms - (now_ms() - t0), &st);
        if (r != 0) return -1;
        if (st >> 16 == PTRACE_EVENT_STOP) return 0;
        /* a signal arrived first: it goes on to the program (its siginfo
         * kept), and the interrupt stop follows */
        if (ptrace(PTRACE_CONT, p->tid, NULL, (void *)(uintptr_t)(st >> 16 ? 0 : WSTOPSIG(st))) != 0) return -1;
    }
}

/* ---- choosing the thread --------------------------------------------------- */

/* Sleeps the kernel restarts after a stop, made by neither the loader nor
 * malloc (they make openat, read of files, mmap, mprotect, munmap, brk,
 * madvise, futex). read is one: the loader's reads of a file do not sleep
 * in S state. */
static int restartable_sleep(long nr)
{
    switch (nr) {
    case SYS_nanosleep: case SYS_clock_nanosleep: case SYS_poll: case SYS_ppoll: case SYS_select:
    case SYS_pselect6: case SYS_accept: case SYS_accept4: case SYS_read: case SYS_readv:
    case SYS_recvfrom: case SYS_recvmsg: case SYS_wait4: case SYS_waitid: case SYS_pause:
    case SYS_rt_sigsuspend: case SYS_connect: case SYS_msgrcv:
        return 1;
    }
    return 0;
}

static int eintr_sleep(long nr)
{
    return nr == SYS_epoll_wait || nr == SYS_epoll_pwait ||
#ifdef SYS_epoll_pwait2
           nr == SYS_epoll_pwait2 ||
#endif
           nr == SYS_rt_sigtimedwait;
}

static int restart_code(long long ax)
{
    return ax == -ERESTARTSYS_ || ax == -ERESTARTNOINTR_ || ax == -ERESTARTNOHAND_ || ax == -ERESTART_RESTARTBLOCK_;
}

static int range_cb(void *ctx, size_t which, uint64_t addr, uint64_t size)
{
    (void)which;
    ranges_t *r = ctx;
    if (size && r->n < 96) { r->lo[r->n] = addr; r->hi[r->n++] = addr + size; }
    return 0;
}

static void sig_noop(int s) { (void)s; }

/* Where the process's libc returns from a signal handler (__restore_rt,
 * not in the dynamic symbol table): the sa_restorer glibc gives a handler,
 * read in our own process and moved to the process's libc when that is the
 * same file (device and inode). 0 when unknown. A handler's return address
 * on a stack means a signal frame there: whatever ran below it (malloc,
 * the loader) is still in the middle. */
static uint64_t restorer_of(const map_t *libc)
{
    static uint64_t own;   /* our __restore_rt's offset in libc, +1 (0: not read yet) */
    static char own_dev[16];
    static unsigned long own_ino;
    if (!own) {
        struct sigaction sa, old, got;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = sig_noop;
        int sig = SIGRTMAX;   /* not used by poolscope; put back at once */
        if (sigaction(sig, &sa, &old) != 0) return 0;
        int ok = sigaction(sig, &old, &got) == 0;
        uint64_t r = ok ? (uint64_t)(uintptr_t)got.sa_restorer : 0;
        pi_proc_t self = { .pid = getpid() };
        if (r && maps_read(&self) == 0) {
            for (size_t i = 0; i < self.n_maps; i++) {
                const map_t *m = &self.maps[i];
                if (r >= m->lo && r < m->hi) {
                    for (size_t k = 0; k < self.n_maps; k++)   /* that object's first mapping */
                        if (self.maps[k].ino == m->ino && !strcmp(self.maps[k].dev, m->dev) && !self.maps[k].off) {
                            own = r - self.maps[k].lo + 1;
                            snprintf(own_dev, sizeof own_dev, "%s", m->dev);
                            own_ino = m->ino;
                            break;
                        }
                    break;
                }
            }
        }
        maps_free(&self);
        if (!own) own = 1;   /* unknown: 1 stands for none */
    }
    if (own == 1 || libc->ino != own_ino || strcmp(libc->dev, own_dev)) return 0;
    return libc->lo + own - 1;
}

/* Is there a signal frame at uc (the word after a handler's return
 * address), and did that signal interrupt libc or the loader? The saved
 * rip and rsp of a real frame point into code and into a stack; a stale
 * copy of the restorer (left by a sigaction call in a frame now reused)
 * is followed by no such thing. */
static int handler_over_unsafe(pi_proc_t *p, uint64_t uc)
{
    uint64_t u[22];   /* ucontext_t up to gregs[REG_RIP] */
    if (mem_read(p, uc, u, sizeof u) != 0) return 0;
    uint64_t rsp = u[5 + 15], rip = u[5 + 16];   /* gregs start at offset 40 */
    int code = 0, stack = 0;
    for (size_t k = 0; k < p->n_maps; k++) {
        if (rip >= p->maps[k].lo && rip < p->maps[k].hi) code = p->maps[k].x;
        if (rsp >= p->maps[k].lo && rsp < p->maps[k].hi) stack = 1;
    }
    return code && stack && unsafe_pc(p, rip);
}

/* Is the way from the stopped point back up the stack clean? No word of
 * the 1 KiB above the stack pointer (the nearest few frames: farther up,
 * stale words left in long-lived frames said no to threads that were fine)
 * may point into the tracer (its own thread, or a hook) or into one of the
 * libc functions that hold a lock dlopen may need at that point. Which
 * ones depends on where the thread is (`at`): waiting in futex (W_FUTEX),
 * any function that waits for a lock while holding another (malloc,
 * setuid, fflush, ...); asleep in another system call (W_SLEEP), only the
 * loader's functions, since of the others none sleeps there holding
 * malloc's or the loader's lock; running in the program's code (W_RUN),
 * only dl_iterate_phdr, the one that calls the program holding the
 * loader's lock (the unwinder's way there). The shorter the list, the
 * fewer stale words say no to a thread that is fine. Words into the loader itself are no sign: every main
 * thread's stack holds _dl_fini, passed to __libc_start_main, and a
 * constructor run by dlopen may call dlopen again. A thread running a
 * signal handler over libc or the loader is refused too (the handler's
 * return address, restorer_of, then the interrupted pc in the signal
 * frame): it may have stopped malloc's internals, which are not in the
 * dynamic symbol table. With need_program, some word must point into the
 * program's own code (a futex waiter called from the program waits for a
 * lock, it does not hold one); a stale word can satisfy that, where for
 * the lists above it can only make the answer no. */
enum { W_FUTEX, W_SLEEP, W_RUN };
static int way_up_clean(pi_proc_t *p, uint64_t sp, int need_program, int at)
{
    static const char *const bad[] = {
        "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc",
        "valloc", "pvalloc", "malloc_trim", "malloc_info", "malloc_stats", "mallinfo", "mallinfo2",
        "dlopen", "dlmopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
        "__libc_dlopen_mode", "fork", "vfork", "_Fork", "exit", "quick_exit", "abort",
        "setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
        "setgroups", "fflush", "fclose", "fcloseall", "_IO_flush_all", "system", "popen", "pclose",
        "syslog", "vsyslog", "openlog", "closelog", "pthread_create", "pthread_exit", "pthread_detach",
        "__cxa_finalize", "__cxa_thread_atexit_impl", "getpwnam", "getpwuid", "getgrnam", "getaddrinfo",
        "gethostbyname", "setlocale", "newlocale", "tzset", "localtime", "mktime" };
    static const char *const loader[] = { "dl_iterate_phdr", "dlopen", "dlmopen", "dlclose", "__libc_dlopen_mode" };
    const map_t *libc = object_map(p, libc_names, 2);
    if (!libc) return 0;
    if (!p->ranges_read) {   /* libc's symbols once per process, not per thread tried */
        p->ranges_read = 1;
        elf_scan(p, libc, 1, FUNC_TYPES, loader, 1, range_cb, &p->calls_back);   /* dl_iterate_phdr */
        elf_scan(p, libc, 1, FUNC_TYPES, loader, sizeof loader / sizeof loader[0], range_cb, &p->loader);
        elf_scan(p, libc, 1, FUNC_TYPES, bad, sizeof bad / sizeof bad[0], range_cb, &p->lock_holders);
    }
    const ranges_t *r = at == W_RUN ? &p->calls_back : at == W_SLEEP ? &p->loader : &p->lock_holders;
    uint64_t restorer = restorer_of(libc);
    uint64_t w[128];
    size_t n = sizeof w;
    for (size_t k = 0; k < p->n_maps; k++)   /* not past the stack's end */
        if (sp >= p->maps[k].lo && sp < p->maps[k].hi && p->maps[k].hi - sp < n) n = p->maps[k].hi - sp;
    if (n < 8 || mem_read(p, sp, w, n & ~(size_t)7) != 0) return 0;
    int program = 0;
    for (size_t i = 0; i < n / 8; i++) {
        if (restorer && w[i] == restorer && handler_over_unsafe(p, sp + 8 * i + 8)) return 0;
        const map_t *m = NULL;
        for (size_t k = 0; k < p->n_maps && !m; k++)
            if (w[i] >= p->maps[k].lo && w[i] < p->maps[k].hi && p->maps[k].x) m = &p->maps[k];
        if (!m) continue;
        for (int k = 0; k < r->n; k++)
            if (w[i] > r->lo[k] && w[i] <= r->hi[k]) return 0;
        if (!strncmp(base_name(m->path), "libpoolscope-preload", 20)) return 0;
        if (!unsafe_object(m->path)) program = 1;
    }
    return program || !need_program;
}

static int read_small(const char *fn, char *b, size_t cap);

/* The state letter of /proc/PID/task/TID/stat (R, S, D, ...), 0 unknown. */
static char task_state(pid_t pid, pid_t tid)
{
    char fn[96], b[512];
    snprintf(fn, sizeof fn, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    const char *st = read_small(fn, b, sizeof b) == 0 ? strrchr(b, ')') : NULL;
    return st && st[1] ? st[2] : 0;
}

/* Single-step the stopped tid out of libc, the loader, libgcc_s and the
 * tracer, for at most ms. 0 out (regs updated), 1 it went to sleep in a
 * system call on the way (interrupted again: regs are those of that
 * sleep), -1 not out in time or gone. */
static int step_out(pi_proc_t *p, double ms)
{
    double t0 = now_ms();
    while (unsafe_pc(p, p->regs.rip)) {
        double left = ms - (now_ms() - t0);
        if (left <= 0) return -1;
        if (ptrace(PTRACE_SINGLESTEP, p->tid, NULL, NULL) != 0) return -1;
        int st, r;
        /* a step takes microseconds once the thread runs; on a busy
         * machine it may wait for a CPU (state R) far longer than that,
         * and only a thread that went to sleep (S) is stopped again */
        while ((r = wait_stop(p->tid, left < 20 ? left : 20, &st)) == 1 && task_state(p->pid, p->tid) == 'R' &&
               (left = ms - (now_ms() - t0)) > 0) {}
        if (r < 0) return -1;
        if (r == 1) {   /* asleep (or out of time): stop it where it is */
            if (interrupt(p, 1000) != 0) return -1;
            if (ptrace(PTRACE_GETREGS, p->tid, NULL, &p->regs) != 0) return -1;
            return 1;
        }
        if (st >> 16 == 0 && WSTOPSIG(st) != SIGTRAP) {
            /* a signal for the program: handed over as this thread is let
             * go (its handler may be what runs next: not a safe point) */
            p->deliver = WSTOPSIG(st);
            return -1;
        }
        if (ptrace(PTRACE_GETREGS, p->tid, NULL, &p->regs) != 0) return -1;
    }
    return 0;
}

static int save_fpu(pi_proc_t *p)
{
    if (!p->xs && !(p->xs = malloc(XSAVE_MAX))) return -1;
    struct iovec v = { p->xs, XSAVE_MAX };
    if (ptrace(PTRACE_GETREGSET, p->tid, (void *)(uintptr_t)NT_X86_XSTATE, &v) == 0) {
        p->xs_len = v.iov_len;
        return 0;
    }
    free(p->xs);
    p->xs = NULL;
    p->have_fp = ptrace(PTRACE_GETFPREGS, p->tid, NULL, &p->fp) == 0;
    return p->have_fp ? 0 : -1;
}

/* Let the thread go (with the signal that reached it while it was
 * stepped, if any). */
static void release(pi_proc_t *p)
{
    ptrace(PTRACE_DETACH, p->tid, NULL, (void *)(uintptr_t)p->deliver);
    p->deliver = 0;
}

/* Try tid at tier (1..4, file comment). 0: stopped at a safe point, saved;
 * 1: not now (let go); -1: cannot trace it at all. */
/* A sleep the kernel ended with EINTR because we stopped the thread (a
 * socket read with a timeout, epoll_wait, ...): made to be issued again
 * when the thread goes on, as if the stop had not happened (a timeout
 * starts afresh). connect is not: issued twice it means something else.
 * 1 when r was rewritten. */
static int reissue(const pi_proc_t *p, struct user_regs_struct *r)
{
    long long nr = (long long)r->orig_rax;
    if (nr < 0 || (long long)r->rax != -EINTR || nr == SYS_connect || !(restartable_sleep(nr) || eintr_sleep(nr)))
        return 0;
    unsigned char ins[2];   /* the syscall instruction it came from */
    if (mem_read(p, r->rip - 2, ins, 2) != 0 || ins[0] != 0x0f || ins[1] != 0x05) return 0;
    r->rax = r->orig_rax;
    r->rip -= 2;
    r->orig_rax = (unsigned long long)-1;   /* and the kernel restarts nothing on top */
    return 1;
}

/* A thread not taken: let go, its sleep issued again if we cut it short. */
static void let_go(pi_proc_t *p)
{
    struct user_regs_struct r;
    if (ptrace(PTRACE_GETREGS, p->tid, NULL, &r) == 0 && reissue(p, &r)) ptrace(PTRACE_SETREGS, p->tid, NULL, &r);
    release(p);
}

static int try_thread(pi_proc_t *p, pid_t tid, int allow_eintr, double ms)
{
    p->tid = tid;
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) return errno == ESRCH ? 1 : -1;
    if (interrupt(p, 1000) != 0) { release(p); return 1; }
    if (ptrace(PTRACE_GETREGS, tid, NULL, &p->regs) != 0 || maps_read(p) != 0) { release(p); return 1; }
    int ok = 0;
    for (int round = 0; round < 2 && !ok; round++) {
        long long nr = (long long)p->regs.orig_rax, ax = (long long)p->regs.rax;
        int asleep = nr >= 0 && (restart_code(ax) || ax == -EINTR);
        if (asleep) {
            if (restartable_sleep(nr) && (restart_code(ax) || nr != SYS_connect)) ok = way_up_clean(p, p->regs.rsp, 0, W_SLEEP);
            else if ((nr == SYS_futex || nr == SYS_restart_syscall) && restart_code(ax))
                ok = way_up_clean(p, p->regs.rsp, 1, W_FUTEX);
            else if (eintr_sleep(nr) && allow_eintr) ok = way_up_clean(p, p->regs.rsp, 0, W_SLEEP);
            ok = ok ? PI_AT_SYSCALL : 0;
            if (ok) reissue(p, &p->regs);   /* (an EINTR of ours: the sleep is issued again at pi_close) */
            break;   /* asleep anywhere else: not this thread */
        }
        if (round) break;
        int r = step_out(p, ms);
        if (r == 0 && way_up_clean(p, p->regs.rsp, 0, W_RUN)) ok = PI_AT_USER;
        else if (r != 1) break;
        /* r == 1: asleep on the way, judged in the next round */
    }
    if (!ok || save_fpu(p) != 0) { let_go(p); return 1; }
    /* while the calls run, only what must reach the thread can: glibc's own
     * signals and faults (SIGKILL and SIGSTOP cannot be blocked); the rest
     * stay pending and come when the mask is given back */
    uint64_t all = ~0ull;
    static const int pass[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, 32, 33 };
    for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++) all &= ~(1ull << (pass[i] - 1));
    p->have_mask = ptrace(PTRACE_GETSIGMASK, tid, (void *)(uintptr_t)8, &p->mask) == 0;
    if (!p->have_mask || ptrace(PTRACE_SETSIGMASK, tid, (void *)(uintptr_t)8, &all) != 0) {
        p->have_mask = 0;
        let_go(p);
        return 1;
    }
    p->how = ok;
    p->scratch_top = (p->regs.rsp - RED_ZONE - 64) & ~(uint64_t)15;
    p->scratch_low = p->scratch_top;
    return 0;
}

static int read_small(const char *fn, char *b, size_t cap)
{
    int fd = open(fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, b, cap - 1);
    close(fd);
    if (n <= 0) return -1;
    b[n] = 0;
    return 0;
}

/* The tier a thread is tried at (file comment), from /proc (read without
 * stopping it); 0: not at all. A thread asleep in any other system call
 * could not be used, and stopping it could cost it an EINTR; one in
 * uninterruptible sleep (D) would not stop in time. */
static int tier_of(pid_t pid, pid_t tid)
{
    char fn[96], b[512], st = task_state(pid, tid);
    if (st == 'D' || st == 'Z' || st == 'X') return 0;
    snprintf(fn, sizeof fn, "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
    if (read_small(fn, b, sizeof b) != 0 || !strncmp(b, "running", 7)) return 3;
    long nr = strtol(b, NULL, 10);
    if (nr < 0) return 3;   /* stopped outside a system call */
    if (restartable_sleep(nr)) return 1;
    /* restart_syscall: a timed sleep resumed after a stop (by a debugger,
     * or an earlier attach): which one is not known, so judged as futex */
    if (nr == SYS_futex || nr == SYS_restart_syscall) return 2;
    if (eintr_sleep(nr)) return 4;
    return 0;
}

static int tids(pid_t pid, pid_t *out, int cap)
{
    char fn[64];
    snprintf(fn, sizeof fn, "/proc/%d/task", (int)pid);
    DIR *d = opendir(fn);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap)
        if (e->d_name[0] != '.') out[n++] = (pid_t)atoi(e->d_name);
    closedir(d);
    return n;
}

static int traced_by(pid_t pid)
{
    char fn[64], line[256];
    snprintf(fn, sizeof fn, "/proc/%d/status", (int)pid);
    FILE *f = fopen(fn, "r");
    int t = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "TracerPid:", 10)) t = atoi(line + 10);
    fclose(f);
    return t;
}

int pi_open(pid_t pid, int budget_ms, pi_proc_t **out, char *msg, size_t mcap)
{
    *out = NULL;
    pi_proc_t *p = calloc(1, sizeof *p);
    if (!p) return msgf(msg, mcap, PSC_ENOMEM, "out of memory");
    p->pid = pid;
    if (maps_read(p) != 0) {
        free(p);
        return msgf(msg, mcap, PSC_EIO, "cannot read /proc/%d/maps: %s", (int)pid, strerror(errno));
    }
    enum { MAXT = 4096 };
    pid_t *t = malloc(MAXT * sizeof *t);
    int *tier = malloc(MAXT * sizeof *tier);
    if (!t || !tier) { free(t); free(tier); maps_free(p); free(p); return msgf(msg, mcap, PSC_ENOMEM, "out of memory"); }
    double t0 = now_ms();
    int rc = PSC_EIO, perm = EPERM, seized = 0, refused = 0;
    if (traced_by(pid)) goto denied;
    for (int attempt = 0; now_ms() - t0 < budget_ms || !attempt; attempt++) {
        if (attempt) { struct timespec d = { 0, 50 * 1000 * 1000 }; nanosleep(&d, NULL); }
        int n = tids(pid, t, MAXT);
        if (n <= 0) { msgf(msg, mcap, PSC_EIO, "pid %d: the process is gone", (int)pid); goto done; }
        for (int i = 0; i < n; i++) tier[i] = tier_of(pid, t[i]);
        /* the threads of each tier in turn */
        for (int want = 1; want <= 4; want++)
            for (int i = 0; i < n; i++) {
                if (tier[i] != want) continue;
                double left = budget_ms - (now_ms() - t0);
                int r = try_thread(p, t[i], want == 4, left < 300 ? (left > 20 ? left : 20) : 300);
                if (r == 0) { rc = 0; goto done; }
                /* refused: no permission, or traced by another (a thread
                 * exiting refuses too: only all of them refusing counts) */
                if (r < 0) { perm = errno; refused++; } else seized++;
            }
        if (refused && !seized) goto denied;
    }
    msgf(msg, mcap, PSC_EIO, "pid %d: no thread reached a safe point within %.1f s (every one inside "
         "libc, the loader or a lock wait): no safe thread; try again", (int)pid, budget_ms / 1e3);
    goto done;
denied:
    if (traced_by(pid))
        msgf(msg, mcap, PSC_EIO, "pid %d is being traced already (by pid %d: a debugger?)", (int)pid, traced_by(pid));
    else
        msgf(msg, mcap, PSC_EIO, "no ptrace permission for pid %d: %s (/proc/sys/kernel/yama/ptrace_scope, "
             "or a container without CAP_SYS_PTRACE)", (int)pid, strerror(perm));
done:
    free(t);
    free(tier);
    if (rc != 0) { maps_free(p); free(p); return rc; }
    *out = p;
    return 0;
}

pid_t pi_tid(const pi_proc_t *p) { return p->tid; }
int pi_how(const pi_proc_t *p) { return p->how; }

/* Where a call returns to: address 0, whose fault (SIGSEGV) is caught
 * before the program sees it. But the kernel resets an ignored signal to
 * its default when it forces one, so a program that ignores SIGSEGV would
 * lose that: for it, a ud2 instruction found in libc's code (SIGILL). */
static uint64_t return_trap(pi_proc_t *p, int *sig)
{
    *sig = SIGSEGV;
    char fn[64], line[256];
    snprintf(fn, sizeof fn, "/proc/%d/status", (int)p->pid);
    FILE *f = fopen(fn, "r");
    unsigned long long ign = 0;
    if (f) {
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "SigIgn:", 7)) ign = strtoull(line + 7, NULL, 16);
        fclose(f);
    }
    if (!(ign >> (SIGSEGV - 1) & 1) || (ign >> (SIGILL - 1) & 1)) return 0;
    for (size_t i = 0; i < p->n_maps; i++) {
        const map_t *m = &p->maps[i];
        if (!m->x || strncmp(base_name(m->path), "libc", 4)) continue;
        unsigned char b[4096];
        for (uint64_t a = m->lo; a + sizeof b <= m->hi; a += sizeof b - 1) {
            if (mem_read(p, a, b, sizeof b) != 0) break;
            for (size_t k = 0; k + 1 < sizeof b; k++)
                if (b[k] == 0x0f && b[k + 1] == 0x0b) {
                    *sig = SIGILL;
                    return a + k;
                }
        }
    }
    return 0;
}

int pi_call(pi_proc_t *p, uint64_t fn, const uint64_t *args, int n, int timeout_ms, uint64_t *ret,
            char *msg, size_t mcap)
{
    if (n > 6 || !fn) return msgf(msg, mcap, PSC_EINVAL, "bad call");
    struct user_regs_struct r = p->regs;
    if (!p->trap_set) {
        p->trap_set = 1;
        p->trap = return_trap(p, &p->trap_sig);
    }
    uint64_t sp = ((p->scratch_low - 256) & ~(uint64_t)15) - 8;
    if (pi_write(p, sp, &p->trap, 8) != 0)   /* the return address */
        return msgf(msg, mcap, PSC_EIO, "cannot write the stack of thread %d", (int)p->tid);
    unsigned long long *reg[6] = { &r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9 };
    for (int i = 0; i < n; i++) *reg[i] = args[i];
    r.rsp = sp;
    r.rip = fn;
    r.rax = 0;
    r.orig_rax = (unsigned long long)-1;   /* no system call to restart on the way in */
    if (ptrace(PTRACE_SETREGS, p->tid, NULL, &r) != 0 || ptrace(PTRACE_CONT, p->tid, NULL, NULL) != 0)
        return msgf(msg, mcap, PSC_EIO, "cannot run thread %d: %s", (int)p->tid, strerror(errno));
    p->in_call = 1;
    return pi_wait(p, timeout_ms, ret, msg, mcap);
}

int pi_wait(pi_proc_t *p, int timeout_ms, uint64_t *ret, char *msg, size_t mcap)
{
    if (!p->in_call) return msgf(msg, mcap, PSC_EINVAL, "no call under way");
    struct user_regs_struct r = p->regs;
    double t0 = now_ms();
    for (;;) {
        int st, w = wait_stop(p->tid, timeout_ms > 0 ? timeout_ms - (now_ms() - t0) : 1e9, &st);
        if (w < 0) {
            p->in_call = 0;
            p->stuck = 1;   /* nothing left to put back */
            if (kill(p->pid, 0) != 0) return msgf(msg, mcap, PSC_EIO, "pid %d ended during the call", (int)p->pid);
            return msgf(msg, mcap, PSC_EIO, "thread %d ended during the call (cancelled?); the process runs on",
                        (int)p->tid);
        }
        if (w == 1)   /* still in our call (the loader busy?): pi_wait again */
            return msgf(msg, mcap, PSC_EBUSY, "the call in thread %d has not returned within %.0f s", (int)p->tid,
                        timeout_ms / 1e3);
        int sig = WSTOPSIG(st);
        if (st >> 16 == 0 && sig == p->trap_sig) {
            if (ptrace(PTRACE_GETREGS, p->tid, NULL, &r) != 0) return msgf(msg, mcap, PSC_EIO, "thread %d gone", (int)p->tid);
            if (r.rip == p->trap) break;   /* returned to our trap */
        }
        if (st >> 16 == 0 && !libc_internal_signal(sig)) {   /* a fault: the others are blocked */
            p->in_call = 0;
            return msgf(msg, mcap, PSC_EIO, "the call crashed in thread %d (signal %d at pc %#llx); its "
                        "registers are put back, but what the call had changed is not", (int)p->tid, sig, r.rip);
        }
        /* glibc's own signals go in now (their handlers are short and take
         * no lock); a group stop is let pass: the thread enters it again
         * when we let it go */
        if (ptrace(PTRACE_CONT, p->tid, NULL, (void *)(uintptr_t)(st >> 16 ? 0 : sig)) != 0)
            return msgf(msg, mcap, PSC_EIO, "thread %d gone", (int)p->tid);
    }
    p->in_call = 0;
    *ret = r.rax;
    return 0;
}

void pi_close(pi_proc_t *p)
{
    if (!p) return;
    if (p->stuck) goto out;   /* the thread is gone */
    if (p->in_call) {
        /* never let go of a thread in our call: it would return to 0 with
         * no one to catch it. Wait (for ever, if need be) for it to end */
        uint64_t ignored;
        char m[8];
        while (pi_wait(p, 0, &ignored, m, sizeof m) == PSC_EBUSY) {}
        if (p->stuck) goto out;
    }
    /* as it was: a sleep interrupted with a restart code is restarted by
     * the kernel as the thread leaves this stop (orig_rax kept) */
    ptrace(PTRACE_SETREGS, p->tid, NULL, &p->regs);
    if (p->have_mask) ptrace(PTRACE_SETSIGMASK, p->tid, (void *)(uintptr_t)8, &p->mask);
    if (p->xs) {
        struct iovec v = { p->xs, p->xs_len };
        ptrace(PTRACE_SETREGSET, p->tid, (void *)(uintptr_t)NT_X86_XSTATE, &v);
    } else if (p->have_fp) {
        ptrace(PTRACE_SETFPREGS, p->tid, NULL, &p->fp);
    }
    release(p);
out:
    free(p->xs);
    maps_free(p);
    free(p);
}

#else /* not x86_64 */

struct pi_proc { int unused; };
int pi_open(pid_t pid, int budget_ms, pi_proc_t **out, char *msg, size_t mcap)
{
    (void)pid; (void)budget_ms;
    *out = NULL;
    if (msg && mcap) snprintf(msg, mcap, "attach is supported on x86_64 only");
    return PSC_EUNSUP;
}
pid_t pi_tid(const pi_proc_t *p) { (void)p; return 0; }
int pi_how(const pi_proc_t *p) { (void)p; return 0; }
uint64_t pi_libc_sym(pi_proc_t *p, const char *name) { (void)p; (void)name; return 0; }
uint64_t pi_data_sym(pi_proc_t *p, const char *name) { (void)p; (void)name; return 0; }
uint64_t pi_put_str(pi_proc_t *p, const char *s) { (void)p; (void)s; return 0; }
int pi_read_str(pi_proc_t *p, uint64_t addr, char *buf, size_t cap) { (void)p; (void)addr; (void)buf; (void)cap; return PSC_EUNSUP; }
int pi_call(pi_proc_t *p, uint64_t fn, const uint64_t *args, int n, int timeout_ms, uint64_t *ret,
            char *msg, size_t mcap)
{
    (void)p; (void)fn; (void)args; (void)n; (void)timeout_ms; (void)ret; (void)msg; (void)mcap;
    return PSC_EUNSUP;
}
int pi_wait(pi_proc_t *p, int timeout_ms, uint64_t *ret, char *msg, size_t mcap)
{
    (void)p; (void)timeout_ms; (void)ret; (void)msg; (void)mcap;
    return PSC_EUNSUP;
}
int pi_write(pi_proc_t *p, uint64_t addr, const void *buf, size_t n) { (void)p; (void)addr; (void)buf; (void)n; return PSC_EUNSUP; }
void pi_close(pi_proc_t *p) { (void)p; }

#endif

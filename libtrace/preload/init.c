/* init.c — the library's state (ps_g, ps_tls) and its start: the
 * environment read once (constructor, or the first hooked call if that
 * comes earlier), the trace opened, the first thread registered, the
 * flusher started; the destructor's final flush; the pieces attach.c
 * needs for a start in a running process. */
#include "preload.h"
#include <dlfcn.h>
#include <fnmatch.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/membarrier.h>

__thread ps_tls_t ps_tls __attribute__((tls_model("initial-exec")));
ps_global_t ps_g = {
    .wlock = PTHREAD_MUTEX_INITIALIZER,
    .tlock = PTHREAD_MUTEX_INITIALIZER,
    .mlock = PTHREAD_MUTEX_INITIALIZER,
    .z = { .lock = PTHREAD_MUTEX_INITIALIZER },
    .child_lock = PTHREAD_MUTEX_INITIALIZER,
    .late_lock = PTHREAD_MUTEX_INITIALIZER,
    .stk = {
        .stab = { .lock = PTHREAD_MUTEX_INITIALIZER, .bits = 20 },
        .strtab = { .lock = PTHREAD_MUTEX_INITIALIZER, .bits = 16 },
        .modlock = PTHREAD_MUTEX_INITIALIZER,
        .seen_adds = ~0ull, .seen_subs = ~0ull,
    },
    .page_size = 4096,
    .fd = -1,
    .cnt = &ps_g.cnt_local,
    .ctl_fd = -1,
};


void ps_recompute_on(void)
{
    /* ps_real_ready: the hooks' fast paths call the real functions on `on` alone */
    ps_g.on = ps_real_ready && ps_g.active && !ps_g.paused && !ps_g.closed && !ps_g.child_pending && !ps_g.stopping;
    ps_g.fast = ps_g.on && ps_real.glibc;
    ps_g.fast_ns = ps_g.fast && ps_g.stacks == PST_STACKS_NONE;
    /* fast1 also says no block came from the bootstrap arena (dlsym's
     * allocations, none on today's glibc): free's fast path then skips in_boot */
    ps_g.fast1 = ps_g.fast_ns && !ps_g.multi && !ps_g.boot.used;
    /* against a pthread_create in another thread (multi = 1, fence,
     * fast1 = 0) between our read of multi and our store: one of the two
     * sees the other's store */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (ps_g.multi) ps_g.fast1 = 0;
}

static const char *env(const char *k) { const char *v = getenv(k); return v && *v ? v : NULL; }

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static int follow_match(const char *pat, const char *path)
{
    if (!path || !*path) return 0;
    if (fnmatch(pat, path, 0) == 0) return 1;
    const char *b = strrchr(path, '/');
    return b && fnmatch(pat, b + 1, 0) == 0;
}

static int self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (me >= lo && me < hi) {
            ps_g.self_lo = lo;
            ps_g.self_hi = hi;
            return 1;
        }
    }
    return 0;
}

int ps_common_open(int first_image)
{
    ps_g.cyc0 = ps_cycles();
    ps_g.mono0 = ps_g.start_mono = ps_mono_ns();
    ps_g.tick = 0;
    ps_g.tick_cyc = ps_g.cyc0;
    ps_g.stale_cyc = PS_TICK_STALE_NS;
    ps_g.age_dead = 0;
    /* Per address space: a fork child registers again. */
    ps_g.membarrier_ok = ps_sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    ps_g.start_real = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
    if (ps_open_trace(first_image) != 0) return -1;
    ps_g.active = 1;
    ps_ctl_open();
    /* the run's recording stopped while this image was starting (after
     * ps_init looked, before record saw this counters file): stop at the
     * first tick (ctl.h) */
    if (ps_g.cnt != &ps_g.cnt_local && ps_run_stopped()) ps_g.cnt->stop_req = 1;
    ps_modules_scan(1);
    return 0;
}

/* Runs once: from the constructor, or from the first hooked call if that
 * comes earlier. */
void ps_init(void)
{
    int expect = 0;
    if (!__atomic_compare_exchange_n(&ps_g.init_state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    ps_tls.busy += PS_BUSY_OWN;
    ps_resolve_real();
    ps_g.page_size = sysconf(_SC_PAGESIZE);
    ps_g.pid = getpid();
    const char *out = env("POOLSCOPE_OUT");
    if (!out) goto done;

    const char *s = env("POOLSCOPE_STACKS");
    ps_g.stacks = !s ? PST_STACKS_NONE : !strcmp(s, "fp") ? PST_STACKS_FP
                : !strcmp(s, "dwarf") ? PST_STACKS_DWARF : PST_STACKS_NONE;
    ps_g.depth = 32;
    if ((s = env("POOLSCOPE_DEPTH"))) ps_g.depth = atoi(s);
    if (ps_g.depth < 1) ps_g.depth = 1;
    if (ps_g.depth > PST_MAX_DEPTH) ps_g.depth = PST_MAX_DEPTH;
    if ((s = env("POOLSCOPE_MANIFEST"))) copy_str(ps_g.manifest, sizeof ps_g.manifest, s);
    if ((s = env("POOLSCOPE_FOLLOW_EXEC"))) copy_str(ps_g.follow, sizeof ps_g.follow, s);
    if ((s = env("POOLSCOPE_SIGNAL"))) ps_g.sig = atoi(s);
    if ((s = env("POOLSCOPE_PAUSED"))) ps_g.paused = s[0] == '1';
    ps_ctl_dir_take(env(PST_CTL_DIR_ENV));
    if (ps_run_stopped()) goto done;   /* record stopped the run's recording: an image after it records nothing */
    ps_fn_parse(env("POOLSCOPE_SCOPE_FUNCS"));

    int first_image = 1;
    if ((s = env("POOLSCOPE_GEN"))) {
        char *e;
        long gpid = strtol(s, &e, 10);
        first_image = 0;
        ps_g.gen = 1;
        if (*e == ':' && gpid == ps_g.pid) ps_g.gen = strtoull(e + 1, NULL, 10);
        if (ps_g.follow[0]) {
            char exe[4096];
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[n > 0 ? n : 0] = 0;
            if (!follow_match(ps_g.follow, env("POOLSCOPE_EXEC_PATH")) &&
                !follow_match(ps_g.follow, exe))
                goto done;   /* untraced image: pure pass-through */
        }
    }
    if (out[0] == '/') {
        copy_str(ps_g.out, sizeof ps_g.out, out);
    } else {
        if (!getcwd(ps_g.out, sizeof ps_g.out - 2)) goto done;
        size_t l = strlen(ps_g.out);
        if (l + strlen(out) + 2 > sizeof ps_g.out) goto done;
        ps_g.out[l] = '/';
        strcpy(ps_g.out + l + 1, out);
    }

    dl_iterate_phdr(self_cb, (void *)(uintptr_t)&ps_init);
    ps_g.main_stk_hi = (uintptr_t)__libc_stack_end;
    ps_stacks_init();
    s = env("POOLSCOPE_PYTHON_FRAMES");
    /* A Python stack is deep (106 frames in a plain script: the loader's
     * calls, the C calls between the Python ones): without a depth asked
     * for, a Python process gets the deepest, so its stacks reach _start
     * (two thirds of its stacks were cut at 32; the cost is in README.md, "Profile Python") */
    if (ps_py_init(!s || strcmp(s, "0"), 1) && !env("POOLSCOPE_DEPTH")) ps_g.depth = PST_MAX_DEPTH;
    ps_g.key_ok = pthread_key_create(&ps_g.key, ps_key_dtor) == 0;
    if (ps_common_open(first_image) != 0) goto done;
    pthread_atfork(ps_prepare_fork, ps_parent_after_fork, ps_child_after_fork);
    ps_thr_t *t = ps_thr_register();
    uint64_t boot = __atomic_exchange_n(&ps_g.boot_lost, 0, __ATOMIC_RELAXED);
    if (t && boot) {
        ps_add_lost(boot);
        ps_put_lost(t, boot, PST_LOST_BOOTSTRAP);
    }
    if (ps_g.sig > 0) ps_install_signal();
    ps_signals_init();
    ps_recompute_on();
    ps_fn_install();
    ps_start_flusher();
done:
    ps_g.inited = 1;
    __atomic_store_n(&ps_g.init_state, 2, __ATOMIC_RELEASE);
    ps_tls.busy -= PS_BUSY_OWN;
}

__attribute__((constructor)) static void ps_ctor(void)
{
    ps_init();
}

/* For attach.c (`poolscope attach`): the pieces of ps_init a start in a
 * running process needs, from the statics they use. */
void ps_core_ctl_dir(const char *dir) { ps_ctl_dir_take(dir); }
int ps_core_open(void) { return ps_common_open(1); }
void ps_core_self(void) { dl_iterate_phdr(self_cb, (void *)(uintptr_t)&ps_init); }
int ps_core_key(void) { return pthread_key_create(&ps_g.key, ps_key_dtor) == 0; }

/* At the end of a normal exit, the C++ runtime's emergency pool for
 * exceptions (72,704 bytes from libstdc++'s constructor, before main) is
 * still allocated: it is freed only by __gnu_cxx::__freeres, which glibc
 * calls under valgrind. Every C++ program would show it as a leak, which it
 * is not; heaptrack and valgrind call the function too. Called here, while
 * still recording, so its free is in the trace; later code that needs the
 * pool (an exception thrown when malloc fails, after our destructor) finds
 * it empty and falls back as when the pool is used up. */
static void cxx_freeres(void)
{
    ps_tls.busy += PS_BUSY_OWN;   /* dlsym's own allocations (its error buffer) are the tracer's */
    void (*fr)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "_ZN9__gnu_cxx9__freeresEv");
    ps_tls.busy -= PS_BUSY_OWN;
    if (fr) fr();
}

__attribute__((destructor)) static void ps_dtor(void)
{
    if (ps_g.active && !ps_g.closed && !ps_tls.busy) cxx_freeres();
    ps_final();
}

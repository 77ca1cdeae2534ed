/* attach.c — recording a process that was not started under us
 * (`poolscope attach PID`, cli/cmd_attach.c).
 *
 * The CLI makes the process dlopen this library (libtrace/inject.c calls
 * dlopen, then poolscope_attach_start, in one of its threads). Loaded
 * late, the library is last in the global scope: no call of the program
 * reaches our malloc through symbol lookup, and the slots the loader bound
 * long ago stay bound to libc. So the hooks go in the way --scope-function
 * puts its stubs in (got.c): each JUMP_SLOT and GLOB_DAT slot of every
 * loaded object that names a function of the malloc or mmap family is
 * pointed at our definition of it, and what it held is kept in a table.
 * Objects the program loads later are patched by the tracer's thread
 * within 10 ms of the loader's adds counter moving (the library does not
 * wrap dlopen: hooks_proc.c says why).
 *
 * The hooks call glibc's functions (__libc_malloc, ...; hooks_alloc.c,
 * ps_resolve_real: dlsym(RTLD_NEXT) finds nothing after a library loaded
 * last). A program that brings its own allocator (jemalloc linked in,
 * tcmalloc preloaded) is refused by the CLI rather than mixed with
 * glibc's.
 *
 * Stop (`--duration`, Ctrl-C, `poolscope detach PID`): the CLI sets
 * stop_req in the counters file (ctl.h) as record --duration does; the
 * tracer's thread pauses recording, writes every slot back to what it held
 * (ps_att_restore, inside dl_iterate_phdr so no object goes away under
 * the write), then writes every ring and END (PST_END_STOPPED). A thread
 * inside one of our hooks at that moment finishes its call through us: the
 * library stays loaded (NODELETE) and every hook passes calls through once
 * recording is closed. A later attach starts a new file in the same
 * library (attach_again, restart_streams below). What is not seen: calls
 * inside libc that do not go
 * through its PLT, the loader's own allocations, and pool/KV events of the
 * event API (an engine finds the API by symbol lookup at its start).
 */
#include "preload.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))


/* The functions hooked in an attached process: hooks_alloc.c's. */
static const char *const att_names[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "mmap", "mmap64", "munmap", "mremap", "madvise",
    "mprotect", "brk", "sbrk",
};
#define ATT_N (sizeof att_names / sizeof att_names[0])

/* Slots written: open addressing on the slot's address. A slot whose
 * object was unloaded keeps its entry (its address may come back with
 * another object: the value we wrote is checked before restoring). */
#define ATT_SLOTS 8192
typedef struct att_slot { uintptr_t addr, orig; } att_slot_t;

static struct {
    uintptr_t hook[ATT_N];      /* our definition of each function */
    att_slot_t *slot;           /* ATT_SLOTS entries, raw mmap */
    unsigned n_slot;
    unsigned long long seen_adds;
    pthread_mutex_t lock;       /* one patching pass at a time */
    volatile int on;            /* slots are being hooked (between start and stop) */
} att = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int att_match(const char *name, void *arg)
{
    (void)arg;
    if (name[0] != 'm' && name[0] != 'f' && name[0] != 'c' && name[0] != 'r' && name[0] != 'p' &&
        name[0] != 'a' && name[0] != 'v' && name[0] != 'b' && name[0] != 's')
        return -1;
    for (unsigned i = 0; i < ATT_N; i++)
        if (!strcmp(name, att_names[i])) return (int)i;
    return -1;
}

static att_slot_t *find_slot(uintptr_t addr, int make)
{
    size_t h = (size_t)((addr >> 3) * 0x9e3779b97f4a7c15ull >> 51) & (ATT_SLOTS - 1);
    for (unsigned k = 0; k < ATT_SLOTS; k++, h = (h + 1) & (ATT_SLOTS - 1)) {
        att_slot_t *e = &att.slot[h];
        if (e->addr == addr) return e;
        if (!e->addr) {
            if (!make || att.n_slot >= ATT_SLOTS * 3 / 4) return NULL;
            e->addr = addr;
            att.n_slot++;
            return e;
        }
    }
    return NULL;
}

/* Under the loader's lock: point the slot at our hook, keep what it held. */
static void hook_slot(const ps_got_slot_t *s, void *arg)
{
    (void)arg;
    uintptr_t mine = att.hook[s->fn], cur = __atomic_load_n((uintptr_t *)s->addr, __ATOMIC_RELAXED);
    if (!mine || cur == mine) return;
    att_slot_t *e = find_slot(s->addr, 1);
    if (!e) return;   /* table full: this slot stays the program's */
    e->orig = cur;
    if (ps_got_write(s, mine) != 0) e->orig = 0;
}

/* Under the loader's lock: a slot that still holds our hook gets back what
 * it held before. */
static void unhook_slot(const ps_got_slot_t *s, void *arg)
{
    (void)arg;
    uintptr_t mine = att.hook[s->fn], cur = __atomic_load_n((uintptr_t *)s->addr, __ATOMIC_RELAXED);
    if (!mine || cur != mine) return;
    att_slot_t *e = find_slot(s->addr, 0);
    uintptr_t back = e && e->orig ? e->orig : ps_got_lookup(s->name, s->version);
    if (back && back != mine) ps_got_write(s, back);
}

/* Our own definitions: looked up in our object only (a reference to
 * `malloc` from our code would bind through the global scope to libc's). */
static int self_defs(void)
{
    for (unsigned i = 0; i < ATT_N; i++)
        if (!(att.hook[i] = ps_got_lookup_self(att_names[i]))) return -1;
    return 0;
}

void ps_att_poll(void)
{
    if (!__atomic_load_n(&att.on, __ATOMIC_ACQUIRE)) return;
    unsigned long long c[2];
    ps_loader_counters(c);
    if (c[0] == att.seen_adds) return;
    pthread_mutex_lock(&att.lock);
    att.seen_adds = c[0];
    if (att.on) ps_got_walk(att_match, hook_slot, NULL);
    pthread_mutex_unlock(&att.lock);
}

void ps_att_restore(void)
{
    pthread_mutex_lock(&att.lock);
    if (att.on) {
        att.on = 0;
        ps_got_walk(att_match, unhook_slot, NULL);
    }
    pthread_mutex_unlock(&att.lock);
}

/* A second attach window in the same process: the first one's trace is
 * closed (stopped, END written), its slots restored, so no hook of ours
 * runs in any thread (the program's calls go to glibc again). The state
 * of that file goes as a fork child's does (ps_child_after_fork), but the
 * threads live on with their records, which their TLS points to: each
 * record is emptied in place (restart_streams gives it a stream of the new
 * file once it is open). Records of threads that ended are retired. */
static void attach_again(void)
{
    pthread_mutex_lock(&ps_g.tlock);
    ps_thr_t **pp = &ps_g.threads;
    while (*pp) {
        ps_thr_t *t = *pp;
        if (t->dead || t == ps_g.late) {
            *pp = t->next;
            t->c.stream = 0;
            t->next = ps_g.thr_free;
            ps_g.thr_free = t;
            continue;
        }
        ps_thr_t *next = t->next;
        uint8_t *ring = t->ring;
        uint64_t rmask = t->rmask;
        size_t len = t->map_len;
        int in_ctl = t->in_ctl, tid = t->tid;
        uintptr_t lo = t->stk_lo, hi = t->stk_hi;
        uint8_t fl = t->is_flusher;
        memset(t, 0, sizeof *t);
        t->next = next;
        t->ring = ring;
        t->rmask = rmask;
        t->map_len = len;
        t->in_ctl = in_ctl;
        t->tid = tid;
        t->stk_lo = lo;
        t->stk_hi = hi;
        t->is_flusher = fl;
        pst_enc_init(&t->enc, PST_CODING_RECENT, t->enc_index);
        t->soft = PS_SELF_FILL(t->rmask + 1);
        pthread_mutex_init(&t->clock, NULL);
        pp = &t->next;
    }
    ps_g.late = NULL;
    pthread_mutex_unlock(&ps_g.tlock);
    ps_tables_reset();
    memset(ps_g.vtab, 0, sizeof ps_g.vtab);
    if (ps_g.cnt != &ps_g.cnt_local) {
        ps_sys_munmap(ps_g.cnt, PST_CTL_HDR);
        ps_g.cnt = &ps_g.cnt_local;
    }
    if (ps_g.ctl_fd >= 0) ps_real_close(ps_g.ctl_fd);
    ps_g.ctl_fd = -1;
    ps_g.ctl_path[0] = 0;
    memset(&ps_g.cnt_local, 0, sizeof ps_g.cnt_local);
    ps_g.meta_len = 0;
    if (ps_g.fd >= 0) ps_real_close(ps_g.fd);
    ps_g.fd = -1;
    ps_g.next_stream = 0;
    ps_g.ev_written = 0;
    ps_g.file_off = 0;
    ps_g.retry_after = 0;
    ps_g.stopping = 0;
    ps_g.paused = 0;
    ps_g.active = 0;
    ps_g.session++;   /* the flusher starts its periods again */
    /* closed, closing and stopped stay until the new file is open: the
     * flusher leaves everything alone meanwhile */
}

/* The new window's file is open: every live thread's record gets a stream
 * of it (the thread itself is not in a hook: nothing points at them). */
static void restart_streams(void)
{
    pthread_mutex_lock(&ps_g.tlock);
    for (ps_thr_t *t = ps_g.threads; t; t = t->next) {
        t->c.stream = __atomic_add_fetch(&ps_g.next_stream, 1, __ATOMIC_RELAXED);
        t->vtag = (uint16_t)t->c.stream ? (uint16_t)t->c.stream : 0xffff;
        pst_event_t ev = { .type = PST_EV_THREAD_START, .f = { (uint64_t)t->tid, 0 } };
        ps_emit_generic(t, &ev);
    }
    ps_g.stopped = 0;
    ps_g.closing = 0;
    ps_g.closed = 0;
    pthread_mutex_unlock(&ps_g.tlock);
}

/* `poolscope attach` (attach.c): the library was loaded into a running
 * process by dlopen, its constructor found no POOLSCOPE_OUT and passed
 * everything through. Start recording now, as ps_init would have, minus
 * what would change a program we did not start: no fatal-signal
 * handlers (its dispositions stay its own), no toggle signal, no scope
 * functions. Its threads already run: versions from the first event
 * (multi). 0 recording; -1 not (a trace already made in this process,
 * the file could not be created). */
static int attach_begin(const char *out, int stacks, const char *ctl_dir)
{
    static int atfork_made;
    if (__atomic_load_n(&ps_g.init_state, __ATOMIC_ACQUIRE) != 2) return -1;
    if (ps_g.active && !(ps_g.attach && ps_g.stopped && ps_g.closed)) return -1;
    if (!out || out[0] != '/') return -1;
    ps_tls.busy += PS_BUSY_OWN;
    int rc = -1;
    if (ps_g.active) attach_again();
    ps_g.attach = 1;
    ps_g.stacks = stacks == PST_STACKS_FP || stacks == PST_STACKS_DWARF ? stacks : PST_STACKS_NONE;
    ps_g.depth = 32;
    ps_core_ctl_dir(ctl_dir);
    snprintf(ps_g.out, sizeof ps_g.out, "%s", out);
    ps_core_self();
    ps_g.main_stk_hi = (uintptr_t)__libc_stack_end;
    ps_stacks_init();
    if (ps_py_init(1, 0) && ps_g.stacks != PST_STACKS_NONE) ps_g.depth = PST_MAX_DEPTH;
    if (!ps_g.key_ok) ps_g.key_ok = ps_core_key();
    ps_g.multi = 1;
    if (ps_core_open() != 0) { ps_g.closed = ps_g.stopped = 1; goto done; }
    if (!atfork_made) pthread_atfork(ps_prepare_fork, ps_parent_after_fork, ps_child_after_fork);
    atfork_made = 1;
    restart_streams();
    ps_recompute_on();
    ps_start_flusher();
    rc = ps_g.flusher_on ? 0 : -1;
done:
    ps_tls.busy -= PS_BUSY_OWN;
    return rc;
}

/* Called by the CLI through ptrace (libtrace/inject.c), in a thread of the program, after dlopen.
 * out: the trace file (absolute, must not exist); stacks: PST_STACKS_*;
 * ctl_dir: the CLI's private directory (ctl.h), through which it stops us.
 * 0: recording, every slot hooked. 1: a window is open already (its
 * stop not finished). 2: the library is preloaded already (record's run).
 * 3: the trace could not be started. 4: no slot table. A window after an
 * earlier one starts afresh: a new file, new slot table. */
EXPORT int poolscope_attach_start(const char *out, int stacks, const char *ctl_dir)
{
    if (ps_g.active && !ps_g.attach) return 2;
    if (ps_g.attach && (att.on || !ps_g.closed)) return 1;
    if (!att.slot) att.slot = ps_sys_mmap(ATT_SLOTS * sizeof *att.slot);
    if (!att.slot || self_defs() != 0) return 4;
    memset(att.slot, 0, ATT_SLOTS * sizeof *att.slot);   /* the last window's slots are all restored */
    att.n_slot = 0;
    if (attach_begin(out, stacks, ctl_dir) != 0) return 3;
    ps_tls.busy += PS_BUSY_OWN;
    pthread_mutex_lock(&att.lock);
    unsigned long long c[2];
    ps_loader_counters(c);
    att.seen_adds = c[0];
    att.on = 1;
    ps_got_walk(att_match, hook_slot, NULL);
    pthread_mutex_unlock(&att.lock);
    ps_tls.busy -= PS_BUSY_OWN;
    return 0;
}

/* For the CLI's checks: how many slots are hooked now. */
EXPORT unsigned poolscope_attach_slots(void)
{
    return att.n_slot;
}

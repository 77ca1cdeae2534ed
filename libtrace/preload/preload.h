/* preload.h — internal declarations shared by the interposer's files.
 *
 *   sys.c         every raw system call: the tracer's mappings, the hooks'
 *                 fallbacks (no SYS_dup2: dup3, for aarch64).
 *   clock.c       the time base: clock, shared tick, cycle-counter rate.
 *   writer.c      the trace file's chunks (fd check, whole writes, CRC),
 *                 the META buffer, END.
 *   compress.c    zstd over raw mmap memory, EVENTS in column form.
 *   ring.c        per-thread rings: drain to a chunk, grow, LOST records,
 *                 generic events.
 *   ctl.c         the counters file (ctl.h) and record's stop file.
 *   threads.c     the thread registry, thread exit, the exit stream, the
 *                 hooks' slow entry.
 *   flusher.c     the tracer's thread: tick, drains, RSS, flush rounds,
 *                 SYNC, stop.
 *   end.c         the end of an image: exit, fatal signal, exec.
 *   tracefile.c   the trace file's name, header, manifest line, fd moves.
 *   init.c        globals, init from the environment, constructor and
 *                 destructor, the pieces attach.c needs.
 *   fork.c        the atfork handlers, the child's lazy file.
 *   hooks_alloc.c the malloc and mmap families (the hot path).
 *   hooks_proc.c  fork, exec, _exit, dlopen, close*, dup2/3, pthread_create,
 *                 posix_spawn, the toggle signal and the poolscope_api table.
 *   hooks_signal.c the fatal-signal handlers that write END.
 *   hooks_func.c  scope functions (POOLSCOPE_SCOPE_FUNCS) through GOT stubs.
 *   got.c         GOT slots found, looked up and written without the loader.
 *   attach.c      `poolscope attach`: start and stop in a running process.
 *   stacks.c      fp and dwarf stack capture, the stack and string tables,
 *                 module maps (META records).
 *   cfi.c         the dwarf walk's own .eh_frame CFI walker and rule cache.
 *   python.c      CPython 3.11 frames and pymalloc.
 *   enc_inline.h  hand-coded encoders for the hottest events.
 *
 * Nothing here is exported: the library is built -fvisibility=hidden and
 * exports.map names the few symbols that are.
 */
#ifndef PS_PRELOAD_H
#define PS_PRELOAD_H

#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "poolscope/format.h"
#include "ctl.h"

#define PS_LIKELY(x)   __builtin_expect(!!(x), 1)
#define PS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PS_SIGFENCE()  __atomic_signal_fence(__ATOMIC_SEQ_CST)

/* Ring of one thread: a power of two. The record is mapped with PS_RING_SLACK
 * bytes after the ring so an event is always encoded contiguously and the
 * part past the end is copied to the start (rare). */
#define PS_RING_SIZE   (256u << 10)
#define PS_RING_SLACK  4096u
#define PS_IDS_PER_REC 256u                       /* block ids in one record: API lists are split */
#define PS_REC_MAX     (2 * PST_EVENT_MAX + 64 + PS_IDS_PER_REC * PST_VARINT_MAX)   /* LOST + TS + one event */
_Static_assert(PS_REC_MAX <= PS_RING_SLACK, "a record must fit the ring's slack");
#define PS_SOFT_FILL   (PS_RING_SIZE / 2)         /* the flusher drains (compressed) a ring above this */
/* A ring starts at PS_RING_SIZE; while the program has one thread, a
 * thread whose ring reaches 7/8 (the flusher has not kept up) doubles it,
 * up to PS_RING_MAX, so its events still go out compressed. A ring at
 * PS_RING_MAX, or any ring once the program has a second thread (used as
 * PS_RING_SIZE bytes then: ring.c, ps_make_room), is drained by its own
 * thread at 7/8, uncompressed. */
#define PS_RING_MAX    (4u << 20)
#define PS_SELF_FILL(size) ((size) / 8 * 7)       /* the producer grows or drains its ring above this */
#define PS_SCACHE      512                        /* per-thread stack cache slots */

typedef struct ps_scache_ent { uint64_t hash; uint32_t id; uint32_t pad; } ps_scache_ent_t;

/* stacks.c: the thread's previous dwarf walk, a prediction for the next one
 * (every predicted value is checked against memory before it is used),
 * and its frames with their hash, for an incremental hash. */
#define PS_WALK_MAX (PST_MAX_DEPTH + 17)
typedef struct ps_wstep {
    uint64_t ip, sp, bp;    /* state of the dwarf walk at this step */
    uint64_t r;             /* dwarf: rule of ip */
    uint64_t cfa, slot;     /* dwarf: caller's sp, address the caller's rbp was loaded from (0: none) */
} ps_wstep_t;
typedef struct ps_walk {
    uint32_t n;             /* valid steps */
    uint32_t gen;           /* rule-cache generation of the dwarf steps */
    uint32_t nfr;           /* frames in fr */
    uint32_t id;            /* stack id of fr */
    uint64_t hsum;          /* sum of the per-frame hashes of fr */
    uint64_t fr[PST_MAX_DEPTH];
    ps_wstep_t st[PS_WALK_MAX];
} ps_walk_t;

/* One thread stream. Mapped (raw mmap) on the thread's first event; the
 * producer (the thread) owns the first cache line, the consumer (flusher or
 * the thread itself) the second. Freed by the flusher once `dead`. */
typedef struct ps_thr {
    pst_ctl_slot_t c;       /* first: the thread's slot of the counters file (ctl.h): c.nev, c.stream */
    /* producer */
    uint64_t head;          /* stream bytes published (release store) */
    uint64_t soft;          /* head at which the producer looks at tail again */
    uint32_t fast_left;     /* events the fast paths may still record before a general one
                               (ps_fast_refill): already counted in enc.since_ts */
    uint64_t lost;          /* events dropped, not yet reported by a LOST record */
    uintptr_t stk_lo;       /* fp walk: the stack pointer must lie above this */
    uintptr_t stk_hi;       /* fp walk: frames must lie below this (0: unknown) */
    uint8_t *ring;
    uint64_t rmask;         /* ring bytes - 1: a power of two (changed by its owner, under clock) */
    volatile uint8_t inflight; /* between reading the tick and publishing the event (flusher reads it) */
    uint64_t age_max;       /* the oldest tick an event of this thread was stamped with, in cycles (ps_tick_age) */
    uint64_t cyc;           /* the cycle counter as the event being recorded read it (ps_tick_stale) */
    pst_enc_t enc;          /* address base, TS state; last: its 2 KiB list of recent addresses */
    char pad0[64];
    /* consumer */
    pthread_mutex_t clock;  /* serialises flushes of this ring */
    uint64_t tail;          /* stream bytes written to the file */
    uint64_t nev_done;      /* nev at the last successful flush */
    volatile uint8_t dead;  /* owner exited: flusher flushes and unmaps */
    uint8_t is_flusher;
    uint16_t vtag;          /* the stream's mark in ps_g.vtab (its id's low 16 bits, never 0) */
    int tid;
    struct ps_thr *next;    /* global list, pushed at the head; free list once retired */
    size_t map_len;         /* this record's mapping (a ctl slot, or anonymous) */
    int in_ctl;             /* the record is a slot of the counters file */
    ps_scache_ent_t scache[PS_SCACHE];
    ps_walk_t walk;         /* stacks.c, the owner thread only */
    uint16_t enc_index[PST_RECENT_IDX];   /* enc's hash index of its recent addresses (format 1.5) */
} ps_thr_t;

#define PS_THR_DEAD ((ps_thr_t *)1)

typedef struct ps_tls {
    ps_thr_t *thr;          /* NULL unregistered, PS_THR_DEAD after THREAD_END */
    int busy;               /* reentrancy guard: 1 a hook is recording (it calls nothing
                               interposable meanwhile), + PS_BUSY_OWN for each level of the
                               tracer's own code that may (threads.c, nested_lost) */
    uint32_t parent_stream; /* set by the pthread_create trampoline */
    uint32_t nobuf;         /* events lost because no ring could be mapped */
    int exec_locked;        /* this thread holds the locks across its exec */
    int late;               /* recording into the exit stream (ps_g.late), its lock held */
} ps_tls_t;

#define PS_BUSY_OWN 0x100

extern __thread ps_tls_t ps_tls __attribute__((tls_model("initial-exec")));

/* Real functions. */
typedef struct ps_real {
    void *(*malloc)(size_t);
    void  (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int   (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    int   (*munmap)(void *, size_t);
    void *(*mremap)(void *, size_t, size_t, int, ...);
    int   (*madvise)(void *, size_t, int);
    int   (*mprotect)(void *, size_t, int);
    int   (*brk)(void *);
    void *(*sbrk)(intptr_t);
    int glibc;              /* malloc and free are glibc's (hooks_alloc.c: the fast paths) */
} ps_real_t;

/* hooks_signal.c: the program's own view of a fatal signal's disposition,
 * and whether the kernel has our handler for it. */
#define PS_NSIG 65
typedef struct ps_sig { struct sigaction view; int ours; } ps_sig_t;

/* The next definitions of the process-level hooks (hooks_proc.c). */
typedef struct ps_real_proc {
    pid_t (*fork)(void);
    pid_t (*_Fork)(void);
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
    int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                       const posix_spawnattr_t *, char *const[], char *const[]);
    int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);
    void (*_exit)(int);
    void (*_Exit)(int);
    int (*dlclose)(void *);
    int (*close)(int);
    int (*close_range)(unsigned, unsigned, int);
    void (*closefrom)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    int (*sigaction)(int, const struct sigaction *, struct sigaction *);
} ps_real_proc_t;

/* stacks.c's tables: open addressing on a 64-bit hash, ids handed out in
 * insertion order; the module list of the last scan and the one being built. */
typedef struct ps_slot { uint64_t hash; uint32_t id; uint32_t pad; } ps_slot_t;
typedef struct ps_table {
    pthread_mutex_t lock;
    ps_slot_t *slots;
    size_t bits, used;
    uint32_t next_id;
} ps_table_t;
typedef struct ps_mod { uint64_t base, size; uint64_t key; } ps_mod_t;
#define PS_UR_SLOTS (1u << 13)   /* dwarf rule cache slots (cfi.c: UR_SLOTS) */
typedef struct ps_stk {
    ps_table_t stab, strtab;
    uint32_t prev_id, prev_depth;         /* stab.lock: the stack defined last in META, whose */
    uint64_t prev_fr[PST_MAX_DEPTH];      /* outer frames the next may name (STACK_TAIL) */
    pthread_mutex_t modlock;
    ps_mod_t *mods, *cur;        /* mapped on first scan */
    size_t n_mods, n_cur;
    unsigned long long seen_adds, seen_subs;   /* the loader's counters at the last scan */
    char exe_path[4096];
    uint64_t ucache[PS_UR_SLOTS];
    uint32_t ucache_gen;         /* bumped by each clear: drops the threads' recorded steps */
} ps_stk_t;
extern ps_real_t ps_real;
extern volatile int ps_real_ready;   /* malloc family resolved */

/* compress.c's compressor (format 1.5): one zstd context over raw mmap memory,
 * used by the flusher thread and by closing paths that are not a signal's,
 * never by a thread in its own malloc. Lock order: a ring's clock < lock <
 * wlock. */
typedef struct ps_z {
    pthread_mutex_t lock;
    void *cctx;              /* ZSTD_CCtx, made on first use */
    int broken;              /* it could not be made: chunks are written uncompressed */
    uint8_t *eout, *mout, *min;   /* compressed EVENTS, compressed META, the META bytes copied */
    size_t eout_cap, mout_cap, min_cap;
} ps_z_t;

/* Global state of the interposer (the one struct of globals). */
typedef struct ps_global {
    volatile int on;         /* hot flag: recording and file usable */
    volatile int fast;       /* on, and malloc/free may take their fast paths (ps_real.glibc) */
    volatile int fast_ns;    /* fast, and no stacks: malloc records on its fast path (one flag to load) */
    volatile int fast1;      /* fast_ns, one program thread (!multi: no versions to take), no bootstrap block */
    volatile int active;     /* POOLSCOPE_OUT set and the file is open */
    volatile int inited;     /* constructor done */
    int init_state;          /* ps_init: 0 not started, 1 running, 2 done */
    volatile int closed;     /* END written: nothing more */
    volatile int paused;     /* selective tracing off */
    volatile int child_pending; /* fork child: open own file at next chance */
    volatile int toggle_req; /* signal asked for a toggle: its marker is not written yet */
    volatile uint64_t toggle_ts; /* ps_now() when the signal arrived */
    /* Time base: the flusher stores ps_now() here every PS_TICK_NS; every
     * event is stamped with one plain load of it (see ps_rec_begin).
     * tick_cyc: the cycle counter read just before the clock reading that
     * the tick is at least (stored after the tick); an event whose cycle
     * counter is more than stale_cyc past it reads the clock itself. */
    volatile uint64_t tick;
    volatile uint64_t tick_cyc;
    uint64_t stale_cyc;      /* PS_TICK_STALE_NS in cycles (the flusher calibrates it) */
    uint64_t cyc0, mono0;    /* a cycle count and CLOCK_MONOTONIC ns read together at start */
    uint64_t age_dead;       /* age_max of retired threads (tlock) */
    /* Versions (format.h, pst_vslot): written once the program has a second
     * thread (multi), so single-threaded programs pay nothing for them. */
    volatile int multi;
    _Alignas(64) uint32_t vtab[1u << PST_VSLOT_BITS];   /* version | writer's vtag << 16 */
    int membarrier_ok;       /* MEMBARRIER_CMD_PRIVATE_EXPEDITED registered */
    uint64_t tracer_bytes;   /* atomic: bytes the tracer itself has mapped (rings, tables, META) */
    volatile int stopping;   /* final flush or exec under way */
    volatile int closing;    /* an exec or the exit flush is closing the trace: count other threads' calls */
    /* closing_lost lives in *cnt: calls during an exec or the exit flush (atomic): in END,
     * or a LOST record if the exec fails */
    int stacks;              /* PST_STACKS_* */
    int depth;
    int sig;                 /* POOLSCOPE_SIGNAL or 0 */
    pid_t pid;
    pid_t parent_pid;        /* fork child: the parent; else 0 */
    uint64_t gen;            /* exec generation of this image */
    uint64_t trace_files;    /* trace files this process has opened (poolscope_api.session) */
    uint64_t start_mono;     /* ns */
    uint64_t start_real;
    uintptr_t self_lo, self_hi; /* our own text, skipped in stacks */
    uintptr_t main_stk_hi;   /* __libc_stack_end */
    char out[4096];          /* POOLSCOPE_OUT, absolute */
    char path[4096];         /* this image's trace file */
    char manifest[4096];
    char follow[1024];
    /* file */
    pthread_mutex_t wlock;
    pthread_mutex_t child_lock; /* a fork child opening its file */
    pthread_mutex_t late_lock;  /* the exit stream: one thread at a time records into it */
    ps_thr_t *late;             /* the exit stream (threads.c, late_enter), NULL until needed */
    uint64_t retry_after;    /* ps_now() before which a failed file is not retried */
    long page_size;
    uint64_t exec_end_off, exec_unflushed, exec_counted;  /* undo state of an exec that may fail */
    int fd;
    dev_t dev;
    ino_t ino;
    uint64_t file_off;       /* bytes written successfully */
    int write_broken;        /* the file is gone: count, don't write */
    /* threads */
    pthread_mutex_t tlock;
    ps_thr_t *threads;
    uint32_t next_stream;    /* atomic */
    pthread_key_t key;
    int key_ok;
    /* counters (atomic adds, rare paths only): lost_total (every event lost,
     * for END), lost_reported (of those, reported by LOST records in
     * streams), closing_lost. They live in the counters file when there is
     * one (ctl.h: they outlive a SIGKILL), else in cnt_local. */
    pst_ctl_hdr_t *cnt;
    pst_ctl_hdr_t cnt_local;
    int ctl_fd;              /* the counters file, -1 none */
    dev_t ctl_dev;
    ino_t ctl_ino;
    char ctl_dir[256];       /* POOLSCOPE_CTL_DIR, checked to be a private directory of ours; "" none */
    char ctl_path[320];
    ps_thr_t *thr_free;      /* retired thread records, reused (under tlock) */
    /* The records' mappings as they were at fork (ps_prepare_fork, under
     * tlock), in private memory: the child unmaps from this copy, never by
     * walking the records, which are shared with the parent (fork.c). */
    struct ps_recmap { void *rec, *ring; size_t rec_len, ring_len; } *fork_maps;
    size_t fork_n, fork_cap;  /* fork_n: entries; SIZE_MAX: no copy (the child keeps them mapped) */
    uint64_t ev_written;     /* under wlock */
    uint64_t boot_lost;      /* calls seen before the constructor */
    /* flusher */
    volatile int flusher_on;
    /* record --duration / --until-signal (ctl.h, pst_ctl_stop): recording
     * stopped for good, END written with PST_END_STOPPED; fork children
     * stay untraced */
    volatile int stopped;
    int attach;              /* started by `poolscope attach` (attach.c): hooks are GOT slots, restored at the stop */
    volatile unsigned session;   /* attach windows begun after the first: the flusher restarts its periods */
    pthread_t flusher;
    /* META */
    pthread_mutex_t mlock;
    uint8_t *meta;
    size_t meta_len, meta_cap;
    ps_z_t z;                    /* compression (compress.c) */
    /* the other files' state */
    ps_stk_t stk;                /* stacks.c */
    ps_sig_t sigs[PS_NSIG];      /* hooks_signal.c */
    volatile int fatal;          /* a fatal signal is closing the trace: locks are tried, not waited on */
    uint64_t fatal_deadline;     /* CLOCK_MONOTONIC ns: give up on a lock after this */
    ps_real_proc_t proc;         /* hooks_proc.c */
    int resolving;               /* hooks_alloc.c: dlsym of the real functions under way */
    struct { _Alignas(64) char arena[256u << 10]; size_t used; } boot;  /* allocations during dlsym */
} ps_global_t;
extern ps_global_t ps_g;

/* Tick period of the time base, and how old a tick an event accepts before
 * its thread reads the clock itself: the flusher stores one every 100 us
 * when it runs; when it is not scheduled (every core busy) the program's
 * threads keep the tick within this of their events. */
#define PS_TICK_NS       PST_TICK_NS
#define PS_TICK_STALE_NS 250000u

/* A cycle counter that every CPU shares and that costs no system call
 * (x86's invariant TSC, aarch64's virtual counter): read by every event to
 * tell whether the tick is stale. Elsewhere the clock itself. */
static inline uint64_t ps_cycles(void)
{
#if defined(__x86_64__)
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return (uint64_t)hi << 32 | lo;
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

/* How old the tick is, in cycles: the cycle count at its store is read
 * first (acquire), so the tick the caller loads next is at least that
 * store's. The thread's oldest accepted age is the trace's resolution
 * (SYNC); an age over stale_cyc sends the event to ps_stale_tick. */
static inline int ps_tick_stale(ps_thr_t *t)
{
    uint64_t c = ps_cycles();
    t->cyc = c;
    uint64_t age = c - __atomic_load_n(&ps_g.tick_cyc, __ATOMIC_ACQUIRE);
    if (PS_UNLIKELY(age > ps_g.stale_cyc)) return 1;
    if (PS_UNLIKELY(age > t->age_max)) t->age_max = age;
    return 0;
}

/* ---- sys.c: every raw system call (the OS boundary) ---- */
void *ps_sys_mmap(size_t len);
void ps_sys_munmap(void *p, size_t len);
void *ps_map_shared(int fd, size_t len, uint64_t off);   /* MAP_SHARED of a file, counted too */
int ps_real_close(int fd);
pid_t ps_gettid(void);
void *ps_sys_mmap_raw(void *a, size_t len, int prot, int flags, int fd, off_t off);   /* MAP_FAILED on failure */
int ps_sys_munmap_raw(void *a, size_t len);
void *ps_sys_mremap(void *old, size_t old_len, size_t new_len, int flags, void *na);
int ps_sys_madvise(void *a, size_t len, int advice);
int ps_sys_mprotect(void *a, size_t len, int prot);
long ps_sys_readlinkat(int dirfd, const char *path, char *buf, size_t cap);
long ps_sys_process_vm_readv(pid_t pid, const struct iovec *l, unsigned long nl,
                             const struct iovec *r, unsigned long nr, unsigned long flags);
long ps_sys_membarrier(int cmd);
__attribute__((noreturn)) void ps_sys_exit_group(int status);
int ps_sys_close_range(unsigned lo, unsigned hi, int flags);
int ps_sys_dup2(int old, int nfd);      /* dup3, or an fcntl check when old == nfd */
int ps_sys_dup3(int old, int nfd, int flags);
int ps_sys_tgkill(pid_t pid, pid_t tid, int sig);

/* ---- clock.c: time base ---- */
uint64_t ps_mono_ns(void);              /* CLOCK_MONOTONIC in ns */
uint64_t ps_now(void);                  /* ns since trace start */
uint64_t ps_tick_advance(uint64_t *clock);   /* the tick moved to the clock; the tick after */
uint64_t ps_cyc_to_ns(uint64_t cyc);    /* at the measured rate, rounded up */
void ps_calibrate(void);                /* stale_cyc from the measured rate */

/* ---- writer.c: the file's chunks, META, END ---- */
void ps_add_lost(uint64_t n);           /* lost_total += n */
int ps_lock_c(pthread_mutex_t *m);      /* a lock on a closing path: -1 past a fatal signal's deadline */
int ps_move_fd_high(int fd, int avoid_lo, int avoid_hi);
int ps_write_chunk_raw_locked(uint8_t kind, unsigned flags, uint32_t stream, struct iovec *iov, int n);
int ps_meta_flush_locked(int z);        /* pending META as a chunk; wlock (and z.lock if z) held */
int ps_write_chunk_locked(uint8_t kind, uint32_t stream, struct iovec *iov, int n);
int ps_write_end_locked(void);          /* wlock held */
uint64_t ps_file_off_locked(void);
void ps_truncate_locked(uint64_t off);
int ps_meta_append(const void *p, size_t n);  /* mlock held by caller; -1: not appended */
void ps_meta_lock(void);
void ps_meta_unlock(void);

/* ---- compress.c: zstd ---- */
#define PS_Z_LEVEL 3      /* zstd level: ~ 15x on dwarf stacks, the flusher keeps up with >100 MB/s */
#define PS_Z_MIN   256    /* payloads below this are written as they are */
int ps_z_room(uint8_t **b, size_t *cap, size_t n);   /* a raw-mmap buffer of at least n bytes */
size_t ps_z_compress(const struct iovec *iov, int n, size_t len, uint8_t **out, size_t *cap);
int ps_z_take(int want);                /* 1: z.lock held, compress; 0: write plain */
void ps_z_give(int held);

/* ---- ring.c: per-thread rings ---- */
int ps_make_room(ps_thr_t *t);          /* 0 ok, -1: drop this event */
void ps_flush_thr(ps_thr_t *t, int z);   /* z: compress (never from a hook or a signal) */
void ps_put_lost(ps_thr_t *t, uint64_t n, unsigned reason);   /* a LOST record into t's ring */
int ps_emit_generic(ps_thr_t *t, const pst_event_t *ev);   /* 1 written, 0 dropped or invalid */

/* ---- ctl.c: the counters file (ctl.h) ---- */
#define PS_REC_BYTES ((sizeof(ps_thr_t) + 4095) & ~(size_t)4095)   /* a thread record's slot */
int ps_ctl_fd_ok(void);                 /* 0: ctl_fd is the counters file (re-opened if need be) */
void ps_ctl_dir_take(const char *dir);  /* POOLSCOPE_CTL_DIR, if it is record's private directory */
int ps_run_stopped(void);               /* record stopped the run's recording */
void ps_ctl_open(void);                 /* after the trace file: its counters file */
void ps_ctl_done(void);                 /* END is written */

/* ---- threads.c: thread registry, slow entry ---- */
ps_thr_t *ps_thr_register(void);        /* this thread's record and stream; NULL: none */
void ps_thread_exit(ps_thr_t *t);
void ps_key_dtor(void *v);              /* the pthread key's destructor: ps_thread_exit */
ps_thr_t *ps_enter_slow(void);          /* registers the thread; NULL: pass through */
void ps_leave(void);
ps_thr_t *ps_enter_paused(void);        /* a free while paused: its record, or NULL */

/* ---- flusher.c: the tracer's thread ---- */
void ps_start_flusher(void);
void *ps_flusher_main(void *arg);      /* the tracer's own thread */
int ps_flush_sync(void);                /* poolscope_api.flush: a flush round now, waited for */
void ps_write_sync_locked(uint64_t mark);   /* a SYNC chunk; wlock held */

/* ---- end.c: exit, fatal signal, exec ---- */
void ps_flush_all(int z);
void ps_final(void);                    /* flush everything, write END */
void ps_final_from_signal(void);        /* the same from a fatal signal's handler */
void ps_emit_toggle(ps_thr_t *t);       /* write a pending TRACE_ON/OFF marker */
void ps_exec_begin(const char *path);   /* EXEC event, flush, END; keeps the file locked */
void ps_exec_failed(void);              /* the exec returned: undo END, unlock */

/* ---- tracefile.c: name, header, manifest, fd ---- */
int ps_open_trace(int first_image);     /* the file created, its header written; -1: untraced */
int ps_is_trace_fd(int fd);
int ps_move_trace_fd_from(int lo, int hi); /* moves the trace fd out of [lo,hi] */

/* ---- init.c: state and start ---- */
void ps_init(void);                     /* once: constructor or first hooked call */
int ps_common_open(int first_image);    /* clock start, trace file, counters file, modules */
void ps_recompute_on(void);

/* ---- fork.c ---- */
void ps_child_after_fork(void);
void ps_prepare_fork(void);
void ps_parent_after_fork(void);
void ps_ensure_child(void);             /* fork child: open its file now */

/* ---- hooks_*.c ---- */
void ps_resolve_real(void);             /* hooks_alloc.c: the real malloc family */
void ps_alloc_resolve_mm(void);         /* hooks_alloc.c: the real mmap family */
void ps_proc_resolve(void);             /* hooks_proc.c: the real process functions */
void ps_install_signal(void);           /* hooks_proc.c: POOLSCOPE_SIGNAL's toggle handler */
void ps_note_untraced(int err);         /* hooks_proc.c: tells record this fork child is untraced */
void ps_signals_init(void);             /* hooks_signal.c */
void ps_tables_lock_all(void);          /* stacks.c: around fork */
void ps_tables_unlock_all(void);

/* ---- glibc ---- */
extern void *__libc_stack_end;          /* the main thread's stack top */
extern char **environ;
void *__libc_malloc(size_t);
void  __libc_free(void *);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);

/* Hook entry: the thread's record with the reentrancy guard taken, or NULL
 * (pass the call through). One TLS block, two plain loads, no atomics. */
static inline ps_thr_t *ps_enter(void)
{
    ps_thr_t *t = ps_tls.thr;
    if (PS_LIKELY(ps_g.on)) {
        if (PS_LIKELY(!ps_tls.busy && (uintptr_t)t > 1)) {
            ps_tls.busy = 1;
            PS_SIGFENCE();
            return t;
        }
    } else if (PS_LIKELY(ps_g.inited && !ps_g.child_pending && !ps_g.closing)) {
        return NULL;   /* not recording: pass through without a call */
    }
    return ps_enter_slow();
}

void ps_late_leave(void);               /* threads.c: the end of a call recorded in the exit stream */

/* ps_leave (threads.c) inlined, for the hooks' hot paths: the same steps. */
static inline void ps_leave_inline(void)
{
    PS_SIGFENCE();
    if (PS_UNLIKELY(ps_tls.late)) { ps_late_leave(); return; }
    ps_tls.busy = 0;
}

uint64_t ps_stale_tick(void);          /* clock.c: the tick moved to the clock's time */
void ps_tick_now(void);                 /* clock.c: move the tick to the clock's time */

/* The fast paths' budget while ps_g.fast1 (one program thread, no stacks).
 * A fast record needs none of the checks of ps_rec_begin but the tick's:
 * t->fast_left events may go before
 * the ring's soft mark or the next clock check is due, so one counter
 * stands for both (and for the since_ts count, added in advance).
 * ps_fast_refill sets it after a general record; ps_fast_sync takes back
 * what was not used before anything else reads since_ts, head or soft
 * (ps_rec_begin, so every general record). A record made on the budget is
 * at most PS_FAST_MAX bytes (CYC and VER records, type, address, size) and needs
 * no wrap copy: ps_make_room keeps soft at least PS_FAST_MAX before the
 * ring's end, and fast_left * PS_FAST_MAX bytes fit before soft. */
#define PS_FAST_MAX 48u
static inline void ps_fast_sync(ps_thr_t *t)
{
    if (PS_UNLIKELY(t->fast_left)) {
        t->enc.since_ts -= t->fast_left;
        t->fast_left = 0;
    }
}

/* The CYC record of the event being recorded (FORMAT.md, "Cycles"), once
 * the program has a second thread: the counter ps_tick_stale read for it,
 * in units of 2^PS_CYC_SHIFT counts since the trace's base. Within one tick
 * it orders the events of different threads as they happened (the tick
 * alone ties them, and a peak taken over the wrong order of a tick can be
 * below the program's own count of its live bytes). One program thread
 * needs no order across streams: nothing is written. */
#if defined(__x86_64__)
#define PS_CYC_SHIFT 6     /* 64 TSC counts: 15-30 ns, about one malloc */
#else
#define PS_CYC_SHIFT 0     /* aarch64's counter runs at tens of MHz; the clock fallback is ns */
#endif
static inline uint8_t *ps_cyc_rec(ps_thr_t *t, uint8_t *p)
{
    if (PS_LIKELY(!ps_g.multi)) return p;
    uint64_t c = t->cyc > ps_g.cyc0 ? t->cyc - ps_g.cyc0 : 0;
    return pst_put_cyc(&t->enc, p, c >> PS_CYC_SHIFT);
}

/* Begin/end of one record in the calling thread's ring.
 *
 * Time: the event is stamped with the global tick, read once here, after
 * the call it records has returned (or, for a free, before the memory is
 * given back), so a free on one thread is never stamped before the
 * allocation it frees on another (realloc, reallocarray and mremap too:
 * stamped after their call). A TS record is written only when the
 * tick has moved since the stream's previous one. `inflight` covers the
 * read of the tick up to the release store of head: the flusher's
 * watermark (flusher.c) waits for a thread caught in between. */
static inline uint8_t *ps_rec_begin(ps_thr_t *t)
{
    ps_fast_sync(t);
    if (PS_UNLIKELY(t->head >= t->soft) && ps_make_room(t) != 0)
        return NULL;
    uint8_t *p = t->ring + (t->head & t->rmask);
    t->inflight = 1;
    PS_SIGFENCE();
    if (PS_UNLIKELY(t->enc.since_ts >= PST_TS_EVERY)) t->enc.since_ts = 0;   /* the fast budget's count */
    uint64_t now = PS_UNLIKELY(ps_tick_stale(t)) ? ps_stale_tick() : ps_g.tick;
    if (PS_UNLIKELY(now > t->enc.last_ts)) p = pst_put_ts(&t->enc, p, now);
    return ps_cyc_rec(t, p);   /* the encoder counts the event in enc.since_ts */
}

/* A call that releases a block and acquires one inside itself (realloc,
 * reallocarray, mremap) takes the old block's version before the call and
 * is stamped after it: from the version on, the thread is in flight, so no
 * watermark passes its previous time until the event is published. Another
 * thread handed the old block inside the call, whose own event is stamped
 * earlier, is then not safe before this one has been read (FORMAT.md,
 * "Versions"). The event's ps_rec_end clears the flag; a dropped one must. */
static inline void ps_call_begin(ps_thr_t *t)
{
    t->inflight = 1;
    PS_SIGFENCE();
}

/* After a general record of the owner thread (the guard held). */
static inline void ps_fast_refill(ps_thr_t *t)
{
    uint32_t s = t->enc.since_ts;
    uint64_t room = t->soft > t->head ? (t->soft - t->head) / PS_FAST_MAX : 0;
    uint32_t b = s < PST_TS_EVERY ? PST_TS_EVERY - s : 0;
    if (b > room) b = (uint32_t)room;
    t->fast_left = b;
    t->enc.since_ts = s + b;
}

/* fast1's budget and tick check, the guard held: 1 when the record may go
 * (one event of the budget taken; the thread is in flight until
 * ps_fast_end), 0 when the budget is spent or the tick moved (the general
 * record refills it or writes the TS record). The count is taken first,
 * in one read-modify-write, and given back on the way out. g is &ps_g
 * (hooks_alloc.c: malloc makes it after its call). */
static inline int ps_fast1_begin(ps_global_t *g, ps_thr_t *t)
{
    int spent;   /* the carry of the subtraction: fast_left was 0 (compilers load, test and store) */
#if defined(__x86_64__)
    __asm__("subl $1, %0" : "+m"(t->fast_left), "=@ccc"(spent));
#else
    spent = __builtin_sub_overflow(t->fast_left, 1u, &t->fast_left);
#endif
    if (PS_UNLIKELY(spent)) {
        t->fast_left = 0;
        return 0;
    }
    t->inflight = 1;
    PS_SIGFENCE();
    if (PS_UNLIKELY(ps_tick_stale(t)) || PS_UNLIKELY(g->tick > t->enc.last_ts)) {
        t->inflight = 0;   /* ps_rec_begin sets it again and reads the tick anew */
        t->fast_left++;
        return 0;
    }
    return 1;
}

/* The other fast paths' ps_rec_begin (more than one program thread, or
 * stacks: malloc_mt, free_mt), the guard held, h being t->head: 1 when the
 * record may start at t->ring + (h & t->rmask), 0 when anything but the
 * plain case is due (the ring's soft mark, a clock check, a TS record);
 * the caller then records with ps_rec_begin. Their encoders count the
 * event in since_ts. A fast1 budget still out (the program's second thread
 * just started) has been counted in since_ts already: this sends the next
 * event to ps_rec_begin, which takes it back. */
static inline int ps_fast_begin(ps_thr_t *t, uint64_t h)
{
    if (PS_UNLIKELY(h >= t->soft)) return 0;
    t->inflight = 1;
    PS_SIGFENCE();
    if (PS_UNLIKELY(t->enc.since_ts >= PST_TS_EVERY) || PS_UNLIKELY(ps_tick_stale(t)) ||
        PS_UNLIKELY(ps_g.tick > t->enc.last_ts)) {
        t->inflight = 0;   /* ps_rec_begin sets it again and reads the tick anew */
        return 0;
    }
    return 1;
}

/* The fast paths' ps_rec_end: start, p the record's start and end, h the
 * head read before it (not reloaded: the encoder's stores may alias it). */
static inline void ps_fast_end(ps_thr_t *t, uint8_t *start, uint8_t *p, uint64_t h)
{
    t->c.nev++;
    __atomic_store_n(&t->head, h + (uint64_t)(p - start), __ATOMIC_RELEASE);
    PS_SIGFENCE();
    t->inflight = 0;
}

static inline void ps_leave_fast(void)
{
    PS_SIGFENCE();
    ps_tls.busy = 0;
}

static inline void ps_rec_end(ps_thr_t *t, uint8_t *p)
{
    uint64_t size = t->rmask + 1, start = t->head & t->rmask;
    uint64_t len = (uint64_t)(p - (t->ring + start));
    if (PS_UNLIKELY(start + len > size))
        memcpy(t->ring, t->ring + size, start + len - size);
    t->c.nev++;
    __atomic_store_n(&t->head, t->head + len, __ATOMIC_RELEASE);
    PS_SIGFENCE();
    t->inflight = 0;
}

/* The next version of address a's slot (format.h, pst_vslot), noted as
 * t's: the version | 1 << 16 when the slot's previous version was another
 * thread's (the event needs a VER record), else just the version (readers
 * count it: FORMAT.md, "Versions"). Plain loads and stores, no atomic
 * read-modify-write: a program hands an address to another thread only
 * through the allocator's or its own synchronisation, which orders our two
 * accesses of its slot as well. Only colliding addresses of two threads can
 * race for a counter; the reader takes the duplicate version that gives. */
static inline uint32_t ps_vtake(ps_thr_t *t, uint64_t a)
{
    uint32_t *c = &ps_g.vtab[pst_vslot(a)];
    uint32_t x = __atomic_load_n(c, __ATOMIC_RELAXED);
    uint16_t v = pst_vnext((uint16_t)x);
    __atomic_store_n(c, v | (uint32_t)t->vtag << 16, __ATOMIC_RELAXED);
    return v | (uint32_t)((x >> 16) != t->vtag) << 16;
}

/* The VER record of an event on one address a, when versions are on and
 * the slot's previous version was another thread's. */
static inline uint8_t *ps_ver(ps_thr_t *t, uint8_t *p, uint64_t a)
{
    if (PS_LIKELY(!ps_g.multi) || !a) return p;
    uint32_t x = ps_vtake(t, a);
    return x >> 16 ? pst_put_ver(p, (uint16_t)x) : p;
}

/* The versions of an event that releases `old` and acquires `ret` (realloc,
 * reallocarray, mremap): xo the old block's ps_vtake (taken before the
 * call; 0 when not taken), the new block's taken now. An event with two
 * ordered addresses carries both VER records or none. Fills ver[], returns
 * how many to write. */
static inline unsigned ps_ver2(ps_thr_t *t, uint32_t xo, uint64_t old, uint64_t ret, uint16_t ver[2])
{
    uint32_t xn = ret && ret != old ? ps_vtake(t, ret) : 0;
    unsigned n = 0;
    if (!((xo | xn) >> 16)) return 0;
    if (xo) ver[n++] = (uint16_t)xo;
    if (xn) ver[n++] = (uint16_t)xn;
    return n;
}

/* ---- stacks.c ---- */
uint32_t ps_stack_id(ps_thr_t *t);      /* 0: none; captures the caller's stack */
uint32_t ps_string_id(const char *s);   /* 0 for NULL */
void ps_modules_scan(int emit_all);     /* META MODULE for new/removed modules */
void ps_modules_reset(void);
void ps_tables_reset(void);
void ps_stacks_init(void);

/* ---- cfi.c: the dwarf walk's own CFI walker ---- */
int ps_walk_cfi(ps_thr_t *t, uint64_t *out, int max);   /* frames, or -1: use libunwind */
void ps_ucache_clear(void);             /* the rule cache, when a module goes away */

/* ---- python.c ---- */
int ps_py_init(int frames, int pymalloc);   /* after ps_stacks_init: a CPython 3.11 process gets both;
                                           1: this is a Python process (of any version) */
int ps_py_on(void);                     /* Python frames are spliced into stacks */
int ps_py_splice(uint64_t *fr, int n, int max);   /* evaluation frames -> Python frames; the new n */
void ps_py_reset(void);                 /* string ids restarted (a fork child's file) */
extern int ps_py_watch;                 /* the interpreter may still replace pymalloc's wrappers */
void ps_py_watch_check(void);           /* wrap them again if it did (stack captures call it) */
void ps_modules_poll(void);             /* flusher: rescan if the loader changed */
void ps_loader_counters(unsigned long long c[2]);   /* dlpi_adds, dlpi_subs */

/* ---- got.c: GOT slots found, looked up and written without loader calls ---- */
typedef struct ps_got_slot {
    uintptr_t addr;                 /* the slot */
    const char *name, *version;     /* the symbol; the version its object asked for, NULL none */
    int fn;                         /* what the match function returned */
    uintptr_t obj_lo, obj_hi;       /* the slot's object, mapped range */
    uintptr_t relro_lo, relro_hi;
    uintptr_t canon;                /* the executable's canonical PLT entry of the symbol, 0 none */
    unsigned obj_index;             /* the object's place in load order (0 the executable) */
    int is_exe;
} ps_got_slot_t;
typedef int (*ps_got_match_fn)(const char *name, void *arg);          /* >= 0: a slot wanted */
typedef void (*ps_got_slot_fn)(const ps_got_slot_t *s, void *arg);   /* under the loader's lock */
void ps_got_walk(ps_got_match_fn match, ps_got_slot_fn on_slot, void *arg);
uintptr_t ps_got_lookup(const char *name, const char *version);   /* only inside ps_got_walk's callbacks */
uintptr_t ps_got_lookup_self(const char *name);   /* our own library's definition */
uintptr_t ps_got_definition(const ps_got_slot_t *s, uintptr_t canon);   /* what the slot binds to */
int ps_got_write(const ps_got_slot_t *s, uintptr_t value);

/* ---- attach.c: `poolscope attach` ---- */
void ps_core_ctl_dir(const char *dir);  /* init.c: ps_init's pieces for a late start */
int ps_core_open(void);
void ps_core_self(void);
int ps_core_key(void);
void ps_att_restore(void);              /* the stop: every slot we wrote back to the program's */
void ps_att_poll(void);                 /* flusher: hook what the loader added */
/* exported for `poolscope attach` (the CLI calls them through ptrace; cli/cmd_attach.c) */
int poolscope_attach_start(const char *out, int stacks, const char *ctl_dir);
unsigned poolscope_attach_slots(void);

/* ---- hooks_func.c ---- */
void ps_fn_parse(const char *spec);     /* POOLSCOPE_SCOPE_FUNCS */
size_t ps_fn_header(char *buf, size_t cap);  /* the header's SCOPE_FUNCS bytes */
void ps_fn_install(void);               /* hook the objects loaded now */
void ps_fn_poll(void);                  /* flusher: hook what the loader added */

#endif

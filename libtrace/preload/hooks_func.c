/* hooks_func.c — calls of named functions recorded as scopes
 * (POOLSCOPE_SCOPE_FUNCS, `poolscope record --scope-function FUNC[=NAME]`).
 *
 * An engine that runs each decode step as a job on a worker thread
 * allocates nothing between two calls, so no stack tells where one call
 * ends and the next begins (README, "Phases from stacks"). Here the
 * function's entry and exit are seen instead: every GOT slot that names
 * FUNC (R_X86_64_JUMP_SLOT, the PLT's, and R_X86_64_GLOB_DAT, -fno-plt
 * calls and address loads) in every loaded object is pointed at a stub of
 * ours, which records MARK_BEGIN(NAME), calls the definition and records
 * MARK_END(NAME). So only calls that go through a GOT are seen: calls
 * between two shared objects, or into a library the program links; a
 * call inside the object that defines FUNC (a static or -Bsymbolic one,
 * an inlined one) is not.
 *
 * When: at the constructor (every object loaded at startup), then whenever
 * the loader's adds counter moves, which the flusher looks at every 10 ms:
 * calls made by a library in the first 10 ms after its dlopen returned
 * may be missed. dlopen is not wrapped (hooks_proc.c says why). A lazily
 * bound slot that the loader resolves at the very moment we patch it stays
 * unhooked until the next library is loaded. Past PS_FN_STUBS
 * definitions the rest stay
 * unhooked. The definition of a lazy slot is looked up with the version
 * the object asked for, from the objects' symbol tables (got.c: no loader
 * call, which would change what the program's later dlopen and dlclose
 * do); a non-PIE executable's canonical PLT entry (it takes FUNC's
 * address) is never taken for the definition.
 *
 * The stub (ps_fn_common below) is a frame with CFI, so C++ exceptions and
 * thread cancellation unwind through it; it saves every argument register
 * and the vector and x87 registers (xsave of what can hold an argument or
 * a result: AVX-512 arguments and an x87 return value survive our C code;
 * an open hooked call takes about 2.3 KiB of stack), copies up
 * to PS_FN_ARGS bytes of the caller's stack arguments (less when the next
 * page cannot be read: the top of a stack, a coroutine's) and calls the
 * definition with them. A function with more stack arguments than that,
 * or one that returns twice (setjmp, vfork), is not supported; `record`
 * refuses the known ones. A call left by an exception or longjmp is closed
 * at the thread's next entry or exit of a hooked function below it, by
 * stack pointer. Function pointers compared across objects can differ
 * while the hooks are in (a GLOB_DAT slot holds the stub).
 */
#include "preload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define PS_FN_MAX   16     /* functions named */
#define PS_FN_STUBS 32     /* (function, definition) pairs: one stub each */
#define PS_FN_DEPTH 32     /* open hooked calls per thread (deeper ones run unscoped) */
#define PS_FN_ARGS  512    /* bytes of the caller's stack arguments copied */

typedef struct fn_def {
    char sym[256];         /* the dynamic symbol: a C name or a mangled C++ one */
    char label[128];       /* the scope's name */
} fn_def_t;

typedef struct fn_stub {
    uint32_t fn;
    uintptr_t real;        /* the definition */
} fn_stub_t;

typedef struct fn_open {
    uint64_t instance;
    uintptr_t sp;          /* the caller's stack pointer at the call: which frame */
    uint32_t fn;
    uint32_t begun;        /* a MARK_BEGIN was recorded (not paused, not reentrant) */
} fn_open_t;

typedef struct fn_tls {
    uint32_t n, over;      /* open calls, calls past PS_FN_DEPTH */
    fn_open_t e[PS_FN_DEPTH];
} fn_tls_t;

static __thread fn_tls_t fn_tls __attribute__((tls_model("initial-exec")));

static struct {
    fn_def_t def[PS_FN_MAX];
    unsigned n;
    fn_stub_t stub[PS_FN_STUBS];
    volatile unsigned n_stub;
    uint64_t next_instance;              /* atomic */
    uintptr_t canon[PS_FN_MAX];          /* the executable's canonical PLT entry of FUNC, 0 none */
    uint32_t xmask;                      /* xsave components saved (XCR0 without AMX) */
    unsigned long long seen_adds;
    pthread_mutex_t lock;                /* one patching pass at a time */
    int on;
} fn_g = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Size of the xsave area for the features the kernel enabled (CPUID leaf
 * 0xD), read by the stub. */
__attribute__((visibility("hidden"))) uint32_t ps_fn_xsave_size;
__attribute__((visibility("hidden"))) uint32_t ps_fn_xsave_mask;

typedef struct fn_go { uintptr_t target, copy; } fn_go_t;
__attribute__((visibility("hidden"), used)) fn_go_t ps_fn_enter(uint32_t k, uintptr_t args);
__attribute__((visibility("hidden"), used)) void ps_fn_exit(uint32_t k, uintptr_t args);

/* ---- the stub ------------------------------------------------------------------
 * Entry k: r11d = k, jump to the common part. Frame of ps_fn_common:
 *   rbp+16.. the caller's stack arguments    rbp+8 return address
 *   rbp      saved rbp    rbp-8 rbx  rbp-16 r12  rbp-24 r13
 *   rbp-32 rdi  -40 rsi  -48 rdx  -56 rcx  -64 r8  -72 r9  -80 rax  -88 r10
 *   below: the xsave area (64-aligned, r12), then the copied arguments. */
#define PS_FN_STUB(k) "endbr64\n\tmovl $" #k ", %r11d\n\tjmp ps_fn_common\n\t.p2align 4\n\t"
__asm__(
    "\t.text\n"
    "\t.p2align 4\n"
    "\t.hidden ps_fn_stubs\n"
    "\t.type ps_fn_stubs, @function\n"
    "ps_fn_stubs:\n\t"
    ".cfi_startproc\n\t"
    PS_FN_STUB(0) PS_FN_STUB(1) PS_FN_STUB(2) PS_FN_STUB(3) PS_FN_STUB(4) PS_FN_STUB(5)
    PS_FN_STUB(6) PS_FN_STUB(7) PS_FN_STUB(8) PS_FN_STUB(9) PS_FN_STUB(10) PS_FN_STUB(11)
    PS_FN_STUB(12) PS_FN_STUB(13) PS_FN_STUB(14) PS_FN_STUB(15) PS_FN_STUB(16) PS_FN_STUB(17)
    PS_FN_STUB(18) PS_FN_STUB(19) PS_FN_STUB(20) PS_FN_STUB(21) PS_FN_STUB(22) PS_FN_STUB(23)
    PS_FN_STUB(24) PS_FN_STUB(25) PS_FN_STUB(26) PS_FN_STUB(27) PS_FN_STUB(28) PS_FN_STUB(29)
    PS_FN_STUB(30) PS_FN_STUB(31)
    ".cfi_endproc\n"
    "\t.size ps_fn_stubs, .-ps_fn_stubs\n"
    "\t.p2align 4\n"
    "\t.hidden ps_fn_common\n"
    "\t.type ps_fn_common, @function\n"
    "ps_fn_common:\n"
    "\t.cfi_startproc\n"
    "\tpushq %rbp\n"
    "\t.cfi_def_cfa_offset 16\n"
    "\t.cfi_offset %rbp, -16\n"
    "\tmovq %rsp, %rbp\n"
    "\t.cfi_def_cfa_register %rbp\n"
    "\tpushq %rbx\n"
    "\t.cfi_offset %rbx, -24\n"
    "\tpushq %r12\n"
    "\t.cfi_offset %r12, -32\n"
    "\tpushq %r13\n"
    "\t.cfi_offset %r13, -40\n"
    "\tpushq %rdi\n\tpushq %rsi\n\tpushq %rdx\n\tpushq %rcx\n"
    "\tpushq %r8\n\tpushq %r9\n\tpushq %rax\n\tpushq %r10\n"
    "\tmovl %r11d, %ebx\n"
    "\tmovl ps_fn_xsave_size(%rip), %eax\n"
    "\tsubq %rax, %rsp\n"
    "\tandq $-64, %rsp\n"
    "\tmovq %rsp, %r12\n"
    /* xrstor wants the header's reserved bytes zero; xsave writes only XSTATE_BV */
    "\txorl %eax, %eax\n"
    "\tmovq %rax, 512(%r12)\n\tmovq %rax, 520(%r12)\n\tmovq %rax, 528(%r12)\n\tmovq %rax, 536(%r12)\n"
    "\tmovq %rax, 544(%r12)\n\tmovq %rax, 552(%r12)\n\tmovq %rax, 560(%r12)\n\tmovq %rax, 568(%r12)\n"
    "\tmovl ps_fn_xsave_mask(%rip), %eax\n\txorl %edx, %edx\n"
    "\txsave64 (%r12)\n"
    "\tmovl %ebx, %edi\n"
    "\tleaq 16(%rbp), %rsi\n"
    "\tcall ps_fn_enter\n"
    "\tmovq %rax, %r13\n"
    "\tmovq %r12, %rdi\n"
    "\tsubq %rdx, %rdi\n"
    "\tandq $-64, %rdi\n"
    "\tmovq %rdi, %rsp\n"
    "\tmovq %rdx, %rcx\n"
    "\tshrq $3, %rcx\n"
    "\tleaq 16(%rbp), %rsi\n"
    "\trep movsq\n"
    "\tmovl ps_fn_xsave_mask(%rip), %eax\n\txorl %edx, %edx\n"
    "\txrstor64 (%r12)\n"
    "\tmovq -32(%rbp), %rdi\n\tmovq -40(%rbp), %rsi\n\tmovq -48(%rbp), %rdx\n\tmovq -56(%rbp), %rcx\n"
    "\tmovq -64(%rbp), %r8\n\tmovq -72(%rbp), %r9\n\tmovq -80(%rbp), %rax\n\tmovq -88(%rbp), %r10\n"
    "\tcall *%r13\n"
    "\tmovq %rax, -80(%rbp)\n"
    "\tmovq %rdx, -48(%rbp)\n"
    "\tmovl ps_fn_xsave_mask(%rip), %eax\n\txorl %edx, %edx\n"
    "\txsave64 (%r12)\n"
    "\tmovq %r12, %rsp\n"
    "\tmovl %ebx, %edi\n"
    "\tleaq 16(%rbp), %rsi\n"
    "\tcall ps_fn_exit\n"
    "\tmovl ps_fn_xsave_mask(%rip), %eax\n\txorl %edx, %edx\n"
    "\txrstor64 (%r12)\n"
    "\tmovq -80(%rbp), %rax\n"
    "\tmovq -48(%rbp), %rdx\n"
    "\tleaq -24(%rbp), %rsp\n"
    "\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n"
    "\tpopq %rbp\n"
    "\t.cfi_def_cfa %rsp, 8\n"
    "\tret\n"
    "\t.cfi_endproc\n"
    "\t.size ps_fn_common, .-ps_fn_common\n");

extern const char ps_fn_stubs[] __attribute__((visibility("hidden")));
#define STUB_ADDR(k) ((uintptr_t)ps_fn_stubs + 16u * (k))

/* ---- the calls ------------------------------------------------------------------ */

/* A scope's edge is stamped with the clock, and the shared tick moved past
 * it: a program hands work between threads without touching the heap (a
 * condition variable, a job queue), so no version orders another thread's
 * events around it; times do, once the tick is not shared across the edge
 * (FORMAT.md, "Time"). Two clock reads per edge. */
static void emit_mark(ps_thr_t *t, unsigned type, uint32_t fn, uint64_t instance)
{
    ps_tick_now();
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = (uint8_t)type;
    ev.f[0] = ps_string_id(fn_g.def[fn].label);
    ev.f[1] = instance;
    ps_emit_generic(t, &ev);   /* BEGIN's payload count f[2] = 0 */
    ps_tick_now();
}

/* Close the thread's open calls that are gone (left by an exception or
 * longjmp): made at sp at or below `sp`. */
static void close_stale(uintptr_t sp, int inclusive)
{
    while (fn_tls.n && (fn_tls.e[fn_tls.n - 1].sp < sp || (inclusive && fn_tls.e[fn_tls.n - 1].sp == sp))) {
        fn_open_t *o = &fn_tls.e[--fn_tls.n];
        if (o->begun) {
            ps_thr_t *t = ps_enter();
            if (t) { emit_mark(t, PST_EV_MARK_END, o->fn, o->instance); ps_leave(); }
        }
    }
}

/* How many bytes of the caller's stack arguments to copy: PS_FN_ARGS,
 * unless they would run into a page that cannot be read (the top of the
 * stack, a coroutine's stack under a guard page): a read through the
 * kernel tells, without a fault, only when the copy crosses a page. No
 * call that may take a lock: this runs in signal handlers too. */
static uintptr_t copy_bytes(uintptr_t args)
{
    uintptr_t pg = (uintptr_t)ps_g.page_size, next = (args | (pg - 1)) + 1;
    if (next - args >= PS_FN_ARGS) return PS_FN_ARGS;
    char b;
    struct iovec l = { &b, 1 }, r = { (void *)next, 1 };
    if (ps_sys_process_vm_readv(ps_g.pid, &l, 1UL, &r, 1UL, 0UL) == 1) return PS_FN_ARGS;
    return (next - args) & ~(uintptr_t)7;
}

fn_go_t ps_fn_enter(uint32_t k, uintptr_t args)
{
    int e = errno;
    fn_stub_t *s = &fn_g.stub[k];
    fn_go_t go = { s->real, copy_bytes(args) };
    close_stale(args, 1);
    if (fn_tls.n == PS_FN_DEPTH) {
        fn_tls.over++;
    } else {
        fn_open_t *o = &fn_tls.e[fn_tls.n];
        o->fn = s->fn;
        o->sp = args;
        o->instance = __atomic_add_fetch(&fn_g.next_instance, 1, __ATOMIC_RELAXED);
        o->begun = 0;
        PS_SIGFENCE();   /* a handler calling a hooked function sees the entry whole */
        fn_tls.n++;
        ps_thr_t *t = ps_enter();
        if (t) {
            emit_mark(t, PST_EV_MARK_BEGIN, o->fn, o->instance);
            o->begun = 1;
            ps_leave();
        }
    }
    errno = e;
    return go;
}

void ps_fn_exit(uint32_t k, uintptr_t args)
{
    (void)k;
    int e = errno;   /* the function's own errno is its result */
    if (fn_tls.over) {
        fn_tls.over--;
    } else {
        close_stale(args, 0);
        if (fn_tls.n && fn_tls.e[fn_tls.n - 1].sp == args) {
            fn_open_t *o = &fn_tls.e[--fn_tls.n];
            ps_thr_t *t = o->begun ? ps_enter() : NULL;
            if (t) {
                emit_mark(t, PST_EV_MARK_END, o->fn, o->instance);
                ps_leave();
            }
        }
    }
    errno = e;
}

/* ---- finding and patching the slots ---------------------------------------------
 * got.c walks every loaded object's JUMP_SLOT and GLOB_DAT slots inside
 * dl_iterate_phdr, where no object can be unloaded, and looks definitions
 * up from the objects' own symbol tables: no dlopen, dlsym or dlclose,
 * whose side effects (a dependency of ours on a library the program
 * dlopened, so its dlclose no longer unloads it) changed the program's
 * later allocations. */

static int fn_match(const char *name, void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < fn_g.n; i++)
        if (!strcmp(name, fn_g.def[i].sym)) return (int)i;
    return -1;
}

static int is_stub(uintptr_t v)
{
    return v >= STUB_ADDR(0) && v < STUB_ADDR(PS_FN_STUBS);
}

static int stub_for(uint32_t fn, uintptr_t real)
{
    unsigned n = fn_g.n_stub;
    for (unsigned k = 0; k < n; k++)
        if (fn_g.stub[k].fn == fn && fn_g.stub[k].real == real) return (int)k;
    if (n == PS_FN_STUBS) return -1;
    fn_g.stub[n].fn = fn;
    fn_g.stub[n].real = real;
    __atomic_store_n(&fn_g.n_stub, n + 1, __ATOMIC_RELEASE);   /* before any slot points at it */
    return (int)n;
}

/* Under the loader's lock, for each slot naming a function of ours. */
static void patch_slot(const ps_got_slot_t *s, void *arg)
{
    (void)arg;
    /* the executable comes first in load order, before any slot that
     * might hold its canonical PLT entry */
    if (s->canon) fn_g.canon[s->fn] = s->canon;
    if (is_stub(__atomic_load_n((uintptr_t *)s->addr, __ATOMIC_RELAXED))) return;
    uintptr_t real = ps_got_definition(s, fn_g.canon[s->fn]);
    if (!real || is_stub(real)) return;
    int k = stub_for((uint32_t)s->fn, real);
    if (k >= 0) ps_got_write(s, STUB_ADDR(k));
}

static void patch_all(void)
{
    ps_got_walk(fn_match, patch_slot, NULL);
}

/* The flusher, every 10 ms: patch what the loader added (and slots a lazy
 * binding overwrote, on the next add). */
void ps_fn_poll(void)
{
    if (!fn_g.on) return;
    unsigned long long c[2];
    ps_loader_counters(c);
    if (c[0] == fn_g.seen_adds) return;
    pthread_mutex_lock(&fn_g.lock);
    fn_g.seen_adds = c[0];
    patch_all();
    pthread_mutex_unlock(&fn_g.lock);
}

static int xsave_ok(void)
{
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (!(c & (1u << 27))) return 0;   /* OSXSAVE */
    unsigned x0, x1;
    __asm__("xgetbv" : "=a"(x0), "=d"(x1) : "c"(0));
    /* what holds arguments and results: x87 (a long double result), SSE,
     * and the upper halves of ymm0-15 and zmm0-15. The rest is not an
     * argument and is caller-saved (opmasks, zmm16-31, APX registers) or
     * untouched by our C code (AMX tiles, 8 KiB), and left out: each open
     * hooked call costs about 2.3 KiB of stack. The standard layout's size
     * is the end of the last saved component. */
    uint32_t mask = x0 & ((1u << 0) | (1u << 1) | (1u << 2) | (1u << 6)), size = 576;
    for (unsigned i = 2; i < 32; i++) {
        if (!(mask >> i & 1)) continue;
        __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0xd), "c"(i));
        if (a + b > size) size = a + b;
    }
    if (size > (64u << 10)) return 0;
    ps_fn_xsave_mask = mask;
    ps_fn_xsave_size = size + 64;   /* and room to align the area down to 64 */
    return 1;
}

/* At init, from POOLSCOPE_SCOPE_FUNCS: "FUNC[=NAME],FUNC[=NAME]...";
 * before the header is written (ps_fn_header), hooks in later. */
void ps_fn_parse(const char *spec)
{
    fn_g.n = 0;
    while (spec && *spec && fn_g.n < PS_FN_MAX) {
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        const char *eq = memchr(spec, '=', len);
        size_t sl = eq ? (size_t)(eq - spec) : len;
        fn_def_t *d = &fn_g.def[fn_g.n];
        if (sl && sl < sizeof d->sym) {
            memcpy(d->sym, spec, sl);
            d->sym[sl] = 0;
            const char *lab = eq ? eq + 1 : spec;
            size_t ll = eq ? len - sl - 1 : sl;
            if (!ll) { lab = spec; ll = sl; }
            if (ll >= sizeof d->label) ll = sizeof d->label - 1;
            memcpy(d->label, lab, ll);
            d->label[ll] = 0;
            fn_g.n++;
        }
        spec = end ? end + 1 : spec + len;
    }
}

/* The header's SCOPE_FUNCS field: "FUNC=NAME\0" each; its length. */
size_t ps_fn_header(char *buf, size_t cap)
{
    size_t n = 0;
    for (unsigned i = 0; i < fn_g.n; i++) {
        size_t a = strlen(fn_g.def[i].sym), b = strlen(fn_g.def[i].label);
        if (n + a + b + 2 > cap) break;
        memcpy(buf + n, fn_g.def[i].sym, a);
        buf[n + a] = '=';
        memcpy(buf + n + a + 1, fn_g.def[i].label, b + 1);
        n += a + b + 2;
    }
    return n;
}

/* A fork child: the lock may have been held by the parent's flusher. */
static void fn_child(void)
{
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    fn_g.lock = init;
}

/* Hook every slot of the objects loaded now (the constructor). */
void ps_fn_install(void)
{
    if (!fn_g.n || !xsave_ok()) return;
    pthread_atfork(NULL, NULL, fn_child);
    fn_g.on = 1;
    pthread_mutex_lock(&fn_g.lock);
    unsigned long long c[2];
    ps_loader_counters(c);
    fn_g.seen_adds = c[0];
    patch_all();
    pthread_mutex_unlock(&fn_g.lock);
}

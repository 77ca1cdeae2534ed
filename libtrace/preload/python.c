/* python.c — Python frames in recorded stacks, and CPython's object
 * allocator (pymalloc) as heap events (prefix ps_py_).
 *
 * Frames. A native walk of a thread running Python passes through
 * _PyEval_EvalFrameDefault once per C-level entry into the interpreter;
 * since 3.11 one such call runs a whole chain of Python-to-Python calls,
 * kept as _PyInterpreterFrame records linked innermost first from the
 * thread state (tstate->cframe->current_frame, then ->previous). The
 * frame of the chain that entered the loop carries is_entry. So the k-th
 * evaluation frame of the native walk (innermost first) owns the k-th run
 * of the chain, each run ending at an entry frame; ps_py_splice puts the
 * run's Python frames in its place (PST_PYFRAME values, format.h).
 *
 * Why read the chain rather than keep a shadow stack from a profile hook:
 * the chain costs nothing while no allocation is recorded, and only a few
 * loads per Python frame when one is (a profile hook pays on every call
 * and return of every function, allocating or not: the budget is
 * 1.3x); it needs no GIL (a thread reads only its own frames, which only
 * it changes), works in threads that started before we did, and cannot
 * fall out of step through generators, coroutines or exceptions, since it
 * is the interpreter's own record of them. The price is the layouts of
 * private structures, which change with each minor version: this file
 * knows 3.11's (py311.h, checked against the headers by tests/python/pyoffsets.c
 * when they are installed) and records native frames only on any other
 * version, saying so once on stderr of `record`'s manifest (see ps_py_init).
 *
 * Reading is defensive all the same: every code object is checked to be
 * one (its type is PyCode_Type) before a field of it is read, and a chain
 * that does not look like one ends the splice: the native frames stay.
 *
 * A frame's line comes from PyCode_Addr2Line (a pure function of the code
 * object's location table: no allocation, no lock), its name and file
 * from the code object's unicode objects, decoded here to UTF-8 (the
 * interpreter's own conversion may allocate). Both are cached in global
 * direct-mapped tables of single 64-bit words (tag | value), read and
 * written with relaxed atomics, so threads share them without a lock; a
 * torn entry cannot exist, and a tag collision (40 bits of a 64-bit
 * hash) would at worst misname one frame. The keys are addresses, and an
 * address outlives its code object: code made by exec or compile is
 * freed, and the next one is often made at the same address, from a
 * qualname and a file name at the same addresses too, with other text
 * and other lines. So every code object freed (pw_free sees its type)
 * moves an epoch that is part of every key: the caches start afresh
 * (an import frees its module's code; a few misses each, measured in
 * bench/results.md's python section).
 *
 * pymalloc. PyMem_SetAllocator wraps the OBJ and MEM domains from our
 * constructor, before the interpreter has allocated anything (its
 * allocators are static data, set at build time): each call goes to the
 * interpreter's own allocator with our guard held (so the malloc it falls
 * back to for blocks over 512 bytes is not recorded twice) and is then
 * recorded as a malloc-family event with the caller's stack. The arenas
 * pymalloc takes from mmap are recorded as mappings named
 * PST_PYMALLOC_ARENA_NAME (an MMAP_NAME event): the analyzers count them as the
 * allocator's reserve, not as the program's memory (the objects in them
 * are already counted, as heap events). */
#include "preload.h"
#include "enc_inline.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "py311.h"


#define PY_CACHE_BITS 13
#define PY_CACHE (1u << PY_CACHE_BITS)

static struct {
    int on;                          /* frames: the interpreter is one we read */
    uintptr_t eval_lo, eval_hi;      /* _PyEval_EvalFrameDefault */
    void *(*this_tstate)(void);      /* PyGILState_GetThisThreadState */
    int (*addr2line)(void *, int);   /* PyCode_Addr2Line */
    uintptr_t code_type;             /* &PyCode_Type */
    uint32_t gen;                    /* bumped when string ids restart (fork child) */
    uint32_t epoch;                  /* bumped when a code object is freed (pw_free) */
    uint64_t names[PY_CACHE];        /* hash tag (high 40 bits) | string id (24 bits) */
    uint64_t lines[PY_CACHE];        /* hash tag (high 40 bits) | line (24 bits) */
} py;

static inline uint64_t pmix(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static inline uintptr_t ld(uintptr_t p, unsigned off) { return *(const uintptr_t *)(p + off); }

/* UTF-8 of a str object into out (at most cap - 1 bytes, NUL-terminated);
 * the length written. Compact strings only (every identifier and file name
 * the compiler makes); anything else reads "?". */
static size_t ustr(uintptr_t o, char *out, size_t cap)
{
    size_t n = 0;
    if (!o || cap < 8) goto done;
    uint32_t st = *(const uint32_t *)(o + U_STATE);
    uint64_t len = ld(o, U_LENGTH);
    unsigned kind = (st >> 2) & 7;
    if (!(st & 32) || (kind != 1 && kind != 2 && kind != 4)) goto done;
    const uint8_t *d = (const uint8_t *)(o + ((st & 64) ? U_ASCII_DATA : U_COMPACT_DATA));
    for (uint64_t i = 0; i < len; i++) {
        uint32_t c = kind == 1 ? d[i] : kind == 2 ? ((const uint16_t *)d)[i] : ((const uint32_t *)d)[i];
        if (n + 5 >= cap) break;
        if (c < 0x80) out[n++] = (char)c;
        else if (c < 0x800) { out[n++] = (char)(0xc0 | c >> 6); out[n++] = (char)(0x80 | (c & 63)); }
        else if (c < 0x10000) {
            out[n++] = (char)(0xe0 | c >> 12); out[n++] = (char)(0x80 | ((c >> 6) & 63));
            out[n++] = (char)(0x80 | (c & 63));
        } else {
            out[n++] = (char)(0xf0 | c >> 18); out[n++] = (char)(0x80 | ((c >> 12) & 63));
            out[n++] = (char)(0x80 | ((c >> 6) & 63)); out[n++] = (char)(0x80 | (c & 63));
        }
    }
done:
    if (!n) out[n++] = '?';
    out[n] = 0;
    return n;
}

/* The string id of "qualname\nfile" for a code object. */
static uint32_t code_sid(uintptr_t co)
{
    uintptr_t qn = ld(co, CO_QUALNAME), fn = ld(co, CO_FILENAME);
    uint32_t ep = __atomic_load_n(&py.epoch, __ATOMIC_RELAXED);
    uint64_t h = pmix(co ^ pmix(qn ^ pmix(fn ^ py.gen ^ (uint64_t)ep << 32)));
    uint64_t *e = &py.names[h & (PY_CACHE - 1)];
    uint64_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (v && v >> 24 == h >> 24) return (uint32_t)(v & 0xffffff);
    char buf[1024];
    size_t k = ustr(qn, buf, 512);
    buf[k++] = '\n';
    ustr(fn, buf + k, sizeof buf - k);
    uint32_t sid = ps_string_id(buf);
    if (sid && sid < (1u << 24))
        __atomic_store_n(e, (h >> 24) << 24 | sid, __ATOMIC_RELAXED);
    return sid;
}

/* The line a frame is executing (its last instruction started). */
static uint32_t frame_line(uintptr_t co, uintptr_t prev_instr)
{
    intptr_t off = (intptr_t)(prev_instr - (co + CO_CODE));   /* bytes: code units are 2 */
    if (off < 0) off = 0;
    uint64_t ep = __atomic_load_n(&py.epoch, __ATOMIC_RELAXED);
    uint64_t h = pmix(co ^ pmix((uint64_t)off ^ ep << 40 ^
                                pmix(ld(co, CO_QUALNAME) + (uint64_t)*(const int *)(co + CO_FIRSTLINENO))));
    uint64_t *e = &py.lines[h & (PY_CACHE - 1)];
    uint64_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (v && v >> 24 == h >> 24) return (uint32_t)(v & 0xffffff);
    int line = py.addr2line((void *)co, (int)(off & ~(intptr_t)1));
    if (line < 0) line = 0;
    if (line > (int)PST_PYFRAME_LINE_MAX) line = PST_PYFRAME_LINE_MAX;
    __atomic_store_n(e, (h >> 24) << 24 | (uint64_t)line, __ATOMIC_RELAXED);
    return (uint32_t)line;
}

/* Is this a live-looking frame record? (aligned, its code a code object) */
static inline int frame_ok(uintptr_t f)
{
    if (!f || (f & 7)) return 0;
    uintptr_t co = ld(f, IF_CODE);
    return co && !(co & 7) && ld(co, OB_TYPE) == py.code_type;
}

int ps_py_splice(uint64_t *fr, int n, int max)
{
    int first = -1;
    for (int i = 0; i < n; i++)
        if (fr[i] - py.eval_lo < py.eval_hi - py.eval_lo) { first = i; break; }
    if (first < 0) return n;
    uintptr_t ts = (uintptr_t)py.this_tstate();
    if (!ts) return n;
    uintptr_t cf = ld(ts, TS_CFRAME);
    if (!cf) return n;
    uintptr_t f = ld(cf, CF_CURRENT);
    uint64_t out[PST_MAX_DEPTH];
    int o = 0, guard = 4096;
    for (int i = 0; i < n && o < max; i++) {
        if (fr[i] - py.eval_lo >= py.eval_hi - py.eval_lo || !f) {
            out[o++] = fr[i];
            continue;
        }
        /* this evaluation loop's run of the chain, up to its entry frame */
        int entry = 0, put = 0;
        while (f && !entry && o < max && --guard > 0) {
            if (!frame_ok(f)) { f = 0; break; }
            uintptr_t co = ld(f, IF_CODE), pi = ld(f, IF_PREV_INSTR);
            entry = *(const uint8_t *)(f + IF_IS_ENTRY);
            /* a frame being set up has not run its first instruction: skip it */
            int incomplete = *(const int8_t *)(f + IF_OWNER) != OWNED_BY_GENERATOR &&
                             pi < co + CO_CODE + 2 * (uintptr_t)*(const int *)(co + CO_FIRSTTRACEABLE);
            if (!incomplete) {
                uint32_t sid = code_sid(co);
                if (sid) { out[o++] = PST_PYFRAME(sid, frame_line(co, pi)); put++; }
            }
            f = ld(f, IF_PREVIOUS);
        }
        if (!put && o < max) out[o++] = fr[i];   /* nothing to show for it: keep the native frame */
    }
    memcpy(fr, out, (size_t)o * sizeof *fr);
    return o;
}

int ps_py_on(void) { return py.on; }

void ps_py_reset(void)
{
    /* string ids restart with the new file: the cached ones are void */
    py.gen++;
    memset(py.names, 0, sizeof py.names);
}

/* ---- pymalloc ------------------------------------------------------------------------ */

typedef struct { void *ctx; void *(*malloc)(void *, size_t); void *(*calloc)(void *, size_t, size_t);
                 void *(*realloc)(void *, void *, size_t); void (*free)(void *, void *); } py_alloc_t;
typedef struct { void *ctx; void *(*alloc)(void *, size_t); void (*free)(void *, void *, size_t); } py_arena_t;
enum { DOMAIN_MEM = 1, DOMAIN_OBJ = 2 };

static py_alloc_t orig_mem, orig_obj;
static py_alloc_t again_mem, again_obj;      /* wrapped again (ps_py_watch_check) */
static py_arena_t orig_arena;

#define ORIG(ctx) ((const py_alloc_t *)(ctx))

/* The interpreter's own call, with our guard held as the tracer's own code,
 * so the malloc pymalloc falls back to is not recorded a second time. */
#define OWN_CALL(expr) __extension__({ ps_tls.busy += PS_BUSY_OWN; __typeof__(expr) r_ = (expr); \
                                       ps_tls.busy -= PS_BUSY_OWN; r_; })

/* As hooks_alloc.c records malloc, calloc, realloc and free: the stack
 * after the call, the address's version (preload.h, ps_ver). */
static void *pw_malloc(void *ctx, size_t n)
{
    ps_thr_t *t = ps_enter();
    if (!t) return ORIG(ctx)->malloc(ORIG(ctx)->ctx, n);
    void *r = OWN_CALL(ORIG(ctx)->malloc(ORIG(ctx)->ctx, n));
    if (r) {
        uint32_t sid = ps_g.stacks != PST_STACKS_NONE ? ps_stack_id(t) : 0;
        uint8_t *p = ps_rec_begin(t);
        if (p) ps_rec_end(t, ps_enc_Au(&t->enc, ps_ver(t, p, (uintptr_t)r), PST_EV_MALLOC, sid, (uintptr_t)r, n));
    }
    ps_leave();
    return r;
}

static void *pw_calloc(void *ctx, size_t k, size_t n)
{
    ps_thr_t *t = ps_enter();
    if (!t) return ORIG(ctx)->calloc(ORIG(ctx)->ctx, k, n);
    void *r = OWN_CALL(ORIG(ctx)->calloc(ORIG(ctx)->ctx, k, n));
    if (r) {
        uint32_t sid = ps_g.stacks != PST_STACKS_NONE ? ps_stack_id(t) : 0;
        uint8_t *p = ps_rec_begin(t);
        if (p) ps_rec_end(t, ps_enc_Auu(&t->enc, ps_ver(t, p, (uintptr_t)r), PST_EV_CALLOC, sid, (uintptr_t)r, k, n));
    }
    ps_leave();
    return r;
}

static void *pw_realloc(void *ctx, void *old, size_t n)
{
    ps_thr_t *t = ps_enter();
    if (!t) return ORIG(ctx)->realloc(ORIG(ctx)->ctx, old, n);
    ps_call_begin(t);
    int multi = ps_g.multi;
    uint32_t xo = multi && old ? ps_vtake(t, (uintptr_t)old) : 0;   /* before the call: realloc's rule */
    void *r = OWN_CALL(ORIG(ctx)->realloc(ORIG(ctx)->ctx, old, n));
    uint32_t sid = ps_g.stacks != PST_STACKS_NONE ? ps_stack_id(t) : 0;
    uint8_t *p = ps_rec_begin(t);
    if (p) {
        uint16_t ver[2];
        unsigned nv = multi ? ps_ver2(t, xo, (uintptr_t)old, (uintptr_t)r, ver) : 0;
        for (unsigned i = 0; i < nv; i++) p = pst_put_ver(p, ver[i]);
        ps_rec_end(t, ps_enc_AAu(&t->enc, p, PST_EV_REALLOC, sid, (uintptr_t)old, (uintptr_t)r, n));
    } else {
        t->inflight = 0;
    }
    ps_leave();
    return r;
}

static void pw_free(void *ctx, void *ptr)
{
    ps_thr_t *t = ptr ? ps_enter() : NULL;
    if (!t) { ORIG(ctx)->free(ORIG(ctx)->ctx, ptr); return; }
    /* a code object going: the caches' keys may name another one soon.
     * Objects are the OBJ domain's, whose blocks are at least 16 bytes
     * (a MEM block of 0 bytes under the debug hooks is not: its second
     * word is past its end) */
    if (py.on && (ctx == &orig_obj || ctx == &again_obj) && ld((uintptr_t)ptr, OB_TYPE) == py.code_type)
        __atomic_add_fetch(&py.epoch, 1, __ATOMIC_RELAXED);
    /* recorded before the block goes back, as free */
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_A(&t->enc, ps_ver(t, p, (uintptr_t)ptr), PST_EV_FREE, 0, (uintptr_t)ptr));
    ps_tls.busy += PS_BUSY_OWN;
    ORIG(ctx)->free(ORIG(ctx)->ctx, ptr);
    ps_tls.busy -= PS_BUSY_OWN;
    ps_leave();
}

/* Arenas. Called from inside pw_malloc / pw_free (guard 1 + PS_BUSY_OWN):
 * the guard is let go across the interpreter's call so the mmap and munmap
 * hooks record the arena like any mapping (nothing of pw_malloc's own
 * record is under way), and a new arena is named as pymalloc's. Called
 * with any other guard (not recording), the call passes straight through. */
#define PW_NESTED (1 + PS_BUSY_OWN)
static void *pa_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (ps_tls.busy != PW_NESTED) {
        /* an arena for an allocation that did not come through us: see
         * ps_py_watch_check (this one object is not recorded) */
        if (PS_UNLIKELY(ps_py_watch) && !ps_tls.busy) ps_py_watch_check();
        return orig_arena.alloc(orig_arena.ctx, n);
    }
    ps_tls.busy = 0;
    void *r = orig_arena.alloc(orig_arena.ctx, n);
    ps_thr_t *t = r ? ps_enter() : NULL;
    if (t) {
        pst_event_t ev = { .type = PST_EV_MMAP_NAME, .f = { (uintptr_t)r, ps_string_id(PST_PYMALLOC_ARENA_NAME) } };
        ps_emit_generic(t, &ev);
        ps_leave();
    }
    ps_tls.busy = PW_NESTED;
    return r;
}

static void pa_free(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (ps_tls.busy != PW_NESTED) { orig_arena.free(orig_arena.ctx, p, n); return; }
    ps_tls.busy = 0;
    orig_arena.free(orig_arena.ctx, p, n);
    ps_tls.busy = PW_NESTED;
}

/* Wraps domain d (once more: see ps_py_watch_check) unless it is ours. */
static void (*py_get)(int, py_alloc_t *), (*py_set)(int, py_alloc_t *);
static int (*py_core_done)(void);
static void wrap(int d, py_alloc_t *orig)
{
    py_alloc_t cur;
    py_get(d, &cur);
    if (!cur.malloc || cur.malloc == pw_malloc) return;
    *orig = cur;
    py_alloc_t w = { orig, pw_malloc, pw_calloc, pw_realloc, pw_free };
    py_set(d, &w);
}

/* PYTHONMALLOC (pymalloc, debug, pymalloc_debug, malloc_debug) and -X dev
 * make the interpreter set its allocators again during its pre-
 * initialisation, after our constructor wrapped them: ours would be gone
 * and every object with them (9 of 65 MB seen). So until the interpreter's
 * core is initialised, each stack capture (and an arena taken outside our
 * wrapper, with --stacks none) looks, and wraps what it finds, once per
 * domain: the same rule as the interpreter's own (set before the first
 * allocation of the domain), and no later, when a wrapper of ours may be
 * under a tracer of the program's own (tracemalloc starts after the core:
 * wrapping that again would record each call twice). PYTHONMALLOC=malloc
 * needs none of it: its objects are malloc's, recorded as such. */
int ps_py_watch;
void ps_py_watch_check(void)
{
    if (py_core_done && py_core_done()) { ps_py_watch = 0; return; }
    py_alloc_t cur;
    py_get(DOMAIN_OBJ, &cur);
    if (cur.malloc == pw_malloc) { py_get(DOMAIN_MEM, &cur); if (cur.malloc == pw_malloc) return; }
    ps_py_watch = 0;   /* once */
    wrap(DOMAIN_MEM, &again_mem);
    wrap(DOMAIN_OBJ, &again_obj);
}

static void hook_pymalloc(void)
{
    py_get = (void (*)(int, py_alloc_t *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
    py_set = (void (*)(int, py_alloc_t *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
    py_core_done = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsCoreInitialized");
    void (*aget)(py_arena_t *) = (void (*)(py_arena_t *))dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator");
    void (*aset)(py_arena_t *) = (void (*)(py_arena_t *))dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator");
    if (!py_get || !py_set || !aget || !aset) return;
    aget(&orig_arena);
    if (!orig_arena.alloc) return;
    wrap(DOMAIN_MEM, &orig_mem);
    wrap(DOMAIN_OBJ, &orig_obj);
    py_arena_t a = { NULL, pa_alloc, pa_free };
    aset(&a);
    /* a process already past it (Python embedded, then us loaded): nothing to watch */
    ps_py_watch = py_core_done && !py_core_done();
}

int ps_py_init(int frames, int pymalloc)
{
    const unsigned long *ver = (const unsigned long *)dlsym(RTLD_DEFAULT, "Py_Version");
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    if (!eval) return 0;                     /* not a Python process (or not yet: embedded later) */
    unsigned long v = ver ? *ver : 0;
    if ((v >> 16) != 0x030b) {
        /* a line of the manifest for `record` to print (its program's stderr is not ours) */
        char msg[200];
        int k = snprintf(msg, sizeof msg, "note\tpid %d: Python %lu.%lu: Python frames and pymalloc events "
                         "need CPython 3.11; native frames only\n", (int)ps_g.pid, (v >> 24) & 255, (v >> 16) & 255);
        int fd = ps_g.manifest[0] ? open(ps_g.manifest, O_WRONLY | O_APPEND | O_CLOEXEC) : -1;
        if (fd >= 0) { (void)!write(fd, msg, (size_t)k); ps_real_close(fd); }
        return 1;
    }
    if (pymalloc) hook_pymalloc();
    if (!frames || ps_g.stacks == PST_STACKS_NONE) return 1;
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size) return 1;
    py.eval_lo = (uintptr_t)eval;
    py.eval_hi = py.eval_lo + sym->st_size;
    py.this_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    py.addr2line = (int (*)(void *, int))dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
    py.code_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyCode_Type");
    py.on = py.this_tstate && py.addr2line && py.code_type;
    return 1;
}

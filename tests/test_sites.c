/* test_sites.c — the symbolizer's address rule, demangling, wrapper
 * patterns and short names (analyzer/symbolize.c, demangle.c, sites.c).
 * Expectations are the C++ ABI's names and this file's own __LINE__. */
#include <dlfcn.h>
#include <fnmatch.h>
#include <link.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "demangle.h"
#include "poolscope/writer.h"
#include "scan.h"
#include "sites.h"
#include "symbolize.h"

static void test_demangle_itanium_names(void **st)
{
    (void)st;
    char b[512];
    assert_string_equal(az_dm_name("_ZN13llama_context13sched_reserveEv", b, sizeof b), "llama_context::sched_reserve()");
    assert_string_equal(az_dm_name("_Znwm", b, sizeof b), "operator new(unsigned long)");
    assert_string_equal(az_dm_name("_ZN5infer6TensorIfE4growEm", b, sizeof b), "infer::Tensor<float>::grow(unsigned long)");
    assert_string_equal(az_dm_name("__libc_start_main@@GLIBC_2.34", b, sizeof b), "__libc_start_main");
    assert_string_equal(az_dm_name("make_buffer", b, sizeof b), "make_buffer");
    assert_string_equal(az_dm_name("_Zbogus", b, sizeof b), "_Zbogus");   /* not a valid name: as it was */
    assert_null(az_dm_name(NULL, b, sizeof b));
}

static void test_short_names_drop_parameters(void **st)
{
    (void)st;
    char b[512];
    assert_string_equal(az_sv_short("std::vector<int, std::allocator<int> >::push_back(int const&)", b, sizeof b),
                        "std::vector<int, std::allocator<int> >::push_back");
    assert_string_equal(az_sv_short("main::{lambda(int)#1}::operator()(int) const", b, sizeof b),
                        "main::{lambda(int)#1}::operator()");
    assert_string_equal(az_sv_short("a::operator<<(int)", b, sizeof b), "a::operator<<");
    assert_string_equal(az_sv_short("(anonymous namespace)::f(int)", b, sizeof b), "(anonymous namespace)::f");
    assert_string_equal(az_sv_short("plain_c", b, sizeof b), "plain_c");
}

static az_frame_t fn(const char *f, const char *file)
{
    az_frame_t x;
    memset(&x, 0, sizeof x);
    x.function = f;
    x.file = file;
    return x;
}

/* heaptrack's habit (sites.h, az_sv_fold): each template argument list
 * folded to <…>, the rest of the name kept */
static void test_fold_template_arguments(void **st)
{
    (void)st;
    char b[256];
    assert_string_equal(az_sv_fold("std::map<int, std::vector<int, std::allocator<int> > >::at(int const&)", b, sizeof b),
                        "std::map<\u2026>::at(int const&)");
    assert_string_equal(az_sv_fold("f(std::function<void ()>, std::pair<a<b>, c>)", b, sizeof b),
                        "f(std::function<\u2026>, std::pair<\u2026>)");
    /* operators are not brackets, inside a template argument list or not */
    assert_string_equal(az_sv_fold("a::operator<<(int)", b, sizeof b), "a::operator<<(int)");
    assert_string_equal(az_sv_fold("a::operator<(a const&)", b, sizeof b), "a::operator<(a const&)");
    assert_string_equal(az_sv_fold("x<y>::operator->()", b, sizeof b), "x<\u2026>::operator->()");
    assert_string_equal(az_sv_fold("x<decltype(a<b)>::g()", b, sizeof b), "x<\u2026>::g()");
    /* a label: frames joined by " < " stay apart */
    assert_string_equal(az_sv_fold("g<int>(int) (a.cc:3) < main", b, sizeof b), "g<\u2026>(int) (a.cc:3) < main");
    assert_string_equal(az_sv_fold("plain_c (a.c:1) < main", b, sizeof b), "plain_c (a.c:1) < main");
    /* Python's names in angle brackets are no template (the Python names
     * report prints, as CPython spells them) */
    assert_string_equal(az_sv_fold("outer.<locals>.<dictcomp> (wl.py:2) < <module> (wl.py:9)", b, sizeof b),
                        "outer.<locals>.<dictcomp> (wl.py:2) < <module> (wl.py:9)");
    assert_string_equal(az_sv_fold("_call_with_frames_removed (<frozen importlib._bootstrap>:241)", b, sizeof b),
                        "_call_with_frames_removed (<frozen importlib._bootstrap>:241)");
    /* a buffer too small for the whole fold: cut, terminated */
    char t[8];
    az_sv_fold("std::map<int, int>::at", t, sizeof t);
    assert_int_equal(strlen(t), 7);
}

static void test_default_wrappers_and_user_ps_functions(void **st)
{
    (void)st;
    az_sv_t *v = az_sv_create(NULL, NULL, NULL);
    assert_non_null(v);
    az_frame_t skip[] = {
        fn("operator new(unsigned long)", NULL), fn("malloc", NULL),
        fn("std::vector<float, std::allocator<float> >::_M_default_append(unsigned long)", NULL),
        fn("c10::alloc_cpu(unsigned long)", NULL), fn("ggml_aligned_malloc", NULL),
        fn("ggml_backend_cpu_buffer_type_alloc_buffer", NULL), fn("PyObject_Malloc", NULL),
        fn("PyMem_RawMalloc", NULL), fn("def_data_alloc", "/src/poolscope/pool/bufpool.c"),
        fn("m_alloc", "pool/blockpool.c"),
    };
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++) assert_true(az_sv_skipped(v, &skip[i]));
    az_frame_t keep[] = {
        fn("ps_user_buffer", "/home/me/app.c"), fn("pst_parse_config", NULL), fn("main", NULL),
        fn("__libc_start_call_main", NULL), fn("llama_kv_cache::llama_kv_cache()", NULL),
        fn("acquire", "/home/me/mypool.c"), fn(NULL, NULL),
    };
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) assert_false(az_sv_skipped(v, &keep[i]));
    az_sv_destroy(v);

    const char *pats[] = { "app_alloc*", "file:*/vendor/*" };
    az_sv_opts_t o = { .no_skip = 1, .skip = pats, .n_skip = 2 };
    v = az_sv_create(NULL, NULL, &o);
    az_frame_t a = fn("app_alloc_impl", NULL), b = fn("g", "/x/vendor/y.c");
    assert_true(az_sv_skipped(v, &a));
    assert_true(az_sv_skipped(v, &b));
    assert_false(az_sv_skipped(v, &skip[0]));   /* --no-skip: no default */
    az_sv_destroy(v);
}

/* Every fnmatch of the analyzer goes through here (it is linked into this
 * executable, whose definition wins over libc's): the calls are counted and
 * passed on. */
static unsigned long n_fnmatch;
int fnmatch(const char *pattern, const char *string, int flags)
{
    static int (*real)(const char *, const char *, int);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "fnmatch");
    n_fnmatch++;
    return real(pattern, string, flags);
}

/* A wrapper test runs the patterns once per distinct function or file
 * text, not once per frame: a PyTorch trace's 113 M frames name a few
 * thousand functions. The same text at the same address asks no pattern
 * again, and gives the same answer; another copy of the text is tested
 * afresh and answers alike. */
static void test_wrapper_patterns_run_once_per_text(void **st)
{
    (void)st;
    az_sv_t *v = az_sv_create(NULL, NULL, NULL);
    assert_non_null(v);
    char a1[] = "operator new(unsigned long)", a2[] = "operator new(unsigned long)", k[] = "main";
    char path[] = "/src/poolscope/pool/bufpool.c";
    az_frame_t w = fn(a1, NULL), w2 = fn(a2, NULL), m = fn(k, path);
    unsigned long before = n_fnmatch;
    assert_true(az_sv_skipped(v, &w));
    unsigned long first = n_fnmatch - before;
    assert_true(first > 0);                       /* the patterns did run */
    for (int i = 0; i < 100; i++) assert_true(az_sv_skipped(v, &w));
    assert_int_equal(n_fnmatch - before, first);  /* and never again for this text */
    assert_true(az_sv_skipped(v, &w2));           /* the same text elsewhere: tested, same answer */
    assert_true(n_fnmatch - before > first);
    before = n_fnmatch;
    assert_true(az_sv_skipped(v, &m));            /* main is no wrapper, its file is one */
    first = n_fnmatch - before;
    for (int i = 0; i < 100; i++) assert_true(az_sv_skipped(v, &m));
    assert_int_equal(n_fnmatch - before, first);
    az_frame_t plain = fn(k, NULL);               /* main alone: kept, from the memo */
    before = n_fnmatch;
    assert_false(az_sv_skipped(v, &plain));
    assert_int_equal(n_fnmatch, before);
    az_sv_destroy(v);
}

/* A writer into memory (*buf, *len once *fp is closed). */
static pst_writer_t *mem_writer(FILE **fp, char **buf, size_t *len, uint32_t stacks, uint32_t depth)
{
    pst_writer_cfg_t cfg = { .pid = 7, .ppid = 1, .start_real_ns = 1, .start_mono_ns = 1,
                             .stacks = stacks, .depth = depth, .page_size = 4096, .exe = "/x",
                             .argv = (const char *const[]){ "x", NULL }, .tool = "test_sites", .host = "h" };
    *fp = open_memstream(buf, len);
    assert_non_null(*fp);
    int err = 0;
    pst_writer_t *w = pst_writer_open_fp(*fp, &cfg, &err);
    assert_non_null(w);
    return w;
}

/* Many stacks, one label: a row holds what its stacks share, not a record
 * per stack. 50,000 stacks (one malloc each) have the same two innermost
 * frames and differ further out, so site rows give one row of 50,000
 * stacks and 50,000 calls; a site view's labels and rows grow the heap by
 * less than 2 MB (a memo entry, a label copy and a row record per stack
 * were 10.3 MB here), the symbolizer's caches filled by a first view.
 * No module is known, so labels are addresses. */
static void test_rows_of_many_stacks_with_one_label(void **st)
{
    (void)st;
    enum { N = 50000 };
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = NULL;
    pst_writer_t *w = mem_writer(&fp, &buf, &len, PST_STACKS_FP, 8);
    pst_writer_time(w, 1000);
    for (uint32_t i = 0; i < N; i++) {
        uint64_t fr[4] = { 0x401000, 0x402000, 0x500000 + 16 * (uint64_t)i, 0x403000 };
        uint32_t id = pst_writer_stack(w, fr, 4);
        assert_int_equal(id, i + 1);
        pst_event_t ev = { .type = PST_EV_MALLOC, .stack = id, .f = { 0x10000000 + 64 * (uint64_t)i, 48 } };
        pst_writer_time(w, 1000 + i);
        assert_int_equal(pst_writer_event(w, 1, &ev), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
    fclose(fp);
    az_scan_t *s = NULL;
    char msg[256];
    assert_int_equal(az_scan_mem(buf, len, "many.pst", NULL, &s, msg, sizeof msg), 0);
    az_sym_t *sym = az_sym_open(s->r);
    assert_non_null(sym);
    size_t n = 0;
    az_sv_t *v = az_sv_create(s, sym, NULL);   /* a first view fills the symbolizer's caches */
    assert_non_null(az_sv_sites(v, &n));
    az_sv_destroy(v);
    size_t before = mallinfo2().uordblks;
    v = az_sv_create(s, sym, NULL);
    assert_non_null(v);
    const az_dsite_t *rows = az_sv_sites(v, &n);
    size_t grew = mallinfo2().uordblks - before;
    print_message("labels and rows of %d stacks grew the heap by %zu bytes\n", N, grew);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].n_stacks, N);
    assert_int_equal(rows[0].calls, N);
    assert_int_equal(rows[0].bytes, 48ull * N);
    assert_non_null(strstr(rows[0].label, "0x401000"));
    assert_true(grew < (2u << 20));
    az_sv_destroy(v);
    az_sym_destroy(sym);
    az_scan_free(s);
    free(buf);
}

/* A label is made from the innermost frames first (sites.c, LABEL_FRAMES:
 * 24 recorded frames), and from the whole stack when it reaches past them.
 * Three stacks whose labels need frames deeper than that, with the labels
 * the rules give (a Python line names a stack that runs Python, by
 * "function (file:line)", its callers the Python frames above it;
 * skipped frames first left out): 30 native frames inside a Python line;
 * 30 Python frames skipped by a user pattern; a Python line whose Python
 * caller is 30 native frames further out. */
static void test_labels_reach_past_the_innermost_frames(void **st)
{
    (void)st;
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = NULL;
    pst_writer_t *w = mem_writer(&fp, &buf, &len, PST_STACKS_DWARF, 128);
    uint64_t inner = PST_PYFRAME(pst_writer_string(w, "inner\n/src/m.py"), 7);
    uint64_t outer = PST_PYFRAME(pst_writer_string(w, "outer\n/src/m.py"), 3);
    uint64_t site = PST_PYFRAME(pst_writer_string(w, "real_site\n/src/m.py"), 5);
    uint64_t caller = PST_PYFRAME(pst_writer_string(w, "caller\n/src/m.py"), 9);
    uint64_t leaf = PST_PYFRAME(pst_writer_string(w, "leaf\n/src/m.py"), 2);
    uint64_t top = PST_PYFRAME(pst_writer_string(w, "top\n/src/m.py"), 1);
    uint64_t a[32], b[32], c[32];
    for (int i = 0; i < 30; i++) {
        a[i] = 0x401000 + 16 * (uint64_t)i;   /* no module: frames of their own, never skipped */
        char name[32];
        snprintf(name, sizeof name, "wrap_%d\n/src/w.py", i);
        b[i] = PST_PYFRAME(pst_writer_string(w, name), 1);
        c[i + 1] = 0x402000 + 16 * (uint64_t)i;
    }
    a[30] = inner; a[31] = outer;
    b[30] = site; b[31] = caller;
    c[0] = leaf; c[31] = top;
    uint32_t ids[3] = { pst_writer_stack(w, a, 32), pst_writer_stack(w, b, 32), pst_writer_stack(w, c, 32) };
    pst_writer_time(w, 1000);
    for (int i = 0; i < 3; i++) {
        pst_event_t ev = { .type = PST_EV_MALLOC, .stack = ids[i], .f = { 0x10000000 + 64 * (uint64_t)i, 48 } };
        assert_int_equal(pst_writer_event(w, 1, &ev), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
    fclose(fp);
    az_scan_t *s = NULL;
    char msg[256];
    assert_int_equal(az_scan_mem(buf, len, "deep.pst", NULL, &s, msg, sizeof msg), 0);
    az_sym_t *sym = az_sym_open(s->r);
    assert_non_null(sym);
    const char *pats[] = { "wrap_*" };
    az_sv_opts_t o = { .skip = pats, .n_skip = 1 };
    az_sv_t *v = az_sv_create(s, sym, &o);
    assert_non_null(v);
    const char *want[3] = { "inner (m.py:7) < outer (m.py:3)", "real_site (m.py:5) < caller (m.py:9)",
                            "leaf (m.py:2) < top (m.py:1)" };
    for (int i = 0; i < 3; i++) assert_string_equal(az_sv_label(v, ids[i], NULL), want[i]);
    az_sv_destroy(v);
    az_sym_destroy(sym);
    az_scan_free(s);
    free(buf);
}

/* ---- the address rule on this very executable ------------------------------- */

static uint64_t ra;
__attribute__((noinline)) static void grab(void)
{
    ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}
static volatile int after;

static int self_module(struct dl_phdr_info *info, size_t size, void *ctx)
{
    (void)size;
    pst_module_t *m = ctx;
    if (info->dlpi_name && info->dlpi_name[0]) return 0;   /* the executable has no name here */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD) continue;
        uint64_t a = info->dlpi_addr + p->p_vaddr;
        if (a < lo) lo = a;
        if (a + p->p_memsz > hi) hi = a + p->p_memsz;
    }
    m->base = lo;
    m->size = hi - lo;
    return 1;
}

static void test_return_address_names_the_call_line(void **st)
{
    (void)st;
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    assert_true(n > 0);
    path[n] = 0;
    pst_module_t m = { .path = path };
    dl_iterate_phdr(self_module, &m);
    assert_true(m.size > 0);
    az_sym_t *s = az_sym_create(&m, 1);
    assert_non_null(s);
    int line = __LINE__ + 1;
    grab();
    after = 1;   /* the instruction after the call belongs to this line */
    az_frame_t f[8];
    size_t k = az_sym_stack(s, &ra, 1, f, 8);
    assert_true(k >= 1 && k <= 8);
    assert_non_null(f[k - 1].function);
    assert_string_equal(f[k - 1].function, "test_return_address_names_the_call_line");
    assert_int_equal(f[k - 1].line, line);
    assert_int_equal(f[k - 1].addr, ra - 1);
    assert_int_equal(f[k - 1].pc, ra);
    char b[256];
    snprintf(b, sizeof b, "test_sites.c:%d)", line);
    char g[512];
    assert_non_null(strstr(az_sym_format(&f[k - 1], ra, g, sizeof g), b));
    az_sym_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demangle_itanium_names),
        cmocka_unit_test(test_short_names_drop_parameters),
        cmocka_unit_test(test_fold_template_arguments),
        cmocka_unit_test(test_default_wrappers_and_user_ps_functions),
        cmocka_unit_test(test_wrapper_patterns_run_once_per_text),
        cmocka_unit_test(test_rows_of_many_stacks_with_one_label),
        cmocka_unit_test(test_return_address_names_the_call_line),
        cmocka_unit_test(test_labels_reach_past_the_innermost_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

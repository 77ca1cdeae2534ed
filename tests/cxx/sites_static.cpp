// sites_static.cpp — C++ functions with internal linkage, whose DWARF (GCC)
// has no DW_AT_linkage_name: their names must read as `addr2line -C`
// prints them, parameters and scope included (issue 27, item 5;
// tests/integration/symbols_cxx.sh). A static function, one in an
// anonymous namespace, a static function template, and a static function
// inlined into its caller (no symbol of its own: DW_AT_name, as
// llvm-addr2line prints it).
#include <cstdio>
#include <cstdlib>

__attribute__((noinline)) static void *work(int a, int b)
{
    return std::malloc((std::size_t)a * (std::size_t)b);   // STATIC_SITE_WORK
}

namespace {
__attribute__((noinline)) void *anon_alloc(int a, int b)
{
    return std::calloc((std::size_t)a, (std::size_t)b);   // STATIC_SITE_ANON
}
}  // namespace

template <typename T>
__attribute__((noinline)) static T *make_array(int n)
{
    return new T[(std::size_t)n];   // STATIC_SITE_TEMPLATE
}

static inline void *inl_alloc(int n)
{
    return std::malloc((std::size_t)n + 7);   // STATIC_SITE_INLINE
}

int main(int argc, char **argv)
{
    (void)argv;
    void *a = work(argc + 99, 1000);
    void *b = anon_alloc(argc + 199, 100);
    double *c = make_array<double>(argc + 4095);
    void *d = inl_alloc(argc + 3000);
    std::printf("%p %p %p %p\n", a, b, (void *)c, d);
    std::free(a);
    std::free(b);
    delete[] c;
    std::free(d);
    return 0;
}

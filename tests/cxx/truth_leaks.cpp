// truth_leaks.cpp — a C++ program whose only leaks are its own: it keeps
// LEAKS objects of known sizes (new, never deleted) and frees everything
// else. libstdc++ allocates its exception emergency pool before main and
// never frees it in a normal run: a tracer must not count that as the
// program's leak (tests/integration/truth.sh, section 6).
//
//   truth_leaks LEAKS     prints leaked_objects=, leaked_bytes= (with write(2))
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

static void put(const char *k, unsigned long v)
{
    char b[64];
    int n = std::snprintf(b, sizeof b, "%s=%lu\n", k, v);
    if (n > 0 && write(1, b, (size_t)n) != n) std::_Exit(1);
}

int main(int argc, char **argv)
{
    unsigned leaks = argc > 1 ? (unsigned)std::atoi(argv[1]) : 3;
    unsigned long bytes = 0;
    for (unsigned i = 0; i < leaks; i++) {
        size_t n = 100 + 10 * i;
        char *p = new char[n];          // kept on purpose
        std::memset(p, 1, n);
        bytes += n;
    }
    {
        std::vector<std::string> v;
        for (int i = 0; i < 1000; i++) v.push_back(std::string(40 + i % 50, 'x'));
        try { throw std::string(200, 'e'); } catch (const std::string &) {}
    }
    put("leaked_objects", leaks);
    put("leaked_bytes", bytes);
    return 0;
}

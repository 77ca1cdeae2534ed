// phase_steps.cpp — phase_steps.c's loop as a C++ engine: the step is a
// method of a class in a namespace, its allocations are `new`, so
// --phase-frame matches a demangled, qualified name ("eng::Engine::step").
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace eng {
struct Engine {
    std::vector<std::vector<char> *> held;
    __attribute__((noinline)) void step(int s, int k)
    {
        for (int i = 0; i < k; i++) held.push_back(new std::vector<char>(64 + i + s));
    }
};
}  // namespace eng

// where the header goes, so the compiler may not elide its new/delete
char *volatile last_header;

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 10, k = argc > 2 ? std::atoi(argv[2]) : 4;
    if (n < 1 || k < 1 || k > 1024) return 2;
    eng::Engine e;
    e.held.reserve(2048);                                // outside, once
    for (int s = 0; s < n; s++) {
        char *hdr = new char[32];                        // outside: one per step
        last_header = hdr;
        e.step(s, k);
        for (auto *v : e.held) delete v;
        e.held.clear();
        delete[] hdr;
    }
    std::printf("steps=%d\n", n);
    return 0;
}

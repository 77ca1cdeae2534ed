// throw_main N: N calls of may_throw (linked -z now: its GOT is read-only),
// counting what it returned and what it threw.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

extern "C" int may_throw(int);

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 9, caught = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        try {
            sum += may_throw(i);
        } catch (const std::exception &) {
            caught++;
        }
    }
    std::printf("calls=%d caught=%d sum=%d\n", n, caught, sum);
    return 0;
}

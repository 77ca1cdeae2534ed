// libthrow.so: may_throw throws on every third call, through the recorder's
// stub when its calls are recorded as scopes.
#include <cstdlib>
#include <stdexcept>

extern "C" int may_throw(int i)
{
    void *p = std::malloc(32);
    *static_cast<volatile char *>(p) = 1;
    std::free(p);
    if (i % 3 == 0) throw std::runtime_error("every third");
    return i;
}

// sites_cxx.cpp — C++ allocation sites whose names must come out demangled
// in report, folded and chrome output (tests/integration/sites.sh):
// a class template in a namespace growing a std::vector (operator new via
// std::allocator), a lambda, an overloaded operator. Large sizes so the
// chrome export shows them as allocation instants.
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace infer {

template <typename T>
class Tensor {
public:
    explicit Tensor(std::size_t n) { data_.reserve(n); }   // CXX_SITE_RESERVE
    void grow(std::size_t n) { data_.resize(n); }
    std::size_t size() const { return data_.size(); }
private:
    std::vector<T> data_;
};

struct Arena {
    void *operator new(std::size_t n) { return std::malloc(n + 100000); }   // CXX_SITE_NEW
    void operator delete(void *p) { std::free(p); }
    char pad[64];
};

}  // namespace infer

int main()
{
    std::size_t total = 0;
    auto make = [&total](std::size_t n) {
        infer::Tensor<float> t(n);   // CXX_SITE_LAMBDA
        t.grow(2 * n);
        total += t.size();
    };
    for (int i = 0; i < 8; i++) make(100000 + 1000 * (std::size_t)i);
    for (int i = 0; i < 4; i++) {
        infer::Arena *a = new infer::Arena;
        total += sizeof *a;
        delete a;
    }
    std::printf("total=%zu\n", total);
    return 0;
}

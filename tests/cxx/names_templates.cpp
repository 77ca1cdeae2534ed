// names_templates.cpp — an allocation site whose C++ name is long with
// template arguments (std::map, std::function, std::string inside a class
// template), for tests/integration/cxx_names.sh: the text report folds
// them to <…>, report --full and sql keep the name as c++filt prints it.
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace eng {

template <typename K, typename V>
struct Registry {
    std::map<K, std::function<V(const K &)>> handlers;
    __attribute__((noinline)) std::vector<V> *make_all(const K &k, int n)
    {
        auto *v = new std::vector<V>();   // NAMES_SITE
        v->reserve((std::size_t)n);
        for (int i = 0; i < n; i++) v->push_back(handlers.at(k)(k));
        return v;
    }
};

}  // namespace eng

using Inner = std::map<std::string, std::function<int(double)>>;

int main()
{
    eng::Registry<std::string, Inner> r;
    r.handlers["a"] = [](const std::string &) { return Inner{}; };
    std::vector<std::vector<Inner> *> kept;
    for (int i = 0; i < 4; i++) kept.push_back(r.make_all("a", 3));
    std::size_t n = 0;
    for (auto *v : kept) { n += v->size(); delete v; }
    std::printf("made=%zu\n", n);
    return 0;
}

/* libdluse.so: calls dl_leaf through a lazily bound PLT slot, which the
 * patcher must resolve itself (the loader has not yet). */
int dl_leaf(int x);

int dl_top(int x)
{
    return dl_leaf(x) + 1;
}

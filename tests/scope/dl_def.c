/* libdldef.so: defines the hooked function; a dependency of libdluse.so,
 * so it is loaded and unloaded with it. */
int dl_leaf(int x)
{
    return x * 3 + 1;
}

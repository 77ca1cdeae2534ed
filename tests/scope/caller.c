/* libcaller.so, built -fno-plt -z now: its call of leaf() loads the address
 * from a GLOB_DAT slot in read-only (RELRO) memory; loaded with dlopen. */
int leaf(int);

int call_it(int i) { return leaf(i) + 1; }

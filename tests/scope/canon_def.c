/* libcdef.so: foo, defined here and called by libcuse.so and canon_main. */
int foo(int x) { return x + 1; }

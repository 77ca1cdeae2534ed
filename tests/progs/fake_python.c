/* fake_python.c — a program that looks to the interposer like a CPython
 * of another version (tests/integration/python_frames.sh): it exports
 * Py_Version (3.12.0) and a function named _PyEval_EvalFrameDefault, so
 * libtrace/preload/python.c must leave Python frames off, say so in the
 * manifest (record prints it) and trace the program's mallocs as native
 * ones. Prints the number of mallocs it made. Built with -rdynamic. */
#include <stdio.h>
#include <stdlib.h>

const unsigned long Py_Version = 0x030c00f0;

__attribute__((noinline)) void *_PyEval_EvalFrameDefault(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void)
{
    int n = 0;
    for (int i = 0; i < 100; i++, n++) free(_PyEval_EvalFrameDefault(100 + (size_t)i));
    printf("mallocs=%d\n", n);
    return 0;
}

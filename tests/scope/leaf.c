/* libleaf.so: what libcaller.so calls through its GOT. */
#include <stdlib.h>

int leaf(int i)
{
    void *p = malloc(48);
    *(volatile char *)p = (char)i;
    free(p);
    return i * 2;
}

/* libattdl.so: loaded by att_dl while `poolscope attach` records it: its
 * malloc and free go through its own GOT slots, which the tracer patches
 * after the load (libtrace/preload/attach.c, ps_att_poll). */
#include <stdlib.h>
#include <string.h>

int att_dl_work(int n)
{
    int sum = 0;
    for (int i = 0; i < n; i++) {
        char *p = malloc(12345);
        if (!p) return -1;
        memset(p, i, 12345);
        sum += p[100];
        free(p);
    }
    return sum;
}

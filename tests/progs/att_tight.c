/* att_tight STOPFILE: one thread that does nothing but malloc and free
 * (64 blocks replaced in turn) until STOPFILE exists, so `poolscope
 * attach` almost always stops it inside the allocator, where calling
 * dlopen could corrupt or deadlock it: attach must first let it leave
 * (libtrace/inject.c steps it out of malloc). It checks every block it reads back
 * and prints "checked=ok" whatever the run's length. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    unsigned char *keep[64] = { 0 };
    unsigned long bad = 0;
    fprintf(stderr, "ready\n");
    while (access(argv[1], F_OK) != 0) {
        for (int i = 0; i < 100000; i++) {
            int s = i & 63;
            if (keep[s] && keep[s][0] != (unsigned char)s) bad++;
            free(keep[s]);
            keep[s] = malloc(16 + (size_t)(i & 1023));
            if (!keep[s]) abort();
            keep[s][0] = (unsigned char)s;
        }
    }
    for (int s = 0; s < 64; s++) free(keep[s]);
    printf("checked=%s\n", bad ? "BAD" : "ok");
    return 0;
}

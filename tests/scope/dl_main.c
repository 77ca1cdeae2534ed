/* dl_main USE DEF ROUNDS global|local: each round dlopens USE (which
 * needs DEF) lazily, waits long enough for the tracer to patch the new
 * slot (it looks every 10 ms), calls through it, dlcloses USE and asks the
 * loader whether DEF is still loaded. Untraced, DEF goes with USE. A
 * tracer whose patching made the loader record a dependency on DEF (a
 * dlsym that found it in the global scope) keeps it loaded: the program's
 * next dlopen then maps and allocates less than it would. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc != 5) return 2;
    int rounds = atoi(argv[3]), sum = 0, left = 0;
    int mode = RTLD_LAZY | (strcmp(argv[4], "global") ? RTLD_LOCAL : RTLD_GLOBAL);
    for (int r = 0; r < rounds; r++) {
        void *h = dlopen(argv[1], mode);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        int (*top)(int) = (int (*)(int))dlsym(h, "dl_top");
        if (!top) return 1;
        sum += top(r);
        dlclose(h);
        void *d = dlopen(argv[2], RTLD_LAZY | RTLD_NOLOAD);
        if (d) { left++; dlclose(d); }
    }
    printf("rounds=%d sum=%d def_left_loaded=%d\n", rounds, sum, left);
    return 0;
}

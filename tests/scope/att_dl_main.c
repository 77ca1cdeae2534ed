/* att_dl LIB STOPFILE: each round dlopens LIB, waits 50 ms (the tracer
 * patches a new object's slots within 10 ms of its load), has it make 10
 * mallocs of 12345 bytes and their frees, and dlcloses it; until STOPFILE
 * exists. Prints what does not depend on how many rounds ran. */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    long rounds = 0;
    int bad = 0;
    fprintf(stderr, "ready\n");
    while (access(argv[2], F_OK) != 0) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        struct timespec d = { 0, 50 * 1000 * 1000 };
        nanosleep(&d, NULL);
        int (*work)(int) = (int (*)(int))dlsym(h, "att_dl_work");
        int want = 0;
        for (int i = 0; i < 10; i++) want += (char)i;
        bad += !work || work(10) != want;
        dlclose(h);
        rounds++;
    }
    printf("rounds>0=%d checked=%s\n", rounds > 0, bad ? "BAD" : "ok");
    return 0;
}

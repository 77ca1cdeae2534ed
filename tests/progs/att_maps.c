/* att_maps STOPFILE: maps and unmaps in pairs until STOPFILE exists, for
 * tests/integration/attach.sh. Each round calls mmap64 (16 KiB) and mmap
 * (8 KiB), writes a byte to each and unmaps both, then sleeps 1 ms every
 * 8 rounds; so a window holds as many mmap calls as munmap calls, half of
 * each size, but for a round cut by the window's edges. Python's allocator
 * and many C programs built with 64-bit file offsets call mmap64: in an
 * attached process it once went unrecorded while its munmap was seen. */
#define _LARGEFILE64_SOURCE 1
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: att_maps STOPFILE\n"); return 2; }
    unsigned long rounds = 0;
    fprintf(stderr, "ready\n");
    while (access(argv[1], F_OK) != 0) {
        char *a = mmap64(NULL, 16384, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char *b = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a == MAP_FAILED || b == MAP_FAILED) return 1;
        a[0] = b[0] = 1;
        munmap(a, 16384);
        munmap(b, 8192);
        if (++rounds % 8 == 0) {
            struct timespec d = { 0, 1000 * 1000 };
            nanosleep(&d, NULL);
        }
    }
    printf("rounds=%s\n", rounds > 0 ? "some" : "none");
    return 0;
}

/* fuzz_util.h — what the libFuzzer harnesses of the analyzer share: the
 * input as a file (for the entry points that take a path: sql, export),
 * kept in a memfd so nothing touches the disk, and /dev/null for text.
 */
#ifndef POOLSCOPE_FUZZ_UTIL_H
#define POOLSCOPE_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* The bytes as a readable path ("/proc/self/fd/N"); -1 on failure. The fd
 * stays open (and is rewritten) from one input to the next. */
static inline int fuzz_input_path(const uint8_t *data, size_t size, char *path, size_t cap)
{
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz-input", 0);
    if (fd < 0) return -1;
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) return -1;
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return 0;
}

static inline FILE *fuzz_null(void)
{
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    return f;
}

#endif

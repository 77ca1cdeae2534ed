/* truth_util.h — what the truth_* programs share: output without stdio (its
 * buffer would be an allocation of its own) and a small deterministic PRNG. */
#ifndef TRUTH_UTIL_H
#define TRUTH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline void die(const char *msg)
{
    if (write(2, msg, strlen(msg)) < 0) _exit(1);
    _exit(1);
}

/* "key=value\n" on stdout, with write(2). */
static inline void put(const char *key, uint64_t v)
{
    char buf[96];
    int n = snprintf(buf, sizeof buf, "%s=%llu\n", key, (unsigned long long)v);
    if (n > 0 && write(1, buf, (size_t)n) != n) _exit(1);
}

/* xorshift64: the same sequence on every run. */
static inline uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#endif

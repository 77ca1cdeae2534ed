/* ownmalloc.c — a program with its own allocator, as one with jemalloc or
 * tcmalloc linked in statically: it defines the malloc family itself, so
 * the loader binds every malloc call (libc's own included) to these, never
 * to a preloaded library's. Small blocks come from a static arena (a bump
 * allocator: free keeps them), blocks of 64 KiB or more from mmap (free
 * unmaps them).
 *
 *   ownmalloc N     N rounds of malloc/calloc/realloc/free, and every
 *                   64th round one block from mmap; prints "calls=C" (the
 *                   malloc-family calls it made) and "mmaps=M" (its mmap
 *                   calls)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ARENA (8u << 20)
#define BIG   (64u << 10)

static _Alignas(64) unsigned char arena[ARENA];
static size_t used;                 /* atomic */
static unsigned long n_calls, n_mmaps;   /* atomic */

/* Before each block: its usable size and the mapping it lies in (NULL: the arena). */
typedef struct hdr { size_t size; void *map; size_t map_len; size_t pad; } hdr_t;

static void *take(size_t size, size_t align)
{
    if (align < 16) align = 16;
    if (size > SIZE_MAX / 2 || align > (1u << 20)) { errno = ENOMEM; return NULL; }
    size_t need = size + align + sizeof(hdr_t);
    unsigned char *base;
    void *map = NULL;
    if (size >= BIG) {
        map = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) { errno = ENOMEM; return NULL; }
        __atomic_add_fetch(&n_mmaps, 1, __ATOMIC_RELAXED);
        base = map;
    } else {
        size_t off = __atomic_fetch_add(&used, need, __ATOMIC_RELAXED);
        if (off + need > ARENA) { errno = ENOMEM; return NULL; }
        base = arena + off;
    }
    uintptr_t p = ((uintptr_t)base + sizeof(hdr_t) + align - 1) & ~(uintptr_t)(align - 1);
    hdr_t *h = (hdr_t *)p - 1;
    h->size = size;
    h->map = map;
    h->map_len = map ? need : 0;
    return (void *)p;
}

/* The compiler knows what malloc returns and would call the header out of
 * bounds: the empty asm hides where p came from. */
static hdr_t *hdr_of(void *p)
{
    __asm__("" : "+r"(p));
    return (hdr_t *)p - 1;
}

void *malloc(size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    return take(size, 16);
}

void free(void *p)
{
    if (!p) return;
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    hdr_t *h = hdr_of(p);
    if (h->map) munmap(h->map, h->map_len);
}

void *calloc(size_t n, size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    if (size && n > SIZE_MAX / size) { errno = ENOMEM; return NULL; }
    void *p = take(n * size, 16);
    if (p) memset(p, 0, n * size);
    return p;
}

void *realloc(void *old, size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    if (!old) return take(size, 16);
    if (!size) { free(old); return NULL; }
    void *p = take(size, 16);
    if (!p) return NULL;
    size_t keep = hdr_of(old)->size;
    memcpy(p, old, keep < size ? keep : size);
    free(old);
    return p;
}

void *reallocarray(void *old, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) { errno = ENOMEM; return NULL; }
    return realloc(old, n * size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    if (!align || (align & (align - 1)) || align % sizeof(void *)) return EINVAL;
    void *p = take(size, align);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    return take(size, align);
}

void *memalign(size_t align, size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    return take(size, align);
}

void *valloc(size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    return take(size, 4096);
}

void *pvalloc(size_t size)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    return take((size + 4095) & ~(size_t)4095, 4096);
}

size_t malloc_usable_size(void *p)
{
    return p ? hdr_of(p)->size : 0;
}

static void *volatile sink;

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    for (int i = 0; i < n; i++) {
        char *a = malloc(16 + (size_t)i % 200);
        char *b = calloc(4, 8);
        a = realloc(a, 300);
        sink = a;
        free(b);
        free(a);
        if (i % 64 == 0) {
            void *big = malloc(BIG + (size_t)i);
            sink = big;
            free(big);
        }
    }
    unsigned long calls = __atomic_load_n(&n_calls, __ATOMIC_RELAXED);
    printf("calls=%lu\nmmaps=%lu\n", calls, __atomic_load_n(&n_mmaps, __ATOMIC_RELAXED));
    return 0;
}

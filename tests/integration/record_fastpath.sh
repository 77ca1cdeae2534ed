# record_fastpath.sh — the malloc/free fast paths (hooks_alloc.c): taken only
# while glibc's allocator is the next one, so the guard need not be held
# across the real call. With another allocator after the tracer in the
# search order (a shim that maps and unmaps a page inside every 64th malloc
# and free, as jemalloc or mimalloc map their own memory), the tracer must
# record the program's calls exactly and none of the allocator's own
# mmap/munmap calls. And with glibc next, the exact counts of churn across
# many ring wraps (every fast record must stay clear of the ring's end).
. tests/integration/lib.sh

cat >"$T/shim.c" <<'C'
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/mman.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static unsigned long n;
/* the allocator's own mapping, through the PLT: the tracer's mmap hook sees it */
static void own_map(void)
{
    if (++n % 64) return;
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) munmap(p, 4096);
}
void *malloc(size_t s) { own_map(); return __libc_malloc(s); }
void free(void *p) { own_map(); __libc_free(p); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t s) { return __libc_realloc(p, s); }
C

other_allocator() {
    cc -std=c11 -O2 -fPIC -shared -o "$T/shim.so" "$T/shim.c" || return 1
    LD_PRELOAD="$PRELOAD $T/shim.so" POOLSCOPE_OUT="$T/shim.pst" POOLSCOPE_STACKS=none \
        "$P/churn" 100000 >"$T/shim.out" || return 1
    "$DUMP" "$T/shim.pst" >"$T/shim.dump" || return 1
    m=$(sed -n 's/^mallocs=\([0-9]*\) .*/\1/p' "$T/shim.out")
    f=$(sed -n 's/.* frees=\([0-9]*\)$/\1/p' "$T/shim.out")
    [ "$(key "$T/shim.dump" malloc)" = "$m" ] && [ "$(key "$T/shim.dump" free)" = "$f" ] &&
        [ "$(key "$T/shim.dump" mmap)" = 0 ] && [ "$(key "$T/shim.dump" munmap)" = 0 ] &&
        [ "$(key "$T/shim.dump" complete)" = 1 ] && [ "$(key "$T/shim.dump" lost)" = 0 ] ||
        { echo "  program: $(cat "$T/shim.out"); trace: $(grep -E '^(malloc|free|mmap|munmap|lost)=' "$T/shim.dump" | tr '\n' ' ')" >&2; return 1; }
}
check other_allocator_calls_not_recorded other_allocator

# 3 M calls: ~12 MB of records, dozens of passes over the 256 KiB ring, for
# each of the three stack modes (the fp and dwarf events leave the fast path)
ring_wraps() { # $1 stacks
    LD_PRELOAD="$PRELOAD" POOLSCOPE_OUT="$T/w$1.pst" POOLSCOPE_STACKS=$1 \
        "$P/churn" 3000000 >"$T/w$1.out" || return 1
    "$DUMP" "$T/w$1.pst" >"$T/w$1.dump" || return 1
    m=$(sed -n 's/^mallocs=\([0-9]*\) .*/\1/p' "$T/w$1.out")
    f=$(sed -n 's/.* frees=\([0-9]*\)$/\1/p' "$T/w$1.out")
    [ "$(key "$T/w$1.dump" malloc)" = "$m" ] && [ "$(key "$T/w$1.dump" free)" = "$f" ] &&
        [ "$(key "$T/w$1.dump" complete)" = 1 ] && [ "$(key "$T/w$1.dump" lost)" = 0 ] ||
        { echo "  program: $(cat "$T/w$1.out"); trace: $(grep -E '^(events|malloc|free|lost|complete)=' "$T/w$1.dump" | tr '\n' ' ')" >&2; return 1; }
}
check ring_wraps_exact_none ring_wraps none
check ring_wraps_exact_fp ring_wraps fp

# A flusher that cannot drain: the program churns inside a dl_iterate_phdr
# callback, which holds the loader lock that the flusher's module poll
# (every 50 ms) waits for: 150 ms asleep there, then 400,000 malloc/free
# pairs (about 2.2 MB of records, below what a 4 MiB ring holds at 7/8).
# The thread's ring must grow rather than be
# written uncompressed by the thread (ring.c, ps_make_room): every event
# recorded, and no uncompressed EVENTS chunk beyond a few small ones
# (rings with less than 256 bytes at a flush round, the flusher's own
# stream). Should the flusher be scheduled and drain all along, there is
# nothing raw either; it fails when the thread writes its ring itself.
cat >"$T/blocked.c" <<'C'
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static unsigned long n_malloc, n_free;
static char obuf[256];   /* stdout's buffer: printf allocates nothing */
static void churn(unsigned long pairs)
{
    void *keep[8] = { 0 };
    for (unsigned long i = 0; i < pairs; i++) {
        void *p = malloc(16 + (i % 64) * 16);
        if (!p) exit(1);
        *(volatile char *)p = 1;
        n_malloc++;
        unsigned k = (unsigned)(i % 8);
        if (keep[k]) { free(keep[k]); n_free++; }
        keep[k] = p;
    }
    for (unsigned k = 0; k < 8; k++) if (keep[k]) { free(keep[k]); n_free++; }
}
static int cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info; (void)size;
    /* long enough for the flusher's next module poll to wait for us */
    struct timespec d = { 0, 150 * 1000 * 1000 };
    nanosleep(&d, NULL);
    churn(*(unsigned long *)arg);
    return 1;   /* the first object only */
}
int main(int argc, char **argv)
{
    unsigned long pairs = argc > 1 ? strtoul(argv[1], 0, 10) : 400000;
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    churn(1000);
    dl_iterate_phdr(cb, &pairs);
    churn(1000);
    printf("mallocs=%lu frees=%lu\n", n_malloc, n_free);
    return 0;
}
C
flusher_blocked() {
    cc -std=c11 -O2 -o "$T/blocked" "$T/blocked.c" || return 1
    LD_PRELOAD="$PRELOAD" POOLSCOPE_OUT="$T/bl.pst" POOLSCOPE_STACKS=none "$T/blocked" 400000 >"$T/bl.out" || return 1
    "$DUMP" "$T/bl.pst" >"$T/bl.dump" || return 1
    "$P/pstcols" "$T/bl.pst" >"$T/bl.cols" || return 1
    m=$(sed -n 's/^mallocs=\([0-9]*\) .*/\1/p' "$T/bl.out")
    f=$(sed -n 's/.* frees=\([0-9]*\)$/\1/p' "$T/bl.out")
    [ "$(key "$T/bl.dump" malloc)" = "$m" ] && [ "$(key "$T/bl.dump" free)" = "$f" ] &&
        [ "$(key "$T/bl.dump" complete)" = 1 ] && [ "$(key "$T/bl.dump" lost)" = 0 ] &&
        [ "$(key "$T/bl.cols" raw_events_max)" -lt 4096 ] ||
        { echo "  program: $(cat "$T/bl.out"); trace: $(grep -E '^(events|malloc|free|lost|complete)=' "$T/bl.dump" | tr '\n' ' ') $(tr '\n' ' ' <"$T/bl.cols")" >&2; return 1; }
}
check flusher_blocked_ring_grows_nothing_raw flusher_blocked

# The one-thread fast path (hooks_alloc.c, fast1) records on a budget
# counted ahead into the stream's since_ts (preload.h, ps_fast_refill).
# A second thread started while the main thread holds a budget: from then
# on both take versions on the other fast path, the main thread's budget
# must be given back at its next general record, and blocks the main
# thread allocated on the budget are freed by the new thread (cross-thread
# frees: versions). Each round of 5000 pairs (about 78 budgets) is cut at
# an odd count, so the second thread starts in the middle of one. Every
# call recorded, no block unknown to the reader, nothing leaked but the
# new thread's TLS block (glibc's calloc in pthread_create, kept to the
# end), under both the fast path (none) and the stacks one (fp).
cat >"$T/handover.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long n_malloc, n_free;   /* main thread only, before and after the join */
static void *handed[64];
static unsigned long t_malloc, t_free;
static char obuf[256];   /* stdout's buffer: printf allocates nothing */
static void churn(unsigned long pairs, unsigned long *nm, unsigned long *nf)
{
    for (unsigned long i = 0; i < pairs; i++) {
        void *p = malloc(16 + (i % 37) * 16);
        if (!p) exit(1);
        *(volatile char *)p = 1;
        ++*nm;
        free(p);
        ++*nf;
    }
}
static void *thread_main(void *arg)
{
    (void)arg;
    for (int k = 0; k < 64; k++) { free(handed[k]); t_free++; }   /* the main thread's blocks */
    churn(5003, &t_malloc, &t_free);
    return NULL;
}
int main(void)
{
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    churn(4999, &n_malloc, &n_free);
    for (int k = 0; k < 64; k++) { if (!(handed[k] = malloc(100 + k))) return 1; n_malloc++; }
    churn(7, &n_malloc, &n_free);   /* a budget half used */
    pthread_t th;
    if (pthread_create(&th, NULL, thread_main, NULL)) return 1;
    churn(5001, &n_malloc, &n_free);
    pthread_join(th, NULL);
    churn(4997, &n_malloc, &n_free);
    printf("mallocs=%lu frees=%lu\n", n_malloc + t_malloc, n_free + t_free);
    return 0;
}
C
handover() { # $1 stacks
    [ -x "$T/handover" ] || cc -std=c11 -O2 -pthread -o "$T/handover" "$T/handover.c" || return 1
    rm -f "$T/ho$1.pst"
    "$PS" record --stacks "$1" -o "$T/ho$1.pst" -- "$T/handover" >"$T/ho$1.out" 2>"$T/ho$1.err" || return 1
    "$DUMP" "$T/ho$1.pst" >"$T/ho$1.dump" || return 1
    "$PS" report --json "$T/ho$1.pst" >"$T/ho$1.json" || return 1
    m=$(sed -n 's/^mallocs=\([0-9]*\) .*/\1/p' "$T/ho$1.out")
    f=$(sed -n 's/.* frees=\([0-9]*\)$/\1/p' "$T/ho$1.out")
    [ "$(key "$T/ho$1.dump" malloc)" = "$m" ] && [ "$(key "$T/ho$1.dump" free)" = "$f" ] &&
        [ "$(key "$T/ho$1.dump" complete)" = 1 ] && [ "$(key "$T/ho$1.dump" lost)" = 0 ] &&
        grep -q '"unknown_frees": 0,' "$T/ho$1.json" && grep -Eq '"leaked_objects": [01],' "$T/ho$1.json" &&
        grep -q '"threads": 2,' "$T/ho$1.json" ||
        { echo "  program: $(cat "$T/ho$1.out"); trace: $(grep -E '^(events|malloc|free|lost|complete)=' "$T/ho$1.dump" | tr '\n' ' ') $(grep -E 'unknown_frees|leaked_objects|"threads"' "$T/ho$1.json" | tr -d '\n ')" >&2; return 1; }
}
check budget_handed_over_to_second_thread_none handover none
check budget_handed_over_to_second_thread_fp handover fp
exit $status

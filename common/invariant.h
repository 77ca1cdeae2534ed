/* invariant.h — the debug build's internal checks (internal, prefix psc_).
 *
 * `make debug` compiles the tree with -DPS_DEBUG=1. Then every pool
 * operation ends by running the pool's invariant walker under its lock, the
 * model checks its own state after every event, and the reader checks each
 * event pst_next hands out. A broken invariant aborts at once with one line
 * naming it, so a corrupted free list is caught by the operation that broke
 * it rather than by a wrong figure three reports later.
 *
 * In every other build PS_DEBUG is 0 and the macros below expand to
 * nothing: the checks' arguments are not even evaluated, so they cost
 * nothing. (A library never aborts on a user error; these fire only when
 * the library's own state is wrong.)
 *
 * PS_DEBUG_EVERY=k in the environment runs the walkers on every k-th
 * operation of a pool or model only (default 1: every one), for a test
 * that makes so many operations that an O(n) walk each time would be slow.
 */
#ifndef PSC_INVARIANT_H
#define PSC_INVARIANT_H

#ifndef PS_DEBUG
#define PS_DEBUG 0
#endif

#if PS_DEBUG
#include <stdio.h>
#include <stdlib.h>

/* "poolscope: invariant broken in buffer pool 'x': <what>", then abort(). */
__attribute__((noreturn, cold, unused))
static void psc_invariant_failed(const char *where, const char *name, const char *what)
{
    fprintf(stderr, "poolscope: invariant broken in %s%s%s%s: %s\n", where,
            name && *name ? " '" : "", name && *name ? name : "", name && *name ? "'" : "", what);
    fflush(stderr);
    abort();
}

/* The walkers' period: PS_DEBUG_EVERY, read once per pool or model. */
__attribute__((unused))
static unsigned psc_debug_every(void)
{
    const char *s = getenv("PS_DEBUG_EVERY");
    long k = s ? strtol(s, NULL, 10) : 1;
    return k >= 1 && k <= 1000000 ? (unsigned)k : 1;
}

/* 1 when this operation's walk is due: *count counts operations (kept
 * under the lock the walk takes), every is psc_debug_every()'s answer. */
static inline int psc_debug_due(unsigned *count, unsigned every)
{
    if (++*count < every)
        return 0;
    *count = 0;
    return 1;
}

/* why: an expression giving NULL when the state is sound, else the broken
 * invariant's description. */
#define PSC_VERIFY(where, name, why) do {                                   \
        const char *psc_why_ = (why);                                         \
        if (psc_why_) psc_invariant_failed((where), (name), psc_why_);        \
    } while (0)
/* One condition; what names it. */
#define PSC_ASSERT(where, name, cond, what) do {                            \
        if (!(cond)) psc_invariant_failed((where), (name), (what));           \
    } while (0)
#else
#define PSC_VERIFY(where, name, why) ((void)0)
#define PSC_ASSERT(where, name, cond, what) ((void)0)
#endif

#endif

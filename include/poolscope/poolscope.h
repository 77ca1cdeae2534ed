/* poolscope.h — the event API: how a pool, an engine or any program
 * describes its own memory to poolscope.
 *
 * Link with -lpstrace (`pkg-config --libs poolscope` once installed). Every call costs
 * one predictable branch when the program is not running under
 * `poolscope record`: the table of entry points lives in the preload library
 * and is looked up once, at load time, with dlsym(RTLD_DEFAULT) — which works
 * in PIE and non-PIE executables alike (a weak reference would be resolved to
 * 0 at link time in a non-PIE executable).
 *
 * Numbers are the trace format's (include/poolscope/format.h): an event is its type
 * and its fields in the order of its layout. Strings are copied (interned) by
 * the tracer; block-id and payload arrays are read during the call only.
 *
 * C and C++: the header compiles as C11 and as C++11 and later with
 * -Wall -Wextra -Werror (tests/integration/install.sh builds
 * tests/cxx/api_link.cpp against the installed package). Names with the
 * prefix ps__ are internal: they are part of the ABI the inline functions
 * below compile into, not an API to call.
 */
#ifndef POOLSCOPE_H
#define POOLSCOPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PS_API_VERSION 1

/* What crosses from the program to the tracer: one event. */
typedef struct ps_event {
    uint32_t type;             /* a PST_EV_* number (format.h), e.g. PS_TENSOR_ACQUIRE */
    uint32_t n_fields;         /* entries used in f[] */
    uint64_t f[10];            /* fields in layout order (S fields: ignored, use name) */
    const char *name;          /* the S field, if the layout has one */
    const uint32_t *ids;       /* the L field */
    uint32_t n_ids;
    const int64_t *payload;    /* the P field */
    uint32_t n_payload;
} ps_event_t;

/* ---- internal: not a stable API ---------------------------------------------
 * The table the preload library exports under the symbol "poolscope_api",
 * and the pointer to it that the inline functions test. Their layout is
 * ABI (an older program must keep working with a newer tracer); call the
 * functions below instead of using them. */
typedef struct ps_api {
    uint32_t version;                      /* PS_API_VERSION */
    uint32_t size;                         /* sizeof(ps_api_t) of the tracer */
    void (*emit)(const ps_event_t *ev);    /* record one event in the calling thread's stream */
    void (*enable)(int on);                /* selective tracing: 0 pause, 1 resume (whole process) */
    int  (*enabled)(void);                 /* 1 while recording */
    /* Appended after the first release (a table without it is smaller: an
     * older tracer). Everything recorded so far goes to the trace file
     * before it returns: 0, or -1 (no file, closing, timed out). */
    int  (*flush)(void);
    /* Appended with attach: a number that changes whenever this process
     * starts a new trace file (an attach, a fork child's own file). The
     * pool adapter names a pool it has not named in the current trace at
     * the pool's first event there. */
    uint64_t (*session)(void);
} ps_api_t;

/* NULL unless the preload library is loaded. Resolved once by a constructor
 * in libtrace/api.c; read-only afterwards. */
extern const ps_api_t *ps__api;

/* An event of `type` with every other member zero. Members are set one by
 * one below: designated initializers are C++20 only, and a partial brace
 * list warns under -Wmissing-field-initializers in C++. */
static inline ps_event_t ps__event(uint32_t type)
{
    ps_event_t ev = { type, 0, { 0 }, NULL, NULL, 0, NULL, 0 };
    return ev;
}
/* ---- end of internal ------------------------------------------------------- */

/* Event numbers used by the helpers below (the same as format.h's). */
enum {
    PS_TENSOR_ACQUIRE = 20, PS_TENSOR_RELEASE = 21,
    PS_POOL_CREATE = 24, PS_POOL_ACQUIRE = 25, PS_POOL_RECLAIM = 26,
    PS_POOL_BACKING_ALLOC = 27, PS_POOL_BACKING_FREE = 28, PS_POOL_DESTROY = 29,
    PS_KVB_CREATE = 32, PS_KVB_ALLOC = 33, PS_KVB_TOKENS = 34, PS_KVB_FREE = 35,
    PS_KVB_GROW = 36, PS_KVB_SHRINK = 37, PS_KVB_EXHAUSTED = 38, PS_KVB_OWNER = 39,
    PS_KVB_DESTROY = 40,
    PS_MARK_POINT = 44, PS_MARK_BEGIN = 45, PS_MARK_END = 46,
    PS_THREAD_NAME = 52,
};

/* True when a tracer is present: one load and one predictable branch. */
static inline int ps_active(void) { return __builtin_expect(ps__api != 0, 0); }

static inline void ps_emit(const ps_event_t *ev)
{
    if (ps_active()) ps__api->emit(ev);
}

/* Markers. Scopes may overlap (batched requests): begin and end carry the
 * instance id. The payload is up to 8 signed values, e.g. for "request":
 * prompt length and max tokens. */
static inline void ps_mark(const char *name, const int64_t *payload, uint32_t n)
{
    if (ps_active()) {
        ps_event_t ev = ps__event(PS_MARK_POINT);
        ev.name = name;
        ev.payload = payload;
        ev.n_payload = n;
        ps__api->emit(&ev);
    }
}
static inline void ps_begin(const char *name, uint64_t instance, const int64_t *payload, uint32_t n)
{
    if (ps_active()) {
        ps_event_t ev = ps__event(PS_MARK_BEGIN);
        ev.n_fields = 2;
        ev.f[1] = instance;       /* f[0] is the S field: ignored, name carries it */
        ev.name = name;
        ev.payload = payload;
        ev.n_payload = n;
        ps__api->emit(&ev);
    }
}
static inline void ps_end(const char *name, uint64_t instance)
{
    if (ps_active()) {
        ps_event_t ev = ps__event(PS_MARK_END);
        ev.n_fields = 2;
        ev.f[1] = instance;
        ev.name = name;
        ps__api->emit(&ev);
    }
}

/* Logical tensors: the engine's allocation layer, the same in every
 * allocation mode. `arm` 0 = f32 arm, 1 = byte-slab arm; dtype as in
 * bufpool.h. Release when the last reference goes, not per view. */
static inline void ps_tensor_acquire(uint64_t id, uint32_t arm, uint32_t dtype,
                                     uint64_t n_elems, uint64_t bytes)
{
    if (ps_active()) {
        ps_event_t ev = ps__event(PS_TENSOR_ACQUIRE);
        ev.n_fields = 5;
        ev.f[0] = id;
        ev.f[1] = arm;
        ev.f[2] = dtype;
        ev.f[3] = n_elems;
        ev.f[4] = bytes;
        ps__api->emit(&ev);
    }
}
static inline void ps_tensor_release(uint64_t id)
{
    if (ps_active()) {
        ps_event_t ev = ps__event(PS_TENSOR_RELEASE);
        ev.n_fields = 1;
        ev.f[0] = id;
        ps__api->emit(&ev);
    }
}

/* Name the calling thread in the trace. */
static inline void ps_thread_name(const char *name)
{
    if (ps_active()) {
        ps_event_t ev = ps__event(PS_THREAD_NAME);
        ev.name = name;
        ps__api->emit(&ev);
    }
}

/* Selective tracing: pause and resume recording of the whole process (also
 * possible from outside with the signal that `poolscope record` documents). */
static inline void ps_trace_enable(int on) { if (ps_active()) ps__api->enable(on); }

/* Write everything recorded so far (every thread's events) to the trace
 * file now, and wait until it is there, e.g. before reading the unfinished
 * trace with `poolscope report` from the traced program itself. 0 done, -1
 * without a tracer or when it could not (the trace is closing). Blocks for
 * about a tick of the tracer's flusher (100 us) plus the write. */
static inline int ps_trace_flush(void) { return ps_active() && ps__api->flush ? ps__api->flush() : -1; }

#ifdef __cplusplus
}
#endif
#endif

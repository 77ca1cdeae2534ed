/* api.c — the client side of the event API (poolscope.h).
 *
 * A program that annotates itself links libpstrace and calls the inline
 * helpers of poolscope.h; each of them tests one pointer, ps__api. That
 * pointer is filled once, by the constructor below, from the table the
 * preload library exports as "poolscope_api". The lookup goes through
 * dlsym(RTLD_DEFAULT) rather than a weak symbol reference because in a
 * non-PIE executable the linker resolves an undefined weak reference to 0
 * for good; a run-time lookup finds the table in PIE and non-PIE alike.
 *
 * A table whose version differs, or which is smaller than this build's
 * ps_api_t, is ignored (ps__api stays NULL): an older tracer must never be
 * called through entry points it does not have.
 *
 * This is the one mutable global of the API side, written before main()
 * runs and only read afterwards.
 */
#include <dlfcn.h>
#include <stddef.h>

#include "poolscope/poolscope.h"

const ps_api_t *ps__api;

/* Not in poolscope.h (internal, used by tests/test_api.c):
 * ps__api_usable: is this table one this build may call?
 * ps__api_resolve: look the table up again (for a program that dlopens the
 * tracer late); returns 1 when a usable one was found. Not thread-safe with
 * concurrent emitters: call it before any thread emits. */
int ps__api_usable(const ps_api_t *t);
int ps__api_resolve(void);

int ps__api_usable(const ps_api_t *t)
{
    return t && t->version == PS_API_VERSION && t->size >= sizeof(ps_api_t) &&
           t->emit && t->enable && t->enabled;
}

int ps__api_resolve(void)
{
    const ps_api_t *t = (const ps_api_t *)dlsym(RTLD_DEFAULT, "poolscope_api");
    ps__api = ps__api_usable(t) ? t : NULL;
    return ps__api != NULL;
}

__attribute__((constructor)) static void ps__api_init(void)
{
    (void)ps__api_resolve();
}

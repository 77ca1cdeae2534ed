/* phase_frame.h — phases from call stacks (prefix az_pf_): `--phase-frame
 * FUNC[=NAME]` makes each dynamic call of FUNC a scope named NAME (FUNC
 * when no NAME is given), for a program that carries no markers.
 *
 * The rule. Only events with a recorded stack are evidence (allocations
 * and mmaps; frees carry no stack). For each thread, an event whose stack
 * holds FUNC (a displayed frame, inlined ones included, whose function
 * without its parameters is FUNC or ends in "::FUNC", a Python frame's
 * qualified name FUNC or ending in ".FUNC"; the outermost such
 * frame when FUNC recurses) is inside a call of FUNC; the call is the same
 * as the thread's previous one while the thread's stacked events keep
 * holding FUNC with the same callers (the recorded frames outside FUNC's).
 * A call ends just before the thread's first stacked event outside it
 * (or with other callers), at the thread's end, or at the end of the trace.
 *
 * The limits. Two calls with nothing stacked between them on that thread
 * (FUNC called in a loop that allocates nothing outside it) read as one
 * call; a call that allocates nothing is not seen; time between the last
 * stacked event in a call and the first one outside it counts as inside.
 * A trace recorded with --stacks none has no evidence: az_pf_create
 * accepts it, and the scan reports that no stack held FUNC.
 *
 * A FUNC the recorder hooked (`record --scope-function`, the header's
 * SCOPE_FUNCS) is not inferred: its recorded scopes are its calls, exact
 * (repeated under NAME when NAME is another name).
 *
 * The scopes are fed to the model as MARK_BEGIN / MARK_END events before
 * the event that opens or closes them, so every output that reads markers
 * (phases, decode steps, --phase) reads them as it reads markers.
 */
#ifndef POOLSCOPE_PHASE_FRAME_H
#define POOLSCOPE_PHASE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "poolscope/reader.h"

#define AZ_PF_MAX 16                 /* --phase-frame options at once */
/* String ids of the synthetic scopes' names: past any id a trace defines. */
#define AZ_PF_STRING_BASE 0xffffff00u

typedef struct az_pf az_pf_t;

/* specs: "FUNC" or "FUNC=NAME". NULL with a message for a bad spec. The
 * reader must stay open while the az_pf_t is used (stacks, modules). */
az_pf_t *az_pf_create(pst_reader_t *r, const char *const *specs, size_t n, char *msg, size_t msglen);
void az_pf_destroy(az_pf_t *pf);                   /* accepts NULL */

/* Does az_pf_before want to see ev? Stacked events, thread ends and markers. */
static inline int az_pf_wants(const pst_event_t *ev)
{
    return ev->stack || ev->type == PST_EV_THREAD_END || ev->type == PST_EV_MARK_BEGIN ||
           ev->type == PST_EV_MARK_END;
}

/* The scope events to take before ev (ends first, then begins), at most
 * 2 * AZ_PF_MAX; returns how many. Their str points into pf. */
size_t az_pf_before(az_pf_t *pf, const pst_event_t *ev, pst_event_t *out);
/* Ends of open scopes at time t (the end of the trace), at most
 * 2 * AZ_PF_MAX per call: call until it returns 0. */
size_t az_pf_finish(az_pf_t *pf, uint64_t t, pst_event_t *out);
/* The name of a synthetic string id, or NULL. */
const char *az_pf_string(const az_pf_t *pf, uint32_t id);
/* Did some stack hold rule i's FUNC? For the message when none did. */
int az_pf_seen(const az_pf_t *pf, size_t i, const char **func);
size_t az_pf_count(const az_pf_t *pf);

#endif

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
 * Calls that may have merged. An instance's first stacked event is its
 * call's first allocation; its "inner stack" is FUNC's frame (where in
 * FUNC) and the frames inside it. When that first inner stack comes back
 * later in the same instance, FUNC either looped back to it or was called
 * again: the stacks cannot tell which (a loop around the call and a loop
 * in it leave the same frames). The instances of one call site (rule and
 * callers) are compared: an instance whose first inner stack came back
 * (k >= 2 times) is counted as looking like repeated calls when it is the
 * only instance of its call site, or when another instance of that site
 * had it fewer times. So a function that loops in every call (forward()
 * allocating per layer, called with allocations between calls) is not
 * counted: its instances all repeat the same number of times. What it
 * catches: a loop that calls FUNC with nothing allocated between (one
 * instance, or instances of more calls than the fewest). What it cannot:
 * a caller that always makes the same number of calls with nothing
 * allocated between them (every instance then holds that many: read as
 * FUNC's own loop); calls whose first allocation's stack is not the
 * first call's (the reference engine's re_engine_step: its first call
 * admits the requests, the later ones only decode, so 107 calls read as
 * one instance that is not counted). A false alarm: a function whose
 * first allocation is in a loop that runs a different number of times
 * from call to call, or that is called once from its call site.
 * After az_pf_finish returned 0, az_pf_merged(pf, i) is how many of rule
 * i's instances look like repeated calls, and az_pf_string(pf,
 * AZ_PF_NOTE_BASE + i) says so ("calls of FUNC may have merged: N
 * instances look like repeated calls (...)"), NULL when none does; a
 * scan's az_scan_string reads it too, so az_pf_notes_json/_text write a
 * scan's notes for report and gate.
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
#include <stdio.h>

#include "poolscope/reader.h"

#define AZ_PF_MAX 16                 /* --phase-frame options at once */
/* String ids of the synthetic scopes' names: past any id a trace defines;
 * rule i's note (calls that may have merged) at AZ_PF_NOTE_BASE + i. */
#define AZ_PF_STRING_BASE 0xffffff00u
#define AZ_PF_NOTE_BASE   (AZ_PF_STRING_BASE + AZ_PF_MAX)

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
/* The name of a synthetic string id (or a note, above), or NULL. */
const char *az_pf_string(const az_pf_t *pf, uint32_t id);
/* After the last az_pf_finish: rule i's instances that look like repeated
 * calls (0 for a FUNC the recorder hooked: its calls are exact). */
uint64_t az_pf_merged(const az_pf_t *pf, size_t i);

/* A scan's notes (scan.h; az_scan_string reads them), for the outputs:
 * the JSON member "phase_frame_notes": [{"phase": NAME, "note": NOTE}...]
 * (empty without one), and one line per note after prefix (text escaped,
 * common/escape.h), returning how many. */
struct az_scan;
struct az_json;
void az_pf_notes_json(const struct az_scan *s, struct az_json *j);
size_t az_pf_notes_text(const struct az_scan *s, FILE *out, const char *prefix);
/* Did some stack hold rule i's FUNC? For the message when none did. */
int az_pf_seen(const az_pf_t *pf, size_t i, const char **func);
size_t az_pf_count(const az_pf_t *pf);

#endif

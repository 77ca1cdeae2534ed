/* phase_frame.c — phases from call stacks (see phase_frame.h).
 *
 * Per distinct stack id, once: symbolize it and note, for each rule, the
 * recorded frame that holds FUNC and a hash of the frames outside it. Per
 * stacked event: one hashed lookup of the stack id and one of the thread.
 * Per instance that ends: one or two lookups for the merge check (its
 * first inner stack's repeats by call site); the notes at the last
 * az_pf_finish.
 *
 * A FUNC whose calls the recorder saw (`record --scope-function`, the
 * header's SCOPE_FUNCS) needs no inference: its recorded scopes are the
 * calls, exact, and the stacks are not looked at for it; under another
 * NAME each recorded begin and end is repeated under NAME.
 */
#include "phase_frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "hashmap.h"
#include "json.h"
#include "poolscope/error.h"
#include "scan.h"
#include "symbolize.h"

#define PF_FRAMES 512                /* displayed frames looked at per stack */

typedef struct rule {
    char func[256], name[256];
    char recorded[256];          /* the recorder's scope name for FUNC, "" when it had none */
    char note[640];              /* after the scan: "calls of FUNC may have merged: ..." */
    uint64_t next_instance;
    uint64_t merged;             /* after the scan: instances that look like repeated calls */
    int seen;
} rule_t;

/* Where a stack holds a rule's FUNC: held 0 when it does not. callers:
 * a hash of the frames outside FUNC; inner: of FUNC's frame and the ones
 * inside it (where in the call the event is). */
typedef struct where { uint64_t callers, inner; uint32_t held; uint32_t pad_; } where_t;

typedef struct thr {
    uint64_t instance[AZ_PF_MAX];
    uint64_t callers[AZ_PF_MAX];
    uint64_t first[AZ_PF_MAX];   /* the open instance's first inner stack */
    uint64_t repeats[AZ_PF_MAX]; /* how often it came (1: once) */
    uint8_t  open[AZ_PF_MAX];
} thr_t;

/* The merge check (phase_frame.h, "Calls that may have merged"): per call
 * site (rule, callers), the instances seen and the fewest repeats of an
 * instance's first inner stack; per (call site, repeats), how many. */
typedef struct site { uint64_t instances, min_repeats; } site_t;
typedef struct reps { uint64_t site, repeats, count; uint32_t rule, pad_; } reps_t;

struct az_pf {
    pst_reader_t *r;
    rule_t rules[AZ_PF_MAX];
    size_t n;
    az_sym_t *sym;
    size_t n_mods;               /* modules the symbolizer was made with */
    psc_map_t stacks;            /* stack id -> where_t[n] */
    psc_map_t threads;           /* stream id -> thr_t */
    psc_map_t sites;             /* hash(rule, callers) -> site_t */
    psc_map_t reps;              /* hash(rule, callers, repeats) -> reps_t */
    int ended;                   /* az_pf_finish closed everything: the notes are made */
    az_frame_t frames[PF_FRAMES];
};

/* The recorder's "FUNC=NAME\0" list: the rule's FUNC recorded as a scope? */
static void recorded_name(const pst_header_t *h, rule_t *rule)
{
    const char *p = h ? h->scope_funcs : NULL, *end = p ? p + h->scope_funcs_len : NULL;
    size_t fl = strlen(rule->func);
    while (p && p < end) {
        size_t n = strnlen(p, (size_t)(end - p));
        if (n > fl && !strncmp(p, rule->func, fl) && p[fl] == '=' && n - fl - 1 < sizeof rule->recorded) {
            memcpy(rule->recorded, p + fl + 1, n - fl - 1);
            rule->recorded[n - fl - 1] = 0;
            rule->seen = 1;
            return;
        }
        p += n + 1;
    }
}

az_pf_t *az_pf_create(pst_reader_t *r, const char *const *specs, size_t n, char *msg, size_t msglen)
{
    if (n > AZ_PF_MAX) {
        snprintf(msg, msglen, "at most %d --phase-frame options", AZ_PF_MAX);
        return NULL;
    }
    az_pf_t *pf = calloc(1, sizeof *pf);
    if (!pf) { snprintf(msg, msglen, "out of memory"); return NULL; }
    pf->r = r;
    pf->n = n;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(specs[i], '=');
        size_t fl = eq ? (size_t)(eq - specs[i]) : strlen(specs[i]);
        const char *name = eq ? eq + 1 : specs[i];
        if (fl == 0 || fl >= sizeof pf->rules[i].func || !*name || strlen(name) >= sizeof pf->rules[i].name) {
            snprintf(msg, msglen, "--phase-frame '%s': want FUNC or FUNC=NAME", specs[i]);
            az_pf_destroy(pf);
            return NULL;
        }
        memcpy(pf->rules[i].func, specs[i], fl);
        snprintf(pf->rules[i].name, sizeof pf->rules[i].name, "%s", name);
        recorded_name(pst_header(r), &pf->rules[i]);
    }
    if (psc_map_init(&pf->stacks, n * sizeof(where_t), 256, 0, NULL) ||
        psc_map_init(&pf->threads, sizeof(thr_t), 16, 0, NULL) ||
        psc_map_init(&pf->sites, sizeof(site_t), 16, 0, NULL) ||
        psc_map_init(&pf->reps, sizeof(reps_t), 16, 0, NULL)) {
        snprintf(msg, msglen, "out of memory");
        az_pf_destroy(pf);
        return NULL;
    }
    return pf;
}

void az_pf_destroy(az_pf_t *pf)
{
    if (!pf) return;
    az_sym_destroy(pf->sym);
    psc_map_free(&pf->stacks);
    psc_map_free(&pf->threads);
    psc_map_free(&pf->sites);
    psc_map_free(&pf->reps);
    free(pf);
}

/* Does a displayed function name, without its parameters, name func? A
 * C++ name ends in "::func"; a Python frame's qualified name in ".func"
 * (Model.forward, outer.<locals>.inner). */
static int names(const char *function, const char *func, int python)
{
    if (!function) return 0;
    size_t n = 0;
    int angle = 0;
    for (; function[n]; n++) {                 /* up to the '(' outside template brackets */
        if (function[n] == '<') angle++;
        else if (function[n] == '>' && angle) angle--;
        else if (function[n] == '(' && !angle && n) break;
    }
    size_t fl = strlen(func);
    if (n == fl && !strncmp(function, func, fl)) return 1;
    if (python) return n > fl + 1 && !strncmp(function + n - fl, func, fl) && function[n - fl - 1] == '.';
    return n > fl + 2 && !strncmp(function + n - fl, func, fl) && function[n - fl - 1] == ':' &&
           function[n - fl - 2] == ':';
}

/* The rules' places in stack id (computed once). NULL when out of memory. */
static const where_t *where_of(az_pf_t *pf, uint32_t id)
{
    const size_t vsize = pf->n * sizeof(where_t);
    where_t *w = psc_map_get(&pf->stacks, id);
    if (w) return w;
    int is_new;
    w = psc_map_put(&pf->stacks, id, &is_new);
    if (!w) return NULL;
    memset(w, 0, vsize);
    uint32_t depth = 0;
    const uint64_t *pcs = pst_stack(pf->r, id, &depth);
    if (!pcs || !depth) return w;
    size_t n_mods = 0;
    pst_modules(pf->r, &n_mods);
    if (!pf->sym || n_mods != pf->n_mods) {     /* a library loaded since: look again */
        az_sym_destroy(pf->sym);
        pf->sym = az_sym_open(pf->r);
        pf->n_mods = n_mods;
        if (!pf->sym) return w;
    }
    size_t nf = az_sym_stack(pf->sym, pcs, depth, pf->frames, PF_FRAMES);
    if (nf > PF_FRAMES) nf = PF_FRAMES;
    for (size_t i = 0; i < pf->n; i++) {
        for (size_t k = nf; k-- > 0;) {          /* outermost first: FUNC's outermost call */
            if (!names(pf->frames[k].function, pf->rules[i].func, pf->frames[k].python)) continue;
            uint32_t level = pf->frames[k].level;
            uint64_t h = 0xcbf29ce484222325ull ^ (depth - level), in = 0xcbf29ce484222325ull ^ level;
            for (uint32_t j = level + 1; j < depth; j++) h = (h ^ pcs[j]) * 0x100000001b3ull;
            for (uint32_t j = 0; j <= level && j < depth; j++) in = (in ^ pcs[j]) * 0x100000001b3ull;
            if (pf->rules[i].recorded[0]) break;   /* its calls are recorded */
            w[i] = (where_t){ .callers = h, .inner = in, .held = 1 };
            pf->rules[i].seen = 1;
            break;
        }
    }
    return w;
}

static thr_t *thread_of(az_pf_t *pf, uint32_t stream)
{
    int is_new;
    thr_t *t = psc_map_put_sz(&pf->threads, stream, &is_new, sizeof(thr_t));
    if (t && is_new) memset(t, 0, sizeof *t);
    return t;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Thread t's instance of rule i ends: count it for the merge check. Out
 * of memory loses the instance from the check, never a scope. */
static void instance_ended(az_pf_t *pf, size_t i, const thr_t *t)
{
    int is_new;
    uint64_t key = mix(t->callers[i], i + 1);
    site_t *st = psc_map_put(&pf->sites, key, &is_new);
    if (!st) return;
    if (is_new) *st = (site_t){ 0, t->repeats[i] };
    st->instances++;
    if (t->repeats[i] < st->min_repeats) st->min_repeats = t->repeats[i];
    if (t->repeats[i] < 2) return;            /* its first stack came once: one call, as far as stacks tell */
    reps_t *rp = psc_map_put(&pf->reps, mix(key, t->repeats[i]), &is_new);
    if (!rp) return;
    if (is_new) *rp = (reps_t){ .site = key, .repeats = t->repeats[i], .rule = (uint32_t)i };
    rp->count++;
}

/* After the last instance ended: each rule's merged count and note. An
 * instance is counted when its first inner stack came back (repeats >= 2)
 * and it is the only instance of its call site, or another instance of
 * that site repeated it fewer times. */
static void make_notes(az_pf_t *pf)
{
    size_t it = 0;
    uint64_t key;
    void *v;
    while (psc_map_next(&pf->reps, &it, &key, &v)) {
        const reps_t *rp = v;
        const site_t *st = psc_map_get(&pf->sites, rp->site);
        if (st && (st->instances == 1 || rp->repeats > st->min_repeats)) pf->rules[rp->rule].merged += rp->count;
    }
    for (size_t i = 0; i < pf->n; i++) {
        rule_t *r = &pf->rules[i];
        if (!r->merged) continue;
        snprintf(r->note, sizeof r->note,
                 "calls of %s may have merged: %llu instance%s like repeated calls (phase '%s', %llu scope%s; "
                 "the stacks do not show where one call ends: record with --scope-function %s or add markers)",
                 r->func, (unsigned long long)r->merged, r->merged == 1 ? " looks" : "s look", r->name,
                 (unsigned long long)r->next_instance, r->next_instance == 1 ? "" : "s", r->func);
    }
}

static void mark(const az_pf_t *pf, size_t i, int type, uint64_t instance, const pst_event_t *at, pst_event_t *out)
{
    memset(out, 0, sizeof *out);
    out->type = (uint8_t)type;
    out->stream = at->stream;
    out->tid = at->tid;
    out->ts = at->ts;
    out->f[0] = AZ_PF_STRING_BASE + (uint32_t)i;
    out->f[1] = instance;
    out->str = pf->rules[i].name;
}

size_t az_pf_before(az_pf_t *pf, const pst_event_t *ev, pst_event_t *out)
{
    size_t k = 0;
    if ((ev->type == PST_EV_MARK_BEGIN || ev->type == PST_EV_MARK_END) && ev->str) {
        for (size_t i = 0; i < pf->n; i++)   /* a recorded call under another name */
            if (pf->rules[i].recorded[0] && !strcmp(ev->str, pf->rules[i].recorded) &&
                strcmp(pf->rules[i].name, pf->rules[i].recorded))
                mark(pf, i, ev->type, ev->f[1], ev, &out[k++]);
        return k;
    }
    if (ev->type == PST_EV_THREAD_END) {         /* the thread's calls end with it */
        thr_t *t = psc_map_get_sz(&pf->threads, ev->stream, sizeof(thr_t));
        for (size_t i = 0; t && i < pf->n; i++)
            if (t->open[i]) {
                mark(pf, i, PST_EV_MARK_END, t->instance[i], ev, &out[k++]);
                t->open[i] = 0;
                instance_ended(pf, i, t);
            }
        return k;
    }
    if (!ev->stack) return 0;                    /* no evidence */
    const where_t *w = where_of(pf, ev->stack);
    thr_t *t = thread_of(pf, ev->stream);
    if (!w || !t) return 0;
    /* ends first (a call left, or another call of FUNC from elsewhere), then begins */
    for (size_t i = 0; i < pf->n; i++) {
        if (!t->open[i]) continue;
        if (!w[i].held || w[i].callers != t->callers[i]) {
            mark(pf, i, PST_EV_MARK_END, t->instance[i], ev, &out[k++]);
            t->open[i] = 0;
            instance_ended(pf, i, t);
        } else if (w[i].inner == t->first[i]) {
            t->repeats[i]++;                     /* the call's first stack again: a loop, or another call */
        }
    }
    for (size_t i = 0; i < pf->n; i++)
        if (w[i].held && !t->open[i] && !pf->rules[i].recorded[0]) {
            t->open[i] = 1;
            t->callers[i] = w[i].callers;
            t->first[i] = w[i].inner;
            t->repeats[i] = 1;
            t->instance[i] = ++pf->rules[i].next_instance;
            mark(pf, i, PST_EV_MARK_BEGIN, t->instance[i], ev, &out[k++]);
        }
    return k;
}

size_t az_pf_finish(az_pf_t *pf, uint64_t t_end, pst_event_t *out)
{
    size_t k = 0, it = 0;
    uint64_t stream;
    void *v;
    /* a thread's ends all fit; the caller calls again for the next threads */
    while (k + pf->n <= 2 * AZ_PF_MAX && psc_map_next(&pf->threads, &it, &stream, &v)) {
        thr_t *t = v;
        for (size_t i = 0; i < pf->n; i++) {
            if (!t->open[i]) continue;
            pst_event_t at = { .stream = (uint32_t)stream, .ts = t_end };
            mark(pf, i, PST_EV_MARK_END, t->instance[i], &at, &out[k++]);
            t->open[i] = 0;
            instance_ended(pf, i, t);
        }
    }
    if (!k && !pf->ended) { pf->ended = 1; make_notes(pf); }   /* every instance ended */
    return k;
}

const char *az_pf_string(const az_pf_t *pf, uint32_t id)
{
    if (pf && id >= AZ_PF_NOTE_BASE && id - AZ_PF_NOTE_BASE < pf->n)
        return pf->rules[id - AZ_PF_NOTE_BASE].merged ? pf->rules[id - AZ_PF_NOTE_BASE].note : NULL;
    if (!pf || id < AZ_PF_STRING_BASE || id - AZ_PF_STRING_BASE >= pf->n) return NULL;
    return pf->rules[id - AZ_PF_STRING_BASE].name;
}

uint64_t az_pf_merged(const az_pf_t *pf, size_t i)
{
    return pf && i < pf->n ? pf->rules[i].merged : 0;
}

/* The scan's rules with a note, through az_scan_string (scan.h): rule i's
 * NAME at AZ_PF_STRING_BASE + i, its note at AZ_PF_NOTE_BASE + i; an id
 * the scan does not know reads "?". */
static const char *scan_note(const az_scan_t *s, size_t i, const char **name)
{
    const char *note = az_scan_string(s, AZ_PF_NOTE_BASE + (uint32_t)i);
    if (!strcmp(note, "?")) return NULL;
    *name = az_scan_string(s, AZ_PF_STRING_BASE + (uint32_t)i);
    return note;
}

void az_pf_notes_json(const az_scan_t *s, az_json_t *j)
{
    az_json_begin(j, "phase_frame_notes", '[');
    for (size_t i = 0; i < AZ_PF_MAX; i++) {
        const char *name, *note = scan_note(s, i, &name);
        if (!note) continue;
        az_json_begin(j, NULL, '{');
        az_json_str(j, "phase", name);
        az_json_str(j, "note", note);
        az_json_end(j);
    }
    az_json_end(j);
}

size_t az_pf_notes_text(const az_scan_t *s, FILE *out, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < AZ_PF_MAX; i++) {
        const char *name, *note = scan_note(s, i, &name);
        if (!note) continue;
        fputs(prefix, out);
        psc_esc_text_put(out, note);             /* FUNC and NAME are the user's, the bytes any */
        fputc('\n', out);
        n++;
    }
    return n;
}

int az_pf_seen(const az_pf_t *pf, size_t i, const char **func)
{
    if (func) *func = pf->rules[i].func;
    return pf->rules[i].seen;
}

size_t az_pf_count(const az_pf_t *pf) { return pf ? pf->n : 0; }

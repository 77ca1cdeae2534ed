/* suppress.c — leak suppressions (see suppress.h): the patterns, the file
 * format, and their application to a scanned trace's leaked stacks.
 */
#include "suppress.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "hashmap.h"
#include "poolscope/error.h"
#include "scan.h"
#include "sites.h"
#include "symbolize.h"

/* Allocations made once and kept for the life of the process by the C
 * and C++ runtimes themselves. Each is named by its own function (with
 * the runtime's debug symbols, or its symbol table), so a program's own
 * leak is never taken by one unless it runs inside that function. */
const char *const az_supp_default[] = {
    "*_IO_file_doallocate", "glibc's stdio buffer of a stream never closed (stdout, stderr)",
    "(anonymous namespace)::pool::pool", "libstdc++'s emergency exception pool",
    /* the same without libstdc++'s symbols: its initializer, run by the
     * loader (call_init), allocates it */
    "module:libstdc++.so* < call_init", "libstdc++'s initializer (its emergency exception pool)",
    "_nl_*locale*", "glibc's locale data (setlocale)",
    NULL, NULL,
};

typedef struct pat {
    char *text;                  /* as written */
    char *source;                /* "FILE:LINE" or "default" */
    const char *why;
    char **part;                 /* the frame patterns, innermost first */
    size_t n_part;
} pat_t;

static struct {
    pat_t *p;
    size_t n, cap;
    int defaults;
} g;

static void pat_free(pat_t *p)
{
    free(p->text);
    free(p->source);
    for (size_t i = 0; i < p->n_part; i++) free(p->part[i]);
    free(p->part);
}

void az_supp_reset(void)
{
    for (size_t i = 0; i < g.n; i++) pat_free(&g.p[i]);
    free(g.p);
    memset(&g, 0, sizeof g);
}

void az_supp_use_defaults(int on) { g.defaults = on; }

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", s[n - 1])) s[--n] = 0;
    return s;
}

/* text split at " < " into p->part; 0 or PSC_ENOMEM / PSC_EINVAL (an
 * empty frame pattern) */
static int pat_make(pat_t *p, const char *text, const char *source, const char *why)
{
    memset(p, 0, sizeof *p);
    p->text = strdup(text);
    p->source = strdup(source);
    p->why = why;
    if (!p->text || !p->source) return PSC_ENOMEM;
    const char *s = text;
    for (;;) {
        const char *e = strstr(s, " < ");
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char **a = realloc(p->part, (p->n_part + 1) * sizeof *a);
        if (!a) return PSC_ENOMEM;
        p->part = a;
        char *x = strndup(s, len);
        if (!x) return PSC_ENOMEM;
        p->part[p->n_part++] = x;
        char *t = trim(x);
        if (!*t || !strcmp(t, "module:") || !strcmp(t, "file:")) return PSC_EINVAL;
        memmove(x, t, strlen(t) + 1);
        if (!e) return 0;
        s = e + 3;
    }
}

static int add(const char *text, const char *source, const char *why)
{
    if (psc_grow((void **)&g.p, &g.cap, g.n, sizeof *g.p, 16)) return PSC_ENOMEM;
    int rc = pat_make(&g.p[g.n], text, source, why);
    if (rc) { pat_free(&g.p[g.n]); return rc; }
    g.n++;
    return 0;
}

int az_supp_load(const char *path, char *msg, size_t msglen)
{
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(msg, msglen, "%s: %s", path, strerror(errno)); return PSC_EIO; }
    char line[4096], src[4200];
    int rc = 0;
    for (unsigned no = 1; fgets(line, sizeof line, f); no++) {
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(msg, msglen, "%s:%u: line longer than %zu bytes", path, no, sizeof line - 2);
            rc = PSC_EINVAL;
            break;
        }
        char *t = trim(line);
        if (!*t || *t == '#') continue;
        snprintf(src, sizeof src, "%s:%u", path, no);
        if ((rc = add(t, src, NULL))) {
            if (rc == PSC_EINVAL) snprintf(msg, msglen, "%s:%u: an empty frame pattern in '%s'", path, no, t);
            else snprintf(msg, msglen, "%s", psc_strerror(rc));
            break;
        }
    }
    if (!rc && ferror(f)) { snprintf(msg, msglen, "%s: read error", path); rc = PSC_EIO; }
    fclose(f);
    return rc;
}

static int frame_match(const char *pat, const az_frame_t *f)
{
    if (!strncmp(pat, "module:", 7)) return f->module && fnmatch(pat + 7, f->module, 0) == 0;
    if (!strncmp(pat, "file:", 5)) {
        if (!f->file) return 0;
        char abs[4096];   /* a path relative to the compilation directory matches "* /dir/x.c" too */
        return fnmatch(pat + 5, f->file, 0) == 0 ||
               (f->file[0] != '/' && snprintf(abs, sizeof abs, "/%s", f->file) < (int)sizeof abs &&
                fnmatch(pat + 5, abs, 0) == 0);
    }
    if (!f->function) return 0;
    if (fnmatch(pat, f->function, 0) == 0) return 1;
    char sh[4096];
    return fnmatch(pat, az_sv_short(f->function, sh, sizeof sh), 0) == 0;
}

/* frame_match's answers by (pattern part, the address of the one text it
 * tests): the symbolizer keeps each function, file and module text at one
 * address for its life, and the leaked stacks of a PyTorch run name a few
 * thousand texts in 100 M frames, so each part runs fnmatch once per text.
 * Key: part number + 1 in the top 16 bits, the address below (user
 * addresses fit 47 bits; others are not memoized). */
static int part_match(psc_map_t *memo, size_t part, const char *pat, const az_frame_t *f)
{
    const char *text = !strncmp(pat, "module:", 7) ? f->module : !strncmp(pat, "file:", 5) ? f->file : f->function;
    if (!text) return 0;
    if (part >= 0xffff || (uint64_t)(uintptr_t)text >> 48) return frame_match(pat, f);
    uint64_t key = (uint64_t)(part + 1) << 48 | (uint64_t)(uintptr_t)text;
    uint8_t *r = psc_map_get_sz(memo, key, 1);
    if (r) return *r == 1;
    int yes = frame_match(pat, f);
    if ((r = psc_map_put_sz(memo, key, NULL, 1))) *r = yes ? 1 : 2;
    return yes;
}

/* Does pattern p, whose parts are numbered from part0, match fr[0..n)? */
static int pat_match(psc_map_t *memo, size_t part0, const pat_t *p, const az_frame_t *fr, size_t n)
{
    for (size_t at = 0; at + p->n_part <= n; at++) {
        size_t k = 0;
        while (k < p->n_part && part_match(memo, part0 + k, p->part[k], &fr[at + k])) k++;
        if (k == p->n_part) return 1;
    }
    return 0;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int az_supp_stack(const az_supp_res_t *r, uint32_t stack)
{
    return r && r->n_stacks && bsearch(&stack, r->stacks, r->n_stacks, sizeof stack, u32_cmp) != NULL;
}

void az_supp_free(az_supp_res_t *r)
{
    if (!r) return;
    free(r->hits);
    free(r->stacks);
    free(r);
}

int az_supp_apply(az_scan_t *s)
{
    size_t n_def = 0;
    while (g.defaults && az_supp_default[2 * n_def]) n_def++;
    size_t n_pat = g.n + n_def;
    if (!n_pat || !s || !s->heap || !s->r || !s->heap_r.leaked_count) return 0;
    /* the defaults as patterns, after the user's (made once per process) */
    static pat_t *defs;
    if (n_def && !defs) {
        pat_t *d = calloc(n_def, sizeof *d);
        if (!d) return PSC_ENOMEM;
        for (size_t i = 0; i < n_def; i++)
            if (pat_make(&d[i], az_supp_default[2 * i], "default", az_supp_default[2 * i + 1])) {
                for (size_t k = 0; k <= i; k++) pat_free(&d[k]);
                free(d);
                return PSC_ENOMEM;
            }
        defs = d;
    }
    az_supp_res_t *res = calloc(1, sizeof *res);
    az_supp_hit_t *hits = calloc(n_pat, sizeof *hits);
    az_sym_t *sym = az_sym_open(s->r);
    az_sv_t *v = sym ? az_sv_create(s, sym, NULL) : NULL;
    size_t cap = 4096;
    az_frame_t *fr = malloc(cap * sizeof *fr);
    psc_map_t memo;
    int rc = PSC_ENOMEM, memo_ok = psc_map_init(&memo, 1, 1024, 50, NULL) == 0;
    if (!res || !hits || !v || !fr || !memo_ok) goto out;
    size_t n_sites = 0;
    const az_site_t *si = az_sites(s->heap, &n_sites);
    /* the stacks first: az_site_suppress changes what az_sites returns */
    uint32_t *leaky = malloc((n_sites ? n_sites : 1) * sizeof *leaky);
    if (!leaky) goto out;
    size_t n_leaky = 0;
    for (size_t i = 0; i < n_sites; i++)
        if (si[i].live_count && si[i].stack) leaky[n_leaky++] = si[i].stack;
    for (size_t i = 0; i < n_leaky; i++) {
        size_t n = az_sv_frames(v, leaky[i], fr, cap);
        if (n > cap) n = cap;
        for (size_t k = 0, part0 = 0; k < n_pat; k++) {
            const pat_t *p = k < g.n ? &g.p[k] : &defs[k - g.n];
            int hit = pat_match(&memo, part0, p, fr, n);
            part0 += p->n_part;
            if (!hit) continue;
            uint64_t b, c;
            if (az_site_suppress(s->heap, &s->heap_r, leaky[i], &b, &c)) {
                leaky[res->n_stacks++] = leaky[i];   /* kept in place: i only grows */
                hits[k].objects += c;
                hits[k].bytes += b;
                res->objects += c;
                res->bytes += b;
            }
            break;
        }
    }
    if (res->n_stacks) {
        qsort(leaky, res->n_stacks, sizeof *leaky, u32_cmp);
        res->stacks = leaky;
    } else {
        free(leaky);
    }
    leaky = NULL;
    /* the patterns that took something, in their order */
    for (size_t k = 0; k < n_pat; k++) {
        if (!hits[k].objects) continue;
        const pat_t *p = k < g.n ? &g.p[k] : &defs[k - g.n];
        hits[res->n] = hits[k];
        hits[res->n].pattern = p->text;
        hits[res->n].source = p->source;
        hits[res->n].why = p->why;
        res->n++;
    }
    res->hits = hits;
    hits = NULL;
    if (res->n) { s->supp = res; res = NULL; }
    rc = 0;
out:
    if (memo_ok) psc_map_free(&memo);
    free(fr);
    free(hits);
    az_supp_free(res);
    az_sv_destroy(v);
    az_sym_destroy(sym);
    return rc;
}

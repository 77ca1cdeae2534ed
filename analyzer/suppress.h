/* suppress.h — leaks a person has decided not to see (prefix az_supp_).
 *
 * Some memory is allocated once and never freed on purpose: glibc's
 * buffer of stdout, libstdc++'s emergency exception pool, the locale data
 * setlocale loads. Every run "leaks" it, so a leak figure that includes it
 * is never 0 and a gate on leaked_bytes has to allow for it. A
 * suppression names such an allocation by its stack; the objects it
 * matches leave the leak figures (leaked_bytes, leaked_objects, the leak
 * tables) and are counted apart as suppressed, per pattern, so they are
 * never dropped silently. Only leaks are suppressed: the same objects
 * stay in the peak, the totals and the sites by bytes, where they are
 * real memory.
 *
 * A suppressions file (`--suppress FILE`): one pattern a line; blank lines
 * and lines whose first non-blank character is '#' are ignored, as is
 * blank space around a pattern. A pattern is one or more frame patterns
 * joined by " < " (innermost first), which must match consecutive
 * displayed frames of the leaked object's stack, anywhere in it (inlined
 * frames are frames). A frame pattern is a shell glob (fnmatch) on
 *   - the demangled function name, whole ("ns::f(int)") or without its
 *     parameters ("ns::f"), when it has no prefix;
 *   - the module's file name ("libfoo.so.1") after "module:";
 *   - the source path after "file:" (as --skip-frame's).
 * So `module:libfoo.so* < init_tables` is a libfoo frame called from
 * init_tables. The first pattern that matches an object's stack takes it:
 * the user's, in file order, before the defaults.
 *
 * The settings are process-wide (like symbolize.h's): main() loads files
 * and turns the defaults on for the commands that take --suppress; a
 * library user who sets nothing gets no suppression.
 */
#ifndef POOLSCOPE_SUPPRESS_H
#define POOLSCOPE_SUPPRESS_H

#include <stddef.h>
#include <stdint.h>

struct az_scan;

/* One pattern and what it took. */
typedef struct az_supp_hit {
    const char *pattern;         /* as written */
    const char *source;          /* "default", or "FILE:LINE" */
    const char *why;             /* a default's reason; NULL for a file's */
    uint64_t objects, bytes;
} az_supp_hit_t;

/* What one scan's leaks lost to suppressions (the patterns that matched). */
typedef struct az_supp_res {
    az_supp_hit_t *hits;
    size_t n;
    uint64_t objects, bytes;
    uint32_t *stacks;            /* the stacks whose leaks were taken, ascending */
    size_t n_stacks;
} az_supp_res_t;

/* The default patterns (NULL-terminated pairs: pattern, reason). */
extern const char *const az_supp_default[];

/* Read a suppressions file: 0, or an error code with msg set ("FILE:LINE:
 * ..." for a bad line; PSC_EIO for a file that cannot be read). */
int az_supp_load(const char *path, char *msg, size_t msglen);
/* 1: apply the default list too (the CLI's default for report, html, gate
 * and diff); 0: not (--no-default-suppressions). Library default 0. */
void az_supp_use_defaults(int on);
/* Forget every setting (tests). */
void az_supp_reset(void);

/* Apply the settings to a finished scan (called by the scan itself): the
 * heap's leaked stacks are symbolized and matched; what matches leaves
 * the leak figures. Nothing to do: s->supp stays NULL. 0 or PSC_ENOMEM. */
int az_supp_apply(struct az_scan *s);
void az_supp_free(az_supp_res_t *r);   /* accepts NULL */
/* Were stack's leaks suppressed? (r may be NULL: no.) For an output that
 * keeps its own per-stack figures (the HTML page). */
int az_supp_stack(const az_supp_res_t *r, uint32_t stack);

#endif

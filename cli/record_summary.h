/* record_summary.h — the closing lines of `poolscope record`: where each
 * trace went and what it holds. Split from cmd_record.c so the parsing of
 * the manifest can be tested on its own. */
#ifndef POOLSCOPE_RECORD_SUMMARY_H
#define POOLSCOPE_RECORD_SUMMARY_H

#include <stdint.h>
#include <stdio.h>

/* What the reader says about one trace file. */
typedef struct rec_trace_info {
    int      err;          /* 0, or a PS_E* code: the file could not be read */
    uint64_t events;       /* events read (TS records not counted) */
    uint64_t lost;         /* events the tracer had to drop (LOST records / END) */
    int      truncated;    /* the file ends without its END chunk */
    int      corrupt;      /* reading stopped at a damaged chunk */
    char     exe[64];      /* basename of the traced executable, "" if unknown */
} rec_trace_info_t;

/* Read one trace to its end. Fills *info; returns info->err. */
int record_trace_info(const char *path, rec_trace_info_t *info);

/* Parse one manifest line "pid<TAB>path" (trailing newline allowed).
 * Returns 0 and sets *pid and *path (pointing into line, NUL-terminated in
 * place), or -1 for a malformed line. */
int record_manifest_line(char *line, long *pid, char **path);

/* Print to `out` one line per trace listed in the manifest file, then a
 * warning if none was. `expected_out` (may be NULL) is the -o file, named
 * in the warning. Returns the number of traces listed. */
int record_summary(const char *manifest, const char *expected_out, FILE *out);

#endif

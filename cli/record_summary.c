/* record_summary.c — reads the manifest the interposer appends to (one
 * "pid<TAB>path" line per traced process image) and reports each trace:
 * event count, lost events, and whether it was cut short (no END chunk: the
 * process was killed or the disk filled). */
#include "record_summary.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/reader.h"

int record_manifest_line(char *line, long *pid, char **path)
{
    char *tab = strchr(line, '\t');
    if (!tab || tab == line) return -1;
    char *end;
    errno = 0;
    long p = strtol(line, &end, 10);
    if (errno || end != tab || p <= 0) return -1;
    char *s = tab + 1;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
    if (!n) return -1;
    *pid = p;
    *path = s;
    return 0;
}

int record_trace_info(const char *path, rec_trace_info_t *info)
{
    memset(info, 0, sizeof *info);
    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) { info->err = err ? err : PSC_EIO; return info->err; }
    const pst_header_t *h = pst_header(r);
    if (h && h->exe && *h->exe) {
        const char *b = strrchr(h->exe, '/');
        snprintf(info->exe, sizeof info->exe, "%s", b ? b + 1 : h->exe);
    }
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) info->events++;
    const pst_status_t *st = pst_status(r);
    info->err = rc < 0 ? rc : 0;
    info->lost = st->lost;
    info->truncated = st->truncated;
    info->corrupt = st->corrupt;
    pst_close(r);
    return info->err;
}

int record_summary(const char *manifest, const char *expected_out, FILE *out)
{
    FILE *f = fopen(manifest, "r");
    int listed = 0;
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        long pid;
        char *path;
        if (record_manifest_line(line, &pid, &path)) continue;
        rec_trace_info_t in;
        record_trace_info(path, &in);
        listed++;
        if (in.err && in.err != PSC_ETRUNC) {
            fprintf(out, "poolscope: pid %ld: %s: unreadable trace (%s)\n", pid, path, psc_strerror(in.err));
            continue;
        }
        fprintf(out, "poolscope: pid %ld: %s: %llu events", pid, path, (unsigned long long)in.events);
        if (in.lost) fprintf(out, ", %llu lost", (unsigned long long)in.lost);
        if (in.truncated) fputs(", truncated (the process did not finish cleanly)", out);
        if (in.corrupt) fputs(", corrupt (reading stopped at a damaged chunk)", out);
        if (in.exe[0]) fprintf(out, " [%s]", in.exe);
        fputc('\n', out);
    }
    if (f) fclose(f);
    if (!listed)
        fprintf(out, "poolscope: no trace was written%s%s%s\n",
                expected_out ? " to " : "", expected_out ? expected_out : "",
                " (the program may have exited before the tracer started)");
    return listed;
}

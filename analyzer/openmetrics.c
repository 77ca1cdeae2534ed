/* openmetrics.c — the report's metrics as OpenMetrics text (see report.h).
 *
 * The numbers are the report JSON's (what `gate` reads), so a fleet's
 * store and the CI gate see the same figures: every numeric leaf becomes
 * a gauge `poolscope_<path>` (dots and other characters outside
 * [a-zA-Z0-9_] as '_'), except that the per-function call counts are one
 * family with a `function` label and the per-phase figures one family per
 * figure with a `phase` label. Site tables and histograms stay out (they
 * are distributions, not gauges). Every sample carries `program` and
 * `trace` labels, so runs of many programs can share one store.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "json.h"
#include "poolscope/error.h"
#include "report.h"

/* label value: the exposition format's escapes (backslash, double quote,
 * newline), valid UTF-8 whatever the trace holds (common/escape.h) */
static void label(FILE *out, const char *v)
{
    psc_esc_om_label(out, v);
}

/* Returns the factor the value takes: nanoseconds become seconds, as the
 * OpenMetrics base unit. */
static double metric_name(char *buf, size_t len, const char *path)
{
    double scale = 1;
    size_t k = (size_t)snprintf(buf, len, "poolscope_");
    for (; *path && k + 1 < len; path++)
        buf[k++] = isalnum((unsigned char)*path) ? *path : '_';
    buf[k] = 0;
    /* "_total" is a counter's suffix in OpenMetrics; these are gauges */
    size_t n = strlen(buf);
    if (n > 6 && !strcmp(buf + n - 6, "_total") && n + 4 < len) strcpy(buf + n - 6, "_all");
    /* "_count" is a histogram's; a phase's count is its instances */
    else if (n > 6 && !strcmp(buf + n - 6, "_count") && n + 4 < len) strcpy(buf + n - 6, "_instances");
    else if (n > 3 && !strcmp(buf + n - 3, "_ns") && n + 6 < len) { strcpy(buf + n - 3, "_seconds"); scale = 1e-9; }
    return scale;
}

typedef struct om {
    FILE *out;
    const char *program, *trace;
} om_t;

static void sample(const om_t *o, const char *name, const char *lkey, const char *lval, double v)
{
    fprintf(o->out, "%s{program=\"", name);
    label(o->out, o->program);
    fputs("\",trace=\"", o->out);
    label(o->out, o->trace);
    if (lkey) {
        fprintf(o->out, "\",%s=\"", lkey);
        label(o->out, lval);
    }
    fprintf(o->out, "\"} %.17g\n", v);
}

static void leaves(const om_t *o, const az_jv_t *v, const char *prefix)
{
    for (const az_jv_t *c = v->child; c; c = c->next) {
        char path[512];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", c->key);
        if (!*prefix && (!strcmp(c->key, "sites") || !strcmp(c->key, "calls") || !strcmp(c->key, "phases")))
            continue;                               /* their own families below, or not gauges */
        if (c->type == AZ_JV_OBJ) { leaves(o, c, path); continue; }
        if (c->type != AZ_JV_NUM && c->type != AZ_JV_BOOL) continue;   /* null: does not apply */
        char name[600];
        double k = metric_name(name, sizeof name, path);
        fprintf(o->out, "# TYPE %s gauge\n# HELP %s report --json %s\n", name, name, path);
        sample(o, name, NULL, NULL, c->num * k);
    }
}

int az_report_openmetrics(const az_scan_t *s, const az_report_opts_t *ro, FILE *out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return PSC_ENOMEM;
    az_report_opts_t o = ro ? *ro : (az_report_opts_t){ 0 };
    o.top = 1;                                      /* no site table is written anyway */
    az_report_json(s, &o, m);
    fclose(m);
    int err;
    char eb[200];
    az_jdoc_t *d = az_json_parse(buf, len, &err, eb, sizeof eb);
    free(buf);
    if (!d) return err;
    const az_jv_t *root = az_json_root(d);
    const az_jv_t *prog = az_json_get(root, "program"), *tr = az_json_get(root, "trace");
    om_t om = { out, prog && prog->type == AZ_JV_STR ? prog->str : "",
                tr && tr->type == AZ_JV_STR ? tr->str : "" };
    leaves(&om, root, "");
    const az_jv_t *calls = az_json_get(root, "calls");
    if (calls && calls->child) {
        fputs("# TYPE poolscope_calls gauge\n# HELP poolscope_calls hooked calls by function\n", out);
        for (const az_jv_t *c = calls->child; c; c = c->next)
            if (c->type == AZ_JV_NUM) sample(&om, "poolscope_calls", "function", c->key, c->num);
    }
    const az_jv_t *ph = az_json_get(root, "phases");
    if (ph && ph->child) {
        /* one family per figure, its samples one per phase */
        for (const az_jv_t *fig = ph->child->child; fig; fig = fig->next) {
            char path[300], name[320];
            snprintf(path, sizeof path, "phase_%s", fig->key);
            double k = metric_name(name, sizeof name, path);
            fprintf(out, "# TYPE %s gauge\n# HELP %s report --json phases.PHASE.%s\n", name, name, fig->key);
            for (const az_jv_t *p = ph->child; p; p = p->next) {
                const az_jv_t *v = az_json_get(p, fig->key);
                if (v && v->type == AZ_JV_NUM) sample(&om, name, "phase", p->key, v->num * k);
            }
        }
    }
    fputs("# EOF\n", out);
    az_json_free(d);
    return 0;
}

/* json.c — the analyzer's small JSON writer and reader (see json.h).
 *
 * The writer keeps a comma flag per nesting level; the reader is a
 * recursive-descent parser over the whole text that puts its nodes and
 * unescaped strings in one arena, so a document is freed in one call.
 */
#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "poolscope/error.h"

/* ---- writer ------------------------------------------------------------------ */

void az_json_init(az_json_t *j, FILE *out, int pretty)
{
    memset(j, 0, sizeof *j);
    j->out = out;
    j->pretty = pretty;
}

/* Every JSON string of the analyzer (report, replay, diff, gate, chrome
 * export) goes through here, so the one escaper (common/escape.h) makes
 * them valid for any bytes a trace holds. */
void az_json_write_string(FILE *out, const char *s)
{
    psc_esc_json(out, s, 0);
}

static void indent(az_json_t *j)
{
    if (!j->pretty) return;
    fputc('\n', j->out);
    for (int i = 0; i < j->depth; i++) fputs("  ", j->out);
}

/* Comma, newline, indentation and key before a value. */
static void prefix(az_json_t *j, const char *key)
{
    if (j->depth > 0) {
        if (!j->first[j->depth]) fputc(',', j->out);
        j->first[j->depth] = 0;
        indent(j);
    }
    if (key && j->depth > 0 && j->close[j->depth] == '}') {
        az_json_write_string(j->out, key);
        fputs(j->pretty ? ": " : ":", j->out);
    }
}

void az_json_begin(az_json_t *j, const char *key, char kind)
{
    prefix(j, key);
    fputc(kind == '[' ? '[' : '{', j->out);
    if (j->depth + 1 < AZ_JSON_MAX_DEPTH) j->depth++;
    j->first[j->depth] = 1;
    j->close[j->depth] = kind == '[' ? ']' : '}';
}

void az_json_end(az_json_t *j)
{
    if (j->depth == 0) return;
    int empty = j->first[j->depth];
    char c = j->close[j->depth];
    j->depth--;
    if (!empty) indent(j);
    fputc(c, j->out);
    if (j->depth == 0) fputc('\n', j->out);
}

void az_json_u64(az_json_t *j, const char *key, uint64_t v)
{
    prefix(j, key);
    fprintf(j->out, "%llu", (unsigned long long)v);
}

void az_json_f64(az_json_t *j, const char *key, double v)
{
    prefix(j, key);
    if (!isfinite(v)) { fputs("null", j->out); return; }
    if (v == floor(v) && fabs(v) < 1e15) fprintf(j->out, "%.1f", v);
    else fprintf(j->out, "%.6g", v);
}

void az_json_str(az_json_t *j, const char *key, const char *s)
{
    prefix(j, key);
    if (s) az_json_write_string(j->out, s);
    else fputs("null", j->out);
}

void az_json_bool(az_json_t *j, const char *key, int v)
{
    prefix(j, key);
    fputs(v ? "true" : "false", j->out);
}

void az_json_null(az_json_t *j, const char *key)
{
    prefix(j, key);
    fputs("null", j->out);
}

/* ---- reader ------------------------------------------------------------------ */

typedef struct arena_blk { struct arena_blk *next; size_t used, cap; } arena_blk_t;

struct az_jdoc {
    arena_blk_t *blk;
    az_jv_t *root;
};

typedef struct parser {
    const char *p, *end, *start;
    az_jdoc_t *d;
    char *errbuf;
    size_t errlen;
    int err;
    int depth;
} parser_t;

static void *arena_alloc(az_jdoc_t *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    arena_blk_t *b = d->blk;
    if (!b || b->used + n > b->cap) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + 16 + cap);
        if (!b) return NULL;
        b->cap = cap; b->used = 0; b->next = d->blk;
        d->blk = b;
    }
    void *r = (char *)(b + 1) + 16 + b->used;
    b->used += n;
    return r;
}

static void *perr(parser_t *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *perr(parser_t *ps, const char *fmt, ...)
{
    if (ps->err) return NULL;
    ps->err = PSC_ECORRUPT;
    int line = 1;
    for (const char *q = ps->start; q < ps->p && q < ps->end; q++) line += *q == '\n';
    if (ps->errbuf && ps->errlen) {
        int n = snprintf(ps->errbuf, ps->errlen, "line %d: ", line);
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < ps->errlen) vsnprintf(ps->errbuf + n, ps->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

static void skip_ws(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static char *parse_string(parser_t *ps)
{
    /* at '"' */
    const char *q = ++ps->p;
    size_t n = 0;
    while (q < ps->end && *q != '"') { if (*q == '\\') q++; q++; n++; }
    if (q >= ps->end) return perr(ps, "unterminated string");
    char *out = arena_alloc(ps->d, n * 3 + 1), *o = out;   /* \uXXXX may take 3 bytes */
    if (!out) { ps->err = PSC_ENOMEM; return NULL; }
    while (*ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) return perr(ps, "control character in string");
        if (c != '\\') { *o++ = c; continue; }
        c = *ps->p++;
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            if (ps->end - ps->p < 4) return perr(ps, "bad \\u escape");
            int v = 0;
            for (int i = 0; i < 4; i++) {
                int h = hexval(ps->p[i]);
                if (h < 0) return perr(ps, "bad \\u escape");
                v = v * 16 + h;
            }
            ps->p += 4;
            if (v < 0x80) *o++ = (char)v;
            else if (v < 0x800) { *o++ = (char)(0xc0 | v >> 6); *o++ = (char)(0x80 | (v & 0x3f)); }
            else { *o++ = (char)(0xe0 | v >> 12); *o++ = (char)(0x80 | (v >> 6 & 0x3f));
                   *o++ = (char)(0x80 | (v & 0x3f)); }
            break;
        }
        default:
            return perr(ps, "bad escape '\\%c'", c);
        }
    }
    ps->p++;
    *o = 0;
    return out;
}

static az_jv_t *parse_value(parser_t *ps);

static az_jv_t *new_node(parser_t *ps, int type)
{
    az_jv_t *v = arena_alloc(ps->d, sizeof *v);
    if (!v) { ps->err = PSC_ENOMEM; return NULL; }
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

static az_jv_t *parse_container(parser_t *ps, int obj)
{
    az_jv_t *v = new_node(ps, obj ? AZ_JV_OBJ : AZ_JV_ARR);
    if (!v) return NULL;
    if (++ps->depth > AZ_JSON_MAX_DEPTH) return perr(ps, "nested too deeply");
    ps->p++;
    skip_ws(ps);
    az_jv_t **tail = &v->child;
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) { ps->p++; ps->depth--; return v; }
    for (;;) {
        const char *key = NULL;
        skip_ws(ps);
        if (obj) {
            if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "expected a member name");
            if (!(key = parse_string(ps))) return NULL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return perr(ps, "expected ':'");
            ps->p++;
        }
        az_jv_t *c = parse_value(ps);
        if (!c) return NULL;
        c->key = key;
        *tail = c; tail = &c->next;
        v->n++;
        skip_ws(ps);
        if (ps->p >= ps->end) return perr(ps, "unexpected end of input");
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == (obj ? '}' : ']')) { ps->p++; break; }
        return perr(ps, "expected ',' or '%c'", obj ? '}' : ']');
    }
    ps->depth--;
    return v;
}

static az_jv_t *parse_value(parser_t *ps)
{
    skip_ws(ps);
    if (ps->p >= ps->end) return perr(ps, "unexpected end of input");
    char c = *ps->p;
    if (c == '{' || c == '[') return parse_container(ps, c == '{');
    if (c == '"') {
        az_jv_t *v = new_node(ps, AZ_JV_STR);
        if (!v) return NULL;
        v->str = parse_string(ps);
        return v->str ? v : NULL;
    }
    static const struct { const char *w; int type; int val; } words[] = {
        { "true", AZ_JV_BOOL, 1 }, { "false", AZ_JV_BOOL, 0 }, { "null", AZ_JV_NULL, 0 } };
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].w);
        if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, words[i].w, n) == 0) {
            az_jv_t *v = new_node(ps, words[i].type);
            if (!v) return NULL;
            v->num = words[i].val;
            ps->p += n;
            return v;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t n = 0;
        int integral = c != '-';
        while (ps->p + n < ps->end && n < sizeof buf - 1 &&
               (isdigit((unsigned char)ps->p[n]) || strchr("+-.eE", ps->p[n]))) {
            if (strchr(".eE", ps->p[n])) integral = 0;
            n++;
        }
        memcpy(buf, ps->p, n);
        buf[n] = 0;
        char *endp;
        errno = 0;
        double d = strtod(buf, &endp);
        if (endp != buf + n || n == 0) return perr(ps, "bad number '%s'", buf);
        az_jv_t *v = new_node(ps, AZ_JV_NUM);
        if (!v) return NULL;
        v->num = d;
        if (integral) {
            errno = 0;
            unsigned long long u = strtoull(buf, &endp, 10);
            if (!errno && endp == buf + n) { v->is_int = 1; v->u = u; }
        }
        ps->p += n;
        return v;
    }
    return perr(ps, "unexpected character '%c'", c);
}

az_jdoc_t *az_json_parse(const char *text, size_t len, int *err, char *errbuf, size_t errlen)
{
    az_jdoc_t *d = calloc(1, sizeof *d);
    if (!d) { if (err) *err = PSC_ENOMEM; return NULL; }
    parser_t ps = { .p = text, .end = text + len, .start = text, .d = d,
                    .errbuf = errbuf, .errlen = errlen };
    if (errbuf && errlen) errbuf[0] = 0;
    d->root = parse_value(&ps);
    if (d->root) {
        skip_ws(&ps);
        if (ps.p != ps.end) perr(&ps, "trailing characters after the document");
    }
    if (ps.err || !d->root) {
        if (!ps.err) ps.err = PSC_ECORRUPT;
        if (ps.err == PSC_ENOMEM && errbuf && errlen) snprintf(errbuf, errlen, "out of memory");
        if (err) *err = ps.err;
        az_json_free(d);
        return NULL;
    }
    return d;
}

az_jdoc_t *az_json_parse_file(const char *path, int *err, char *errbuf, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errbuf && errlen) snprintf(errbuf, errlen, "%s", strerror(errno));
        if (err) *err = PSC_EIO;
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb; cap *= 2;
    }
    int ioerr = ferror(f);
    fclose(f);
    if (!buf || ioerr) {
        free(buf);
        if (errbuf && errlen) snprintf(errbuf, errlen, "%s", buf ? "read error" : "out of memory");
        if (err) *err = buf ? PSC_EIO : PSC_ENOMEM;
        return NULL;
    }
    az_jdoc_t *d = az_json_parse(buf, n, err, errbuf, errlen);
    free(buf);
    return d;
}

const az_jv_t *az_json_root(const az_jdoc_t *d) { return d ? d->root : NULL; }

void az_json_free(az_jdoc_t *d)
{
    if (!d) return;
    for (arena_blk_t *b = d->blk, *n; b; b = n) { n = b->next; free(b); }
    free(d);
}

const az_jv_t *az_json_get(const az_jv_t *v, const char *key)
{
    if (!v || v->type != AZ_JV_OBJ) return NULL;
    for (const az_jv_t *c = v->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0) return c;
    return NULL;
}

const az_jv_t *az_json_path(const az_jv_t *v, const char *path)
{
    while (v && *path) {
        const az_jv_t *whole = az_json_get(v, path);
        if (whole) return whole;
        const char *dot = strchr(path, '.');
        if (!dot) return NULL;
        size_t n = (size_t)(dot - path);
        const az_jv_t *found = NULL;
        if (v->type == AZ_JV_OBJ)
            for (const az_jv_t *c = v->child; c; c = c->next)
                if (c->key && strlen(c->key) == n && memcmp(c->key, path, n) == 0) { found = c; break; }
        v = found;
        path = dot + 1;
    }
    return NULL;
}

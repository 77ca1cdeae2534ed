/* escape.c — the escapers of escape.h: one UTF-8 decoder, one walk over
 * the bytes for the text-like outputs (text, OpenMetrics, gnuplot differ
 * only in which few characters they quote and how), one for JSON.
 */
#include "escape.h"

#include <stdlib.h>
#include <string.h>

size_t psc_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (!n) return 0;
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t k;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) { k = 2; v = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { k = 3; v = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { k = 4; v = c & 0x07; min = 0x10000; }
    else return 0;               /* a continuation byte, 0xc0/0xc1 (overlong) or 0xf5.. */
    if (n < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return k;
}

/* C0, DEL, C1: what a terminal acts on rather than draws. */
static int is_control(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

/* ---- the text-like walk ---------------------------------------------------------- */

/* Where the text goes: a FILE, or a buffer that is cut (never inside a
 * unit: an escape or a UTF-8 sequence) when full. */
typedef struct sink {
    FILE *f;
    char *b;
    size_t len, o;
    int full;
} sink_t;

static void put(sink_t *k, const char *p, size_t n)
{
    if (k->f) { fwrite(p, 1, n, k->f); return; }
    if (k->full || k->o + n >= k->len) { k->full = 1; return; }
    memcpy(k->b + k->o, p, n);
    k->o += n;
}

enum mode { M_TEXT, M_OM, M_GP, M_GP_DATA };

static void put_hex(sink_t *k, enum mode m, unsigned char c)
{
    static const char hx[] = "0123456789abcdef";
    /* OpenMetrics and gnuplot strings: the backslash of \xNN is itself
     * escaped (\\xNN), so it reads back as the text \xNN */
    char e[6] = { '\\', '\\', 'x', hx[c >> 4], hx[c & 15], 0 };
    if (m == M_OM || m == M_GP) put(k, e, 5);
    else put(k, e + 1, 4);
}

static void walk(sink_t *k, const char *str, enum mode m)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    size_t n = strlen((const char *)s);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        /* the characters each syntax quotes */
        if ((m == M_OM || m == M_GP) && (c == '\\' || c == '"' || c == '\n')) {
            put(k, c == '\\' ? "\\\\" : c == '"' ? "\\\"" : "\\n", 2);
            i++;
            continue;
        }
        /* gnuplot substitutes `command` and @macro in the raw line before
         * it parses strings: written as octal escapes, the string holds
         * the character but the line never does */
        if (m == M_GP && (c == '`' || c == '@')) { put(k, c == '`' ? "\\140" : "\\100", 4); i++; continue; }
        if (m == M_GP_DATA && c == '"') { put_hex(k, m, c); i++; continue; }
        uint32_t cp;
        size_t q = psc_utf8_seq(s + i, n - i, &cp);
        if (!q) { put_hex(k, m, c); i++; continue; }                /* not UTF-8: the byte alone */
        if (is_control(cp)) { for (size_t j = 0; j < q; j++) put_hex(k, m, s[i + j]); i += q; continue; }
        put(k, (const char *)s + i, q);
        i += q;
    }
}

int psc_esc_text_needed(const char *s)
{
    if (!s) return 0;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (p[i] >= 0x20 && p[i] < 0x7f) { i++; continue; }   /* the common case, fast */
        uint32_t cp;
        size_t q = psc_utf8_seq(p + i, n - i, &cp);
        if (!q || is_control(cp)) return 1;
        i += q;
    }
    return 0;
}

const char *psc_esc_text(const char *s, char *buf, size_t len)
{
    if (!len) return buf;
    sink_t k = { NULL, buf, len, 0, 0 };
    walk(&k, s, M_TEXT);
    buf[k.o] = 0;
    return buf;
}

void psc_esc_text_put(FILE *out, const char *s)
{
    sink_t k = { out, NULL, 0, 0, 0 };
    walk(&k, s, M_TEXT);
}

char *psc_esc_text_dup(const char *s)
{
    size_t len = (s ? strlen(s) : 0) * 4 + 1;   /* every byte at most \xNN */
    char *b = malloc(len);
    return b ? (char *)psc_esc_text(s, b, len) : NULL;
}

void psc_esc_om_label(FILE *out, const char *s)
{
    sink_t k = { out, NULL, 0, 0, 0 };
    walk(&k, s, M_OM);
}

void psc_esc_gp(FILE *out, const char *s)
{
    sink_t k = { out, NULL, 0, 0, 0 };
    fputc('"', out);
    walk(&k, s, M_GP);
    fputc('"', out);
}

void psc_esc_gp_data(FILE *out, const char *s)
{
    sink_t k = { out, NULL, 0, 0, 0 };
    fputc('"', out);
    walk(&k, s, M_GP_DATA);
    fputc('"', out);
}

/* ---- JSON ------------------------------------------------------------------------ */

void psc_esc_json(FILE *out, const char *str, unsigned flags)
{
    if (!str) { fputs("null", out); return; }
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    int html = (flags & PSC_ESC_HTML) != 0;
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c == '"') { fputs("\\\"", out); i++; continue; }
        if (c == '\\') { fputs("\\\\", out); i++; continue; }
        if (c == '\n') { fputs("\\n", out); i++; continue; }
        if (c == '\r') { fputs("\\r", out); i++; continue; }
        if (c == '\t') { fputs("\\t", out); i++; continue; }
        if (html && (c == '<' || c == '>' || c == '&')) { fprintf(out, "\\u%04x", c); i++; continue; }
        uint32_t cp;
        size_t q = psc_utf8_seq(s + i, n - i, &cp);
        if (!q) { fputs("\\ufffd", out); i++; continue; }           /* not UTF-8: the byte alone */
        if (is_control(cp) || (html && (cp == 0x2028 || cp == 0x2029))) fprintf(out, "\\u%04x", (unsigned)cp);
        else fwrite(s + i, 1, q, out);
        i += q;
    }
    fputc('"', out);
}

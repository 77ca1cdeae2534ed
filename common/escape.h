/* escape.h — untrusted text made safe for each kind of output (internal,
 * prefix psc_esc_).
 *
 * A trace is written by the traced program and shared between people, so
 * every string that comes from it (program path, argv, marker, pool and
 * thread names, symbol, file and module names, mapped file names) is
 * untrusted: any byte may be in it, including terminal escape sequences
 * and bytes that are not UTF-8. Every output passes such strings through
 * the one helper for its kind of output here, never its own loop:
 *
 *   text (terminal, plain-text files)  psc_esc_text*   control bytes as \xNN
 *   JSON (and JSON inside HTML)        psc_esc_json    valid JSON for any bytes
 *   OpenMetrics label values           psc_esc_om_label
 *   gnuplot scripts and data files     psc_esc_gp, psc_esc_gp_data
 *
 * The rules, shared by all of them:
 * - Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 *   above U+10FFFF) is kept, so names in any script read as they are.
 * - A control character (C0 U+0000-U+001F, DEL, C1 U+0080-U+009F) never
 *   reaches the output raw: a terminal would act on it (ESC starts a
 *   sequence; C1 CSI is one on some terminals).
 * - A byte that does not start a well-formed sequence is taken alone (the
 *   next byte starts over), so one bad byte never swallows good text.
 *
 * In text the escape is the four characters \xNN (lower-case hex) for each
 * such byte; a backslash itself is written as it is, so the escapes stay
 * readable in ordinary names (a name that spells "\x1b" reads the same as
 * one holding ESC: text is for people, JSON is the exact form).
 */
#ifndef PSC_ESCAPE_H
#define PSC_ESCAPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The length (1-4) of the well-formed UTF-8 sequence at s[0..n), with its
 * code point in *cp; 0 when s does not start one (then take s[0] alone). */
size_t psc_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp);

/* 1 when s (NULL: none) holds a byte text escaping would change. */
int psc_esc_text_needed(const char *s);

/* s as text into buf (NUL-terminated, cut before an escape or a UTF-8
 * sequence that would not fit); returns buf, so calls nest in printf
 * arguments like fmt.h's. NULL s: "". */
const char *psc_esc_text(const char *s, char *buf, size_t len);
/* The same, written to out. */
void psc_esc_text_put(FILE *out, const char *s);
/* The same, in a new allocation (free() it); NULL out of memory. */
char *psc_esc_text_dup(const char *s);

/* s as a JSON string, quotes included (NULL: null). '"' and '\' escaped,
 * control characters as \n \r \t or \u00XX (DEL and C1 included, so a
 * JSON file shown on a terminal is safe too), and each byte that is not
 * part of well-formed UTF-8 as \ufffd (U+FFFD REPLACEMENT CHARACTER): the
 * output is ASCII plus well-formed UTF-8, valid for any input.
 * flags PSC_ESC_HTML: also '<', '>', '&' and U+2028/U+2029 as \u escapes,
 * so the string can sit in a <script> element (no "</script>") and be
 * read as JavaScript. */
#define PSC_ESC_HTML 1u
void psc_esc_json(FILE *out, const char *s, unsigned flags);

/* s as an OpenMetrics label value, quotes not included: the exposition
 * format's escapes for '\', '"' and newline; any other control byte or
 * byte outside well-formed UTF-8 as the text \xNN (its backslash escaped,
 * so a scraper reads the same "\x1b" text `report` shows). Valid UTF-8. */
void psc_esc_om_label(FILE *out, const char *s);

/* s as a gnuplot string for a script, double quotes included. gnuplot
 * runs `command` (backquotes) and expands @macros in the raw command line
 * before it reads strings, inside double quotes too: a backquote and an
 * '@' are written as the octal escapes \140 and \100, so the line never
 * holds one and the string still does (the title shows the name). '\'
 * and '"' escaped, a newline as \n (a line break of a title: callers make
 * trace-derived parts text with psc_esc_text first, so only their own
 * newlines break lines), other control bytes and non-UTF-8 as the text
 * \xNN (its backslash escaped). */
void psc_esc_gp(FILE *out, const char *s);
/* s as a string field of a gnuplot data file: double-quoted (the only
 * quote data files know; they have no escapes, and data is never run), a
 * '"' inside as \x22, other bytes as in text. */
void psc_esc_gp_data(FILE *out, const char *s);

#endif

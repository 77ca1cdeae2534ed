/* json.h — a small JSON writer and reader for the analyzer (prefix az_json_).
 *
 * Writer: streams to a FILE, tracks nesting and commas itself, so callers
 * just say what comes next. Keys are given for members of objects and NULL
 * for elements of arrays. Doubles are written with up to 6 significant
 * digits after the point (%.6g; NaN and infinities as null).
 *
 *   az_json_t j; az_json_init(&j, stdout, 1);
 *   az_json_begin(&j, NULL, '{');
 *   az_json_u64(&j, "events", 123);
 *   az_json_begin(&j, "pool", '{'); az_json_f64(&j, "hit_rate", 0.75); az_json_end(&j);
 *   az_json_end(&j);                               // writes the final newline at depth 0
 *
 * Reader: parses a whole document into a tree of az_jv_t nodes (one
 * allocation block per document), for the gate's baseline and diff. Depth
 * limited to 64; numbers as double plus the exact u64 when integral.
 */
#ifndef POOLSCOPE_JSON_H
#define POOLSCOPE_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AZ_JSON_MAX_DEPTH 64

typedef struct az_json {
    FILE *out;
    int   pretty;
    int   depth;
    uint8_t first[AZ_JSON_MAX_DEPTH];  /* no member written yet at this depth */
    char    close[AZ_JSON_MAX_DEPTH];  /* '}' or ']' */
} az_json_t;

void az_json_init(az_json_t *j, FILE *out, int pretty);
/* Open an object ('{') or array ('['); key NULL inside arrays / at top. */
void az_json_begin(az_json_t *j, const char *key, char kind);
void az_json_end(az_json_t *j);
void az_json_u64(az_json_t *j, const char *key, uint64_t v);
void az_json_f64(az_json_t *j, const char *key, double v);
void az_json_str(az_json_t *j, const char *key, const char *s);   /* NULL: null */
void az_json_bool(az_json_t *j, const char *key, int v);
void az_json_null(az_json_t *j, const char *key);
/* Write a string with JSON escapes, quotes included (common/escape.h
 * psc_esc_json: valid JSON whatever the bytes; NULL: null). */
void az_json_write_string(FILE *out, const char *s);

/* ---- reader ----------------------------------------------------------------- */
enum { AZ_JV_NULL, AZ_JV_BOOL, AZ_JV_NUM, AZ_JV_STR, AZ_JV_ARR, AZ_JV_OBJ };

typedef struct az_jv {
    int type;
    double num;                   /* NUM, BOOL (0/1) */
    int is_int;                   /* NUM written without fraction or exponent, >= 0 */
    uint64_t u;                   /* its exact value when is_int */
    const char *str;              /* STR */
    const char *key;              /* member name when inside an object */
    struct az_jv *child;          /* ARR/OBJ: first element */
    struct az_jv *next;           /* next sibling */
    size_t n;                     /* ARR/OBJ: number of children */
} az_jv_t;

typedef struct az_jdoc az_jdoc_t;

/* Parse text[0..len). NULL on failure with *err (PSC_ECORRUPT, PSC_ENOMEM) and
 * a message in errbuf ("line 3: expected ':'"). */
az_jdoc_t *az_json_parse(const char *text, size_t len, int *err, char *errbuf, size_t errlen);
/* Read and parse a file; PSC_EIO when it cannot be read. */
az_jdoc_t *az_json_parse_file(const char *path, int *err, char *errbuf, size_t errlen);
const az_jv_t *az_json_root(const az_jdoc_t *d);
void az_json_free(az_jdoc_t *d);                    /* accepts NULL */

/* Member of an object by key (NULL if absent or v is not an object). */
const az_jv_t *az_json_get(const az_jv_t *v, const char *key);
/* Member by dotted path "pool.hit_rate" (keys themselves may not contain '.'
 * unless a whole-key match exists at that level). */
const az_jv_t *az_json_path(const az_jv_t *v, const char *path);

#endif

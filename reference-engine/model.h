/* model.h — a llama-style decoder's shape and weights (re_model_).
 *
 * Weights are either synthetic (generated from a seed, in memory) or a
 * llama2.c checkpoint read into memory (or mapped read-only). Both use the
 * checkpoint's layout, so the forward pass has one code path.
 */
#ifndef RE_MODEL_H
#define RE_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct re_shape {
    int dim;          /* transformer width */
    int hidden_dim;   /* feed-forward width */
    int n_layers;
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads, divides n_heads */
    int vocab_size;
    int seq_len;      /* context length */
    int shared_classifier;  /* 1: the classifier is the token embedding */
} re_shape_t;

typedef struct re_weights {
    const float *token_embedding;   /* (vocab_size, dim) */
    const float *rms_att;           /* (n_layers, dim) */
    const float *wq;                /* (n_layers, n_heads * head_size, dim) */
    const float *wk;                /* (n_layers, n_kv_heads * head_size, dim) */
    const float *wv;                /* (n_layers, n_kv_heads * head_size, dim) */
    const float *wo;                /* (n_layers, dim, n_heads * head_size) */
    const float *rms_ffn;           /* (n_layers, dim) */
    const float *w1;                /* (n_layers, hidden_dim, dim) */
    const float *w2;                /* (n_layers, dim, hidden_dim) */
    const float *w3;                /* (n_layers, hidden_dim, dim) */
    const float *rms_final;         /* (dim) */
    const float *wcls;              /* (vocab_size, dim) */
} re_weights_t;

/* What holds the weights. Decode streams every weight once per token, so the
 * page size matters: with 4 KiB pages a 1 GB model is 250k TLB misses per
 * token (each a page walk, costlier still under a hypervisor's nested
 * paging); with 2 MiB pages, 500. */
typedef enum re_mem {
    RE_MEM_HUGE = 0,  /* anonymous memory, 2 MiB aligned: MAP_HUGETLB from the kernel's
                         reserved pool when it has one, else transparent huge pages
                         asked for with madvise(MADV_HUGEPAGE) (granted or not) */
    RE_MEM_SMALL,     /* anonymous memory, 4 KiB pages (MADV_NOHUGEPAGE) */
    RE_MEM_FILE       /* checkpoints only: the file itself mapped read-only (page-cache
                         pages, shared with other processes, 4 KiB) */
} re_mem_t;

typedef struct re_model {
    re_shape_t shape;
    re_weights_t w;
    void *mem;          /* the mapping that holds the weights */
    size_t mem_bytes;
    int mapped;         /* 1: mem is a mapping (munmap); 0: malloc'd */
    re_mem_t mem_kind;  /* what was asked for */
    int hugetlb;        /* 1: mem came from MAP_HUGETLB (every page 2 MiB) */
} re_model_t;

/* Derived sizes. */
static inline int re_head_size(const re_shape_t *s) { return s->dim / s->n_heads; }
static inline int re_kv_dim(const re_shape_t *s) { return s->n_kv_heads * re_head_size(s); }

/* Check a shape; 0 or PSC_EINVAL with a one-line reason in msg. */
int re_shape_check(const re_shape_t *s, char *msg, size_t cap);

/* Parse "dim=288,layers=6,heads=6,kv_heads=6,hidden=768,vocab=32000,seq=256"
 * (any subset, over the defaults already in *s; "shared=0" gives a separate
 * classifier). 0 or PSC_EINVAL with msg. The result is checked. */
int re_shape_parse(const char *spec, re_shape_t *s, char *msg, size_t cap);

/* The 15M shape of llama2.c's stories15M (the default). */
re_shape_t re_shape_default(void);

/* Bytes of all weights in the checkpoint order (without the header and the
 * unused RoPE tables), and the number of weight bytes a decode step at batch
 * 1 streams (every matrix once; the embedding row read is not counted, the
 * classifier is). */
size_t re_weight_bytes(const re_shape_t *s);
size_t re_streamed_bytes(const re_shape_t *s);

/* Synthetic weights from a seed: uniform in ±1/sqrt(fan_in) (norm weights
 * near 1), in RE_MEM_HUGE memory. 0, PSC_EINVAL (bad shape, msg) or
 * PSC_ENOMEM. _mem: in `kind` memory (RE_MEM_FILE is PSC_EINVAL). */
int re_model_synthetic(re_model_t *m, const re_shape_t *s, uint64_t seed,
                       char *msg, size_t cap);
int re_model_synthetic_mem(re_model_t *m, const re_shape_t *s, uint64_t seed, re_mem_t kind,
                           char *msg, size_t cap);

/* Load a llama2.c checkpoint: its weights are read into RE_MEM_HUGE memory
 * (_mem: `kind` memory; RE_MEM_FILE maps the file instead of reading it).
 * The first weight is 2 MiB aligned in anonymous memory (28 bytes past a
 * page in a file mapping). 0, or PSC_EIO (open/stat/read/mmap), PSC_ENOMEM,
 * PSC_ETRUNC (shorter than the header or than its shape needs, or the file
 * shrank while read), PSC_ECORRUPT (an impossible shape or trailing bytes);
 * msg names the file and the problem. */
int re_model_load(re_model_t *m, const char *path, char *msg, size_t cap);
int re_model_load_mem(re_model_t *m, const char *path, re_mem_t kind, char *msg, size_t cap);

/* Bytes of m's weight memory backed by 2 MiB pages right now (MAP_HUGETLB:
 * all of it; otherwise AnonHugePages + FilePmdMapped of the mapping in
 * /proc/self/smaps), or -1 when that cannot be read. */
long long re_model_huge_bytes(const re_model_t *m);

/* "huge", "small", "mmap", and back (-1: unknown). */
const char *re_mem_name(re_mem_t kind);
int re_mem_parse(const char *name);

/* Write m's weights as a llama2.c checkpoint (tests and tools). 0 or PSC_EIO. */
int re_model_save(const re_model_t *m, const char *path);

void re_model_free(re_model_t *m);   /* NULL ok */

/* Counter-based random numbers: the same (key, counter) always gives the
 * same value, so draws do not depend on order or batching. */
uint64_t re_hash64(uint64_t a, uint64_t b, uint64_t c);
/* Uniform in [0, 1) with 24 random bits. */
static inline float re_uniform(uint64_t h) { return (float)(h >> 40) * (1.0f / 16777216.0f); }

#endif

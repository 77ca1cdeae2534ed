/* model.c — shapes, synthetic weights and llama2.c checkpoints.
 *
 * Checkpoint layout (llama2.c "legacy" export): seven int32 — dim,
 * hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative when the
 * classifier is stored separately), seq_len — then float32 tensors in this
 * order: token embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
 * rms_final, two RoPE tables of seq_len * head_size / 2 each (unused: we
 * compute RoPE ourselves), and the classifier when not shared. The file
 * size must match the shape exactly, so a truncated or padded file is
 * reported instead of being read past its end.
 *
 * Where the weights live (re_mem_t): by default a checkpoint's weights are
 * read into anonymous memory asked for 2 MiB pages, as synthetic weights
 * are generated into it. Decode streams every weight once per token, and
 * with 4 KiB pages (a file mapping gets page-cache pages) the page walks of
 * a model beyond the cache cost as much as a third of the bandwidth here.
 */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poolscope/error.h"

#define RE_HEADER_BYTES (7 * sizeof(int32_t))

re_shape_t re_shape_default(void)
{
    re_shape_t s = { .dim = 288, .hidden_dim = 768, .n_layers = 6, .n_heads = 6,
                     .n_kv_heads = 6, .vocab_size = 32000, .seq_len = 256,
                     .shared_classifier = 1 };
    return s;
}

int re_shape_check(const re_shape_t *s, char *msg, size_t cap)
{
    const char *why = NULL;
    if (s->dim <= 0 || s->hidden_dim <= 0 || s->n_layers <= 0 || s->n_heads <= 0 ||
        s->n_kv_heads <= 0 || s->vocab_size <= 0 || s->seq_len <= 0)
        why = "every dimension must be positive";
    else if (s->dim > (1 << 16) || s->hidden_dim > (1 << 18) || s->n_layers > 1024 ||
             s->vocab_size > (1 << 22) || s->seq_len > (1 << 20))
        why = "a dimension is implausibly large";
    else if (s->dim % s->n_heads != 0)
        why = "dim must be a multiple of heads";
    else if (s->n_kv_heads > s->n_heads || s->n_heads % s->n_kv_heads != 0)
        why = "kv_heads must divide heads (and be <= heads)";
    else if ((s->dim / s->n_heads) % 2 != 0)
        why = "head size (dim/heads) must be even for RoPE";
    if (why) {
        if (msg) snprintf(msg, cap, "bad shape dim=%d,hidden=%d,layers=%d,heads=%d,kv_heads=%d,"
                          "vocab=%d,seq=%d: %s", s->dim, s->hidden_dim, s->n_layers,
                          s->n_heads, s->n_kv_heads, s->vocab_size, s->seq_len, why);
        return PSC_EINVAL;
    }
    return 0;
}

int re_shape_parse(const char *spec, re_shape_t *s, char *msg, size_t cap)
{
    char buf[512];
    if (strlen(spec) >= sizeof buf) {
        snprintf(msg, cap, "shape spec too long");
        return PSC_EINVAL;
    }
    strcpy(buf, spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(msg, cap, "bad shape item '%s' (want key=value)", tok);
            return PSC_EINVAL;
        }
        *eq = 0;
        char *end;
        errno = 0;
        long v = strtol(eq + 1, &end, 10);
        if (errno || *end || end == eq + 1 || v < -(1L << 30) || v > (1L << 30)) {
            snprintf(msg, cap, "bad value for shape key '%s': '%s'", tok, eq + 1);
            return PSC_EINVAL;
        }
        int iv = (int)v;
        if (!strcmp(tok, "dim")) s->dim = iv;
        else if (!strcmp(tok, "layers")) s->n_layers = iv;
        else if (!strcmp(tok, "heads")) s->n_heads = iv;
        else if (!strcmp(tok, "kv_heads")) s->n_kv_heads = iv;
        else if (!strcmp(tok, "hidden")) s->hidden_dim = iv;
        else if (!strcmp(tok, "vocab")) s->vocab_size = iv;
        else if (!strcmp(tok, "seq")) s->seq_len = iv;
        else if (!strcmp(tok, "shared")) s->shared_classifier = iv != 0;
        else {
            snprintf(msg, cap, "unknown shape key '%s' (dim, layers, heads, kv_heads, hidden, "
                     "vocab, seq, shared)", tok);
            return PSC_EINVAL;
        }
    }
    return re_shape_check(s, msg, cap);
}

/* Element counts of each tensor in checkpoint order. */
enum { T_EMB, T_RMS_ATT, T_WQ, T_WK, T_WV, T_WO, T_RMS_FFN, T_W1, T_W2, T_W3,
       T_RMS_FINAL, T_ROPE, T_WCLS, T_COUNT };

static void re_tensor_sizes(const re_shape_t *s, size_t n[T_COUNT])
{
    size_t D = (size_t)s->dim, H = (size_t)s->hidden_dim, L = (size_t)s->n_layers;
    size_t hs = (size_t)re_head_size(s), kvd = (size_t)re_kv_dim(s), V = (size_t)s->vocab_size;
    n[T_EMB] = V * D;
    n[T_RMS_ATT] = L * D;
    n[T_WQ] = L * D * D;
    n[T_WK] = L * kvd * D;
    n[T_WV] = L * kvd * D;
    n[T_WO] = L * D * D;
    n[T_RMS_FFN] = L * D;
    n[T_W1] = L * H * D;
    n[T_W2] = L * D * H;
    n[T_W3] = L * H * D;
    n[T_RMS_FINAL] = D;
    n[T_ROPE] = (size_t)s->seq_len * hs;    /* real + imaginary tables */
    n[T_WCLS] = s->shared_classifier ? 0 : V * D;
}

static size_t re_total_floats(const re_shape_t *s, int with_rope)
{
    size_t n[T_COUNT], t = 0;
    re_tensor_sizes(s, n);
    for (int i = 0; i < T_COUNT; i++)
        if (i != T_ROPE || with_rope) t += n[i];
    return t;
}

size_t re_weight_bytes(const re_shape_t *s) { return re_total_floats(s, 0) * sizeof(float); }

size_t re_streamed_bytes(const re_shape_t *s)
{
    size_t n[T_COUNT];
    re_tensor_sizes(s, n);
    size_t t = n[T_RMS_ATT] + n[T_WQ] + n[T_WK] + n[T_WV] + n[T_WO] + n[T_RMS_FFN] +
               n[T_W1] + n[T_W2] + n[T_W3] + n[T_RMS_FINAL] + (size_t)s->vocab_size * s->dim;
    return t * sizeof(float);
}

/* Point the weight table at consecutive tensors starting at p. */
static void re_bind(re_model_t *m, const float *p)
{
    size_t n[T_COUNT];
    re_tensor_sizes(&m->shape, n);
    const float *t[T_COUNT];
    for (int i = 0; i < T_COUNT; i++) { t[i] = p; p += n[i]; }
    m->w.token_embedding = t[T_EMB];
    m->w.rms_att = t[T_RMS_ATT];
    m->w.wq = t[T_WQ];
    m->w.wk = t[T_WK];
    m->w.wv = t[T_WV];
    m->w.wo = t[T_WO];
    m->w.rms_ffn = t[T_RMS_FFN];
    m->w.w1 = t[T_W1];
    m->w.w2 = t[T_W2];
    m->w.w3 = t[T_W3];
    m->w.rms_final = t[T_RMS_FINAL];
    m->w.wcls = m->shape.shared_classifier ? t[T_EMB] : t[T_WCLS];
}

uint64_t re_hash64(uint64_t a, uint64_t b, uint64_t c)
{
    /* splitmix64 finalizer over a mix of the three words */
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                 (c + 0x85EBCA77C2B2AE63ull) * 0x94D049BB133111EBull;
    z ^= z >> 30; z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27; z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

/* Fill n floats with uniform values in [center - scale, center + scale). */
static void re_fill(float *p, size_t n, uint64_t seed, uint64_t tensor, float center, float scale)
{
    uint64_t key = re_hash64(seed, tensor, 0x5EED);
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (key + i) * 0x9E3779B97F4A7C15ull;
        z ^= z >> 29; z *= 0xBF58476D1CE4E5B9ull; z ^= z >> 32;
        p[i] = center + scale * (2.0f * re_uniform(z) - 1.0f);
    }
}

const char *re_mem_name(re_mem_t kind)
{
    switch (kind) {
    case RE_MEM_HUGE: return "huge";
    case RE_MEM_SMALL: return "small";
    case RE_MEM_FILE: return "mmap";
    }
    return "?";
}

int re_mem_parse(const char *name)
{
    if (!strcmp(name, "huge")) return RE_MEM_HUGE;
    if (!strcmp(name, "small")) return RE_MEM_SMALL;
    if (!strcmp(name, "mmap")) return RE_MEM_FILE;
    return -1;
}

#define RE_HUGE_PAGE ((size_t)2 << 20)

/* Anonymous read-write memory for `bytes` of weights, 2 MiB aligned and a
 * whole number of 2 MiB units, of the kind asked for (RE_MEM_HUGE or
 * RE_MEM_SMALL). Sets m->mem, mem_bytes, mapped, hugetlb. 0 or PSC_ENOMEM. */
static int re_weights_alloc(re_model_t *m, size_t bytes, re_mem_t kind)
{
    size_t huge = RE_HUGE_PAGE;
    size_t len = (bytes + huge - 1) / huge * huge;
    if (len == 0) len = huge;
#ifdef MAP_HUGETLB
    if (kind == RE_MEM_HUGE) {
        /* The reserved pool (vm.nr_hugepages), when it has room: every page is
         * 2 MiB for sure. Without MAP_NORESERVE the kernel reserves the pages
         * here, so a short pool fails now instead of faulting later. */
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (p != MAP_FAILED) {
            m->mem = p;
            m->mem_bytes = len;
            m->mapped = 1;
            m->hugetlb = 1;
            return 0;
        }
    }
#endif
    /* Ordinary anonymous memory, over-mapped by one unit so that a 2 MiB
     * aligned start can be kept and the slack given back on both sides. */
    void *map = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return PSC_ENOMEM;
    uintptr_t a = ((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1);
    if (a > (uintptr_t)map) munmap(map, a - (uintptr_t)map);
    size_t tail = (uintptr_t)map + len + huge - (a + len);
    if (tail) munmap((void *)(a + len), tail);
    /* best effort: transparent huge pages are granted at fault time, or not */
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    madvise((void *)a, len, kind == RE_MEM_HUGE ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    m->mem = (void *)a;
    m->mem_bytes = len;
    m->mapped = 1;
    m->hugetlb = 0;
    return 0;
}

int re_model_synthetic(re_model_t *m, const re_shape_t *s, uint64_t seed, char *msg, size_t cap)
{
    return re_model_synthetic_mem(m, s, seed, RE_MEM_HUGE, msg, cap);
}

int re_model_synthetic_mem(re_model_t *m, const re_shape_t *s, uint64_t seed, re_mem_t kind,
                           char *msg, size_t cap)
{
    memset(m, 0, sizeof *m);
    int rc = re_shape_check(s, msg, cap);
    if (rc) return rc;
    if (kind != RE_MEM_HUGE && kind != RE_MEM_SMALL) {
        if (msg) snprintf(msg, cap, "synthetic weights are in huge or small memory, not %s",
                          re_mem_name(kind));
        return PSC_EINVAL;
    }
    m->shape = *s;
    m->mem_kind = kind;
    size_t total = re_total_floats(s, 1);
    if (re_weights_alloc(m, total * sizeof(float), kind)) {
        if (msg) snprintf(msg, cap, "out of memory for %zu bytes of synthetic weights", total * 4);
        return PSC_ENOMEM;
    }
    float *p = m->mem;
    re_bind(m, p);
    size_t n[T_COUNT];
    re_tensor_sizes(s, n);
    float in_d = 1.0f / sqrtf((float)s->dim), in_h = 1.0f / sqrtf((float)s->hidden_dim);
    float *t = p;
    for (int i = 0; i < T_COUNT; i++) {
        float center = 0.0f, scale = in_d;
        switch (i) {
        case T_EMB: case T_WCLS: scale = 1.0f; break;
        case T_RMS_ATT: case T_RMS_FFN: case T_RMS_FINAL: center = 1.0f; scale = 0.1f; break;
        case T_W2: scale = in_h; break;
        case T_ROPE: scale = 0.0f; break;
        default: break;
        }
        re_fill(t, n[i], seed, (uint64_t)i, center, scale);
        t += n[i];
    }
    return 0;
}

/* Read `bytes` at file offset `off` into p. 0, PSC_EIO, or PSC_ETRUNC when
 * the file ends first (it shrank after it was checked). */
static int re_read_at(int fd, void *p, size_t bytes, off_t off)
{
    char *c = p;
    while (bytes) {
        size_t chunk = bytes < ((size_t)64 << 20) ? bytes : ((size_t)64 << 20);
        ssize_t r = pread(fd, c, chunk, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return PSC_EIO;
        if (r == 0) return PSC_ETRUNC;
        c += r;
        off += r;
        bytes -= (size_t)r;
    }
    return 0;
}

int re_model_load(re_model_t *m, const char *path, char *msg, size_t cap)
{
    return re_model_load_mem(m, path, RE_MEM_HUGE, msg, cap);
}

int re_model_load_mem(re_model_t *m, const char *path, re_mem_t kind, char *msg, size_t cap)
{
    memset(m, 0, sizeof *m);
    if (kind != RE_MEM_HUGE && kind != RE_MEM_SMALL && kind != RE_MEM_FILE) {
        snprintf(msg, cap, "%s: unknown weight memory kind %d", path, (int)kind);
        return PSC_EINVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, cap, "%s: cannot open: %s", path, strerror(errno));
        return PSC_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(msg, cap, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return PSC_EIO;
    }
    size_t size = (size_t)st.st_size;
    int32_t h[7];
    if (size < RE_HEADER_BYTES || pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        snprintf(msg, cap, "%s: truncated checkpoint: %zu bytes, shorter than the 28-byte header",
                 path, size);
        close(fd);
        return PSC_ETRUNC;
    }
    re_shape_t s = { .dim = h[0], .hidden_dim = h[1], .n_layers = h[2], .n_heads = h[3],
                     .n_kv_heads = h[4], .vocab_size = h[5] < 0 ? -h[5] : h[5], .seq_len = h[6],
                     .shared_classifier = h[5] > 0 };
    char why[256];
    if (h[5] == INT32_MIN || re_shape_check(&s, why, sizeof why) != 0) {
        snprintf(msg, cap, "%s: impossible checkpoint header: %s", path,
                 h[5] == INT32_MIN ? "vocab_size out of range" : why);
        close(fd);
        return PSC_ECORRUPT;
    }
    size_t need = RE_HEADER_BYTES + re_total_floats(&s, 1) * sizeof(float);
    if (size != need) {
        snprintf(msg, cap, "%s: %s checkpoint: %zu bytes, the shape in its header needs %zu",
                 path, size < need ? "truncated" : "oversized", size, need);
        close(fd);
        return size < need ? PSC_ETRUNC : PSC_ECORRUPT;
    }
    m->shape = s;
    m->mem_kind = kind;
    if (kind == RE_MEM_FILE) {
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            snprintf(msg, cap, "%s: cannot map: %s", path, strerror(errno));
            return PSC_EIO;
        }
        m->mem = map;
        m->mem_bytes = size;
        m->mapped = 1;
        re_bind(m, (const float *)((const char *)map + RE_HEADER_BYTES));
        return 0;
    }
    /* Read the weights (not the header) into anonymous memory, so that they
     * start 2 MiB aligned and get the page size asked for; the page-cache
     * copy of the file is left to the kernel. */
    size_t wbytes = size - RE_HEADER_BYTES;
    if (re_weights_alloc(m, wbytes, kind)) {
        snprintf(msg, cap, "%s: out of memory for %zu bytes of weights", path, wbytes);
        close(fd);
        return PSC_ENOMEM;
    }
    int rc = re_read_at(fd, m->mem, wbytes, (off_t)RE_HEADER_BYTES);
    int saved = errno;
    close(fd);
    if (rc) {
        if (rc == PSC_ETRUNC)
            snprintf(msg, cap, "%s: truncated checkpoint: the file shrank while it was read", path);
        else
            snprintf(msg, cap, "%s: cannot read: %s", path, strerror(saved));
        re_model_free(m);
        return rc;
    }
    re_bind(m, (const float *)m->mem);
    return 0;
}

long long re_model_huge_bytes(const re_model_t *m)
{
    if (!m || !m->mem) return -1;
    if (m->hugetlb) return (long long)m->mem_bytes;
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f) return -1;
    /* Sum the 2 MiB-mapped bytes of every mapping overlapping [mem, mem +
     * mem_bytes): the kernel may have merged or split the region. */
    uintptr_t lo = (uintptr_t)m->mem, hi = lo + m->mem_bytes;
    char line[512];
    int in = 0, seen = 0;
    long long total = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a < hi && b > lo;
            seen |= in;
        } else if (in && (sscanf(line, "AnonHugePages: %lld kB", &kb) == 1 ||
                          sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1 ||
                          sscanf(line, "ShmemPmdMapped: %lld kB", &kb) == 1)) {
            total += kb * 1024;
        }
    }
    fclose(f);
    if (!seen) return -1;
    return total > (long long)m->mem_bytes ? (long long)m->mem_bytes : total;
}

static int re_write_all(FILE *f, const void *p, size_t bytes)
{
    return fwrite(p, 1, bytes, f) == bytes ? 0 : PSC_EIO;
}

int re_model_save(const re_model_t *m, const char *path)
{
    const re_shape_t *s = &m->shape;
    FILE *f = fopen(path, "wb");
    if (!f) return PSC_EIO;
    int32_t h[7] = { s->dim, s->hidden_dim, s->n_layers, s->n_heads, s->n_kv_heads,
                     s->shared_classifier ? s->vocab_size : -s->vocab_size, s->seq_len };
    size_t n[T_COUNT];
    re_tensor_sizes(s, n);
    const float *t[T_COUNT] = {
        m->w.token_embedding, m->w.rms_att, m->w.wq, m->w.wk, m->w.wv, m->w.wo, m->w.rms_ffn,
        m->w.w1, m->w.w2, m->w.w3, m->w.rms_final, NULL, m->w.wcls };
    int rc = re_write_all(f, h, sizeof h);
    for (int i = 0; i < T_COUNT && !rc; i++) {
        if (i == T_ROPE) {   /* unused by us: zeros */
            float z[256] = { 0 };
            for (size_t k = 0; k < n[i] && !rc; k += 256)
                rc = re_write_all(f, z, (n[i] - k < 256 ? n[i] - k : 256) * sizeof(float));
        } else if (n[i]) {
            rc = re_write_all(f, t[i], n[i] * sizeof(float));
        }
    }
    if (fclose(f) != 0) rc = PSC_EIO;
    return rc;
}

void re_model_free(re_model_t *m)
{
    if (!m || !m->mem) return;
    if (m->mapped) munmap(m->mem, m->mem_bytes);
    else free(m->mem);
    m->mem = NULL;
}

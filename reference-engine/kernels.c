/* kernels.c — matmul, dot, rmsnorm, softmax for the reference engine.
 *
 * The matmul is the only hot kernel: at batch 1 decode streams every weight
 * once per token, so it must run at memory bandwidth. Design:
 *
 *   - One dot-product recipe for every output element: 8 accumulator lanes,
 *     lane l sums the products j ≡ l (mod 8) with fused multiply-adds in
 *     increasing j; the 8 lanes are summed in a fixed tree, and the last
 *     n % 8 products added with fmaf in increasing j. The order depends only
 *     on n.
 *   - The micro-kernel runs that recipe for 4 weight rows against up to 3
 *     input rows at once (12 accumulators; each weight vector loaded once
 *     for the 3 input rows), and walks the whole batch while those 4 weight
 *     rows sit in L1: each weight matrix is read from memory once per step
 *     for the whole batch. At batch 1, 4 row streams keep the prefetchers
 *     busy. Leftover rows/columns use smaller tiles of the same recipe;
 *     every accumulator is independent, so the bits are the same.
 *   - While the first column group of a 4-row block runs, the next 4 rows
 *     are prefetched (one line per row per 64 bytes). Measured here at
 *     batch 1 on the 15M shape: 224 -> 440 tokens/s; the hardware
 *     prefetchers alone left half the bandwidth unused.
 *   - On the 1B shape (dim 1024, 16 layers, 953 MB, beyond the cache) at
 *     batch 1 this streams 16.2 GB/s in 2 MiB pages, 81% of the best read
 *     loop over the same memory (bench_engine). Tried and not kept, all
 *     within 3% of it: 2 or 8 rows per pass, prefetching linearly instead
 *     of row by row, prefetch into L2 (T1/T2), prefetching two blocks
 *     ahead, no software prefetch (-4%). What is left is the memory path
 *     itself: the read loop is fastest when its loads are paced, and a
 *     matmul's demand loads of 4 rows cannot be.
 *   - AVX2+FMA is confined to this file through target attributes and picked
 *     at run time; the portable fallback performs the same fmaf operations
 *     lane by lane and so returns the same bits.
 *
 * No split-K anywhere: threads split output rows (see engine.c).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define RE_HAVE_X86 1
#else
#define RE_HAVE_X86 0
#endif

/* ---- portable recipe ----------------------------------------------------- */

/* The fixed 8-lane summation tree used by both paths. */
static float re_k_tree8(const float l[8])
{
    float a = l[0] + l[4], b = l[1] + l[5], c = l[2] + l[6], d = l[3] + l[7];
    return (a + c) + (b + d);
}

static float re_k_dot_portable(const float *w, const float *x, int n)
{
    float acc[8] = { 0 };
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(w[j + l], x[j + l], acc[l]);
    float s = re_k_tree8(acc);
    for (; j < n; j++) s = fmaf(w[j], x[j], s);
    return s;
}

static void re_k_matmul_portable(float *out, const float *x, const float *w,
                                 int B, int n, int d, int r0, int r1)
{
    for (int i = r0; i < r1; i++)
        for (int b = 0; b < B; b++)
            out[(size_t)b * d + i] = re_k_dot_portable(w + (size_t)i * n, x + (size_t)b * n, n);
}

/* ---- AVX2 + FMA ------------------------------------------------------------ */
#if RE_HAVE_X86
#define RE_AVX __attribute__((target("avx2,fma")))

/* re_k_tree8 in registers, the same additions in the same order:
 * (l0+l4, l1+l5, l2+l6, l3+l7) = (a, b, c, d); then (a+c, b+d); then their sum. */
RE_AVX static inline float re_k_finish(__m256 a, const float *w, const float *x, int j, int n)
{
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    float s = _mm_cvtss_f32(v);
    for (; j < n; j++) s = fmaf(w[j], x[j], s);
    return s;
}

/* R weight rows (R <= 4) against C input rows (C <= 3): 12 accumulators at
 * most, each weight vector loaded once for the C input rows. out[c*d + r]. */
RE_AVX static inline __attribute__((always_inline)) void
re_k_micro(float *out, size_t d, const float *w, size_t ws, const float *x, int n, int R, int C,
           const float *pf)
{
    __m256 acc[4][3];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 xv[3];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) xv[c] = _mm256_loadu_ps(x + (size_t)c * n + j);
        if (pf && (j & 15) == 0) {   /* one line per row every 64 bytes */
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
                _mm_prefetch((const char *)(pf + (size_t)r * n + j), _MM_HINT_T0);
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            __m256 wv = _mm256_loadu_ps(w + (size_t)r * ws + j);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
            out[(size_t)c * d + r] = re_k_finish(acc[r][c], w + (size_t)r * ws, x + (size_t)c * n, j, n);
}

#define RE_MICRO(R, C) \
    RE_AVX static void re_k_micro_##R##_##C(float *out, size_t d, const float *w, const float *x, \
                                            int n, const float *pf) \
    { re_k_micro(out, d, w, (size_t)n, x, n, R, C, pf); }
RE_MICRO(4, 3) RE_MICRO(4, 2) RE_MICRO(4, 1)
RE_MICRO(1, 3) RE_MICRO(1, 2) RE_MICRO(1, 1)

typedef void (*re_micro_fn)(float *, size_t, const float *, const float *, int, const float *);

RE_AVX static void re_k_matmul_avx2(float *out, const float *x, const float *w,
                                    int B, int n, int d, int r0, int r1)
{
    static const re_micro_fn m4[4] = { NULL, re_k_micro_4_1, re_k_micro_4_2, re_k_micro_4_3 };
    static const re_micro_fn m1[4] = { NULL, re_k_micro_1_1, re_k_micro_1_2, re_k_micro_1_3 };
    int i = r0;
    for (; i < r1; ) {
        int R = r1 - i >= 4 ? 4 : 1;
        const float *wi = w + (size_t)i * n;
        /* while the first column group runs, pull the next 4 rows in */
        const float *pf = i + 8 <= r1 ? wi + (size_t)4 * n : NULL;
        for (int b = 0; b < B; b += 3) {
            int C = B - b >= 3 ? 3 : B - b;
            (R == 4 ? m4 : m1)[C](out + (size_t)b * d + i, (size_t)d, wi, x + (size_t)b * n, n,
                                  b == 0 ? pf : NULL);
        }
        i += R;
    }
}

RE_AVX static float re_k_dot_avx2(const float *a, const float *b, int n)
{
    float o;
    re_k_micro(&o, 1, a, (size_t)n, b, n, 1, 1, NULL);
    return o;
}

RE_AVX static void re_k_dot_rows_avx2(float *out, const float *q, const float *k, size_t stride,
                                      int rows, int n, float scale)
{
    int r = 0;
    for (; r + 4 <= rows; r += 4) {   /* 4 keys at a time, each dot in the common recipe */
        float o[4];
        re_k_micro(o, 1, k + (size_t)r * stride, stride, q, n, 4, 1, NULL);
        for (int i = 0; i < 4; i++) out[r + i] = o[i] * scale;
    }
    for (; r < rows; r++) {
        float o;
        re_k_micro(&o, 1, k + (size_t)r * stride, stride, q, n, 1, 1, NULL);
        out[r] = o * scale;
    }
}

/* o[i] = fmaf(a[r], v[r][i], o[i]) for r = 0..rows-1 in order: 8 columns at a
 * time kept in a register across the rows. */
RE_AVX static void re_k_wsum_avx2(float *o, const float *a, const float *v, size_t stride,
                                  int rows, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(o + i);
        for (int r = 0; r < rows; r++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(a[r]), _mm256_loadu_ps(v + (size_t)r * stride + i), acc);
        _mm256_storeu_ps(o + i, acc);
    }
    for (; i < n; i++) {
        float acc = o[i];
        for (int r = 0; r < rows; r++) acc = fmaf(a[r], v[(size_t)r * stride + i], acc);
        o[i] = acc;
    }
}

RE_AVX static int re_k_argmax_avx2(const float *x, int n)
{
    if (n < 16) {
        int best = 0;
        for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
        return best;
    }
    __m256 m = _mm256_loadu_ps(x);
    int i = 8;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    float l[8];
    _mm256_storeu_ps(l, m);
    float mx = l[0];
    for (int k = 1; k < 8; k++) if (l[k] > mx) mx = l[k];
    for (; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int k = 0; k < n; k++) if (x[k] == mx) return k;   /* first index of the max */
    int best = 0;                                           /* NaNs: plain scan */
    for (int k = 1; k < n; k++) if (x[k] > x[best]) best = k;
    return best;
}
#endif

static int re_k_simd_cached = -1;

int re_k_simd(void)
{
#if RE_HAVE_X86
    if (re_k_simd_cached < 0) {
        __builtin_cpu_init();
        re_k_simd_cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return re_k_simd_cached;
#else
    return 0;
#endif
}

float re_k_dot(const float *a, const float *b, int n)
{
#if RE_HAVE_X86
    if (re_k_simd()) return re_k_dot_avx2(a, b, n);
#endif
    return re_k_dot_portable(a, b, n);
}

void re_k_matmul_rows(float *out, const float *x, const float *w,
                      int B, int n, int d, int r0, int r1)
{
#if RE_HAVE_X86
    if (re_k_simd()) {
        re_k_matmul_avx2(out, x, w, B, n, d, r0, r1);
        return;
    }
#endif
    re_k_matmul_portable(out, x, w, B, n, d, r0, r1);
}

void re_k_dot_rows(float *out, const float *q, const float *k, size_t stride, int rows, int n,
                   float scale)
{
#if RE_HAVE_X86
    if (re_k_simd()) { re_k_dot_rows_avx2(out, q, k, stride, rows, n, scale); return; }
#endif
    for (int r = 0; r < rows; r++) out[r] = re_k_dot_portable(k + (size_t)r * stride, q, n) * scale;
}

void re_k_wsum(float *o, const float *a, const float *v, size_t stride, int rows, int n)
{
#if RE_HAVE_X86
    if (re_k_simd()) { re_k_wsum_avx2(o, a, v, stride, rows, n); return; }
#endif
    for (int i = 0; i < n; i++) {
        float acc = o[i];
        for (int r = 0; r < rows; r++) acc = fmaf(a[r], v[(size_t)r * stride + i], acc);
        o[i] = acc;
    }
}

int re_k_argmax(const float *x, int n)
{
#if RE_HAVE_X86
    if (re_k_simd()) return re_k_argmax_avx2(x, n);
#endif
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

void re_k_rmsnorm(float *o, const float *x, const float *weight, int n)
{
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss = fmaf(x[j], x[j], ss);
    ss = 1.0f / sqrtf(ss / (float)n + 1e-5f);
    for (int j = 0; j < n; j++) o[j] = weight[j] * (ss * x[j]);
}

void re_k_softmax(float *x, int n)
{
    float m = x[0];
    for (int i = 1; i < n; i++) if (x[i] > m) m = x[i];
    float s = 0.0f;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - m); s += x[i]; }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

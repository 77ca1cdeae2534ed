/* kernels.h — the numeric kernels of the reference engine (re_k_).
 *
 * Exactness contract: every function computes each output element with a
 * reduction order that depends only on the reduction length, never on the
 * batch size, the position of a row in the batch, the rows processed next to
 * it or the thread that runs it. That is what makes a request's logits
 * bit-identical alone or batched, under any --threads.
 */
#ifndef RE_KERNELS_H
#define RE_KERNELS_H

#include <stddef.h>

/* Dot product of n floats, in the fixed order of the matmul kernel. */
float re_k_dot(const float *a, const float *b, int n);

/* out (B, d) = x (B, n) · W^T for W rows [r0, r1), W (d, n) row-major.
 * out rows have stride d. Every element is re_k_dot(W[i], x[b], n). */
void re_k_matmul_rows(float *out, const float *x, const float *w,
                      int B, int n, int d, int r0, int r1);

/* out[r] = re_k_dot(k + r * stride, q, n) * scale for r < rows (attention
 * scores of `rows` consecutive cached keys). */
void re_k_dot_rows(float *out, const float *q, const float *k, size_t stride, int rows, int n,
                   float scale);

/* o[i] = fmaf(a[r], v[r * stride + i], o[i]) for r = 0..rows-1 in that
 * order, for each i < n (attention's weighted sum of values). */
void re_k_wsum(float *o, const float *a, const float *v, size_t stride, int rows, int n);

/* Index of the largest value, the lowest index among equals. */
int re_k_argmax(const float *x, int n);

/* o (n) = rmsnorm(x (n)) * weight (n), eps 1e-5. */
void re_k_rmsnorm(float *o, const float *x, const float *weight, int n);

/* In-place softmax of x (n). */
void re_k_softmax(float *x, int n);

/* 1 when the AVX2+FMA kernel is in use (else the portable one, which gives
 * the same bits: it performs the same fused multiply-adds lane by lane). */
int re_k_simd(void);

#endif

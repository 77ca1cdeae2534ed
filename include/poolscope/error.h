/* error.h — the one error convention of poolscope.
 *
 * Functions that can fail return int: 0 (or a non-negative count) on success,
 * one of the negative codes below on failure. Pointer-returning functions
 * return NULL and, where the caller may need to know why, take an `int *err`.
 * The numbers are stable: they appear in logs and in tests.
 */
#ifndef POOLSCOPE_ERROR_H
#define POOLSCOPE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PSC_OK         =   0,
    PSC_ENOMEM     =  -1,  /* an allocation failed */
    PSC_EINVAL     =  -2,  /* bad argument or configuration */
    PSC_EEXHAUSTED =  -3,  /* the pool has no room and may not grow */
    PSC_EBUSY      =  -4,  /* destroyed with buffers still outstanding */
    PSC_EOWNER     =  -5,  /* owner id already active */
    PSC_ERANGE     =  -6,  /* write past the end of a block/buffer */
    PSC_EIO        =  -7,  /* read/write/open failed (errno kept by caller) */
    PSC_ETRUNC     =  -8,  /* input ends early (cut-short trace) */
    PSC_ECORRUPT   =  -9,  /* input is malformed */
    PSC_EVERSION   = -10,  /* input has a version this build does not read */
    PSC_ENOENT     = -11,  /* no such item */
    PSC_EUNSUP     = -12,  /* not supported here */
};

/* A short English sentence for a code; never NULL. */
const char *psc_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif

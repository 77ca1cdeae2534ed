/* pserr.h — the one error convention of poolscope.
 *
 * Functions that can fail return int: 0 (or a non-negative count) on success,
 * one of the negative codes below on failure. Pointer-returning functions
 * return NULL and, where the caller may need to know why, take an `int *err`.
 * The numbers are stable: they appear in logs and in tests.
 */
#ifndef POOLSCOPE_PSERR_H
#define POOLSCOPE_PSERR_H

enum {
    PS_OK         =   0,
    PS_ENOMEM     =  -1,  /* an allocation failed */
    PS_EINVAL     =  -2,  /* bad argument or configuration */
    PS_EEXHAUSTED =  -3,  /* the pool has no room and may not grow */
    PS_EBUSY      =  -4,  /* destroyed with buffers still outstanding */
    PS_EOWNER     =  -5,  /* owner id already active */
    PS_ERANGE     =  -6,  /* write past the end of a block/buffer */
    PS_EIO        =  -7,  /* read/write/open failed (errno kept by caller) */
    PS_ETRUNC     =  -8,  /* input ends early (cut-short trace) */
    PS_ECORRUPT   =  -9,  /* input is malformed */
    PS_EVERSION   = -10,  /* input has a version this build does not read */
    PS_ENOENT     = -11,  /* no such item */
    PS_EUNSUP     = -12,  /* not supported here */
};

/* A short English sentence for a code; never NULL. */
const char *ps_strerror(int err);

#endif

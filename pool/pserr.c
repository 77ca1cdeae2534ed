/* pserr.c — messages for the project-wide error codes (see pserr.h). */
#include "pserr.h"

const char *ps_strerror(int err)
{
    switch (err) {
    case PS_OK:         return "success";
    case PS_ENOMEM:     return "out of memory";
    case PS_EINVAL:     return "invalid argument";
    case PS_EEXHAUSTED: return "pool exhausted";
    case PS_EBUSY:      return "buffers still outstanding";
    case PS_EOWNER:     return "owner already active";
    case PS_ERANGE:     return "write past the end";
    case PS_EIO:        return "input/output error";
    case PS_ETRUNC:     return "truncated input";
    case PS_ECORRUPT:   return "corrupt input";
    case PS_EVERSION:   return "unsupported format version";
    case PS_ENOENT:     return "not found";
    case PS_EUNSUP:     return "not supported";
    }
    return "unknown error";
}

/* error.c — messages for the project-wide error codes (include/poolscope/error.h). */
#include "poolscope/error.h"

const char *psc_strerror(int err)
{
    switch (err) {
    case PSC_OK:         return "success";
    case PSC_ENOMEM:     return "out of memory";
    case PSC_EINVAL:     return "invalid argument";
    case PSC_EEXHAUSTED: return "pool exhausted";
    case PSC_EBUSY:      return "buffers still outstanding";
    case PSC_EOWNER:     return "owner already active";
    case PSC_ERANGE:     return "write past the end";
    case PSC_EIO:        return "input/output error";
    case PSC_ETRUNC:     return "truncated input";
    case PSC_ECORRUPT:   return "corrupt input";
    case PSC_EVERSION:   return "unsupported format version";
    case PSC_ENOENT:     return "not found";
    case PSC_EUNSUP:     return "not supported";
    }
    return "unknown error";
}

/* io.h — whole-buffer reads and writes on a file descriptor.
 *
 * Short transfers and EINTR are retried until the buffer is done. Errors are
 * the project's codes (error.h): PSC_EIO, or PSC_ETRUNC when a read meets the
 * end of the input first. errno is left as the failing call set it.
 */
#ifndef PSC_IO_H
#define PSC_IO_H

#include <stddef.h>

int psc_read_all(int fd, void *buf, size_t len);
int psc_write_all(int fd, const void *buf, size_t len);
/* On a socket: a peer that went away is PSC_EIO, never SIGPIPE. */
int psc_send_all(int fd, const void *buf, size_t len);

#endif

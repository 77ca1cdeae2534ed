/* launch_int.h — what launch.c, launch_target.c and launch_summary.c share
 * (not for other components: launch.h is the interface). */
#ifndef PS_LAUNCH_INT_H
#define PS_LAUNCH_INT_H

#include <stddef.h>

void pl_set_msg(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *pl_base_name(const char *p);
int pl_is_readable_file(const char *p);
int pl_is_exec_file(const char *p);
int pl_elf_defines_malloc(const char *path);   /* launch_target.c: 1 it exports malloc, calloc, realloc or free; 0 no; -1 cannot tell */

#endif

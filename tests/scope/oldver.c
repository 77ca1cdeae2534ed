/* oldver: calls realpath@GLIBC_2.2.5, whose NULL buffer is EINVAL (the
 * default version allocates one). A lazily bound hook must call the
 * version the program was linked against. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__asm__(".symver realpath, realpath@GLIBC_2.2.5");

int main(void)
{
    char *p = realpath("/tmp", NULL);
    printf("%s errno=%s\n", p ? p : "(null)", p ? "-" : strerror(errno));
    return 0;
}

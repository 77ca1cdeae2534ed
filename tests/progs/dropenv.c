/* dropenv.c — a traced program whose child leaves the tracer behind.
 *
 *   dropenv system    system("env -u LD_PRELOAD true"): the shell and env
 *                     are traced, the `true` env execs is not
 *   dropenv exec      execve("/bin/true") with an empty environment: this
 *                     very process becomes an untraced image
 *   dropenv keep      system("env true"): every image stays traced (the control)
 *
 * Makes a few allocations first so its own trace has events. Exit status 0
 * when the child ran (exec: what /bin/true returns).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile sink;

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    for (int i = 0; i < 100; i++) {
        void *p = malloc(32 + (size_t)i);
        sink = p;
        free(p);
    }
    if (!strcmp(mode, "system")) return system("env -u LD_PRELOAD true") == 0 ? 0 : 1;
    if (!strcmp(mode, "keep")) return system("env true") == 0 ? 0 : 1;
    if (!strcmp(mode, "exec")) {
        char *const args[] = { (char *)"true", NULL };
        char *const env[] = { NULL };
        execve("/bin/true", args, env);
        perror("dropenv: execve /bin/true");
        return 127;
    }
    fprintf(stderr, "usage: dropenv system|exec|keep\n");
    return 2;
}

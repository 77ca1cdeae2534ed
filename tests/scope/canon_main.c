/* canon_main, built -no-pie: it takes foo's address, so foo's symbol in it
 * is undefined with a value, a "canonical" PLT entry every object's foo
 * pointer equals. 100 calls through libcuse.so, 2 from here. */
#include <stdio.h>

int foo(int);
int use(int);
int (*volatile fp)(int);

int main(void)
{
    fp = foo;
    int a = use(100), b = fp(1), c = foo(2);
    printf("%d %d %d\n", a, b, c);
    return 0;
}

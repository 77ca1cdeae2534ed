/* libcuse.so: n calls of foo through its GOT. */
int foo(int);

int use(int n)
{
    int s = 0;
    for (int i = 0; i < n; i++) s += foo(i);
    return s;
}

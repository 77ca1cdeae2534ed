"""lines.py — allocations at known lines, for python_frames.sh.

A list of small bytes, a large bytearray and a dict comprehension of
strings, each made in its own function on a line marked LINE:<name>; all
three stay alive to the end. With `tracemalloc` as the first argument the
script measures itself with tracemalloc and prints "file:line bytes" for
the top lines (the oracle); otherwise it only runs.
"""
import sys


def small_bytes(n):
    return [bytes(20) + str(i).encode() for i in range(n)]   # LINE:small_bytes


def big_bytearray():
    return bytearray(24 << 20)   # LINE:big_bytearray


def dict_of_strings(n):
    return {str(i): "v" * 10 + str(i) for i in range(n)}   # LINE:dict_of_strings


def main():
    keep = [small_bytes(150000), big_bytearray(), dict_of_strings(150000)]
    return keep


if len(sys.argv) > 1 and sys.argv[1] == "tracemalloc":
    import tracemalloc
    tracemalloc.start(1)
    kept = main()
    for st in tracemalloc.take_snapshot().statistics("lineno")[:5]:
        fr = st.traceback[0]
        print("%s:%d %d" % (fr.filename.rsplit("/", 1)[-1], fr.lineno, st.size))
else:
    kept = main()

"""dyncode.py — code made by exec and compile and freed at once, for
python_frames.sh: 7 file names x 50 lines, each line of each file
allocating a size of its own (size()), so a frame named from a stale
cache entry (a new code object, its name and its line table at a freed
one's addresses) shows in the sizes. Prints the bytes it keeps."""
import sys
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2100
K = [None] * N
def size(g, line):
    return 200000 + 1000 * g + 7 * line
def run(n):
    for i in range(n):
        g, line = i % 7, i % 50 + 1
        src = "\n" * (line - 1) + "K[%d] = bytearray(%d)\n" % (i, size(g, line))
        exec(compile(src, "<gen%d>" % g, "exec"))
run(N)
print(sum(len(b) for b in K))

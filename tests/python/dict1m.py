"""dict1m.py — a dict of 1 M small strings (every object from pymalloc),
for python_frames.sh: its bytes must land on LINE:dict. Prints the bytes
sys.getsizeof counts for it (keys, values and the table), the independent
figure."""
import sys

d = {i: "s%07d" % i for i in range(1000000)}   # LINE:dict
print("getsizeof=%d" % (sys.getsizeof(d) + sum(sys.getsizeof(v) for v in d.values())
                        + sum(sys.getsizeof(k) for k in d if k >= 256)))

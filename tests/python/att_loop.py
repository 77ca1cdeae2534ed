"""att_loop.py STOPFILE: a python3 loop that `poolscope attach` finds
running (tests/integration/attach.sh). It keeps 1000 values live, each a
list (pymalloc's, not seen by an attach) and a bytes of 2000 (the
interpreter's malloc: seen), replacing one per iteration, until STOPFILE
exists. Its output does not depend on how long it ran."""
import os
import sys
import time

stop = sys.argv[1]
d = {}
i = 0
sys.stderr.write("ready\n")
sys.stderr.flush()
while True:
    d[i % 1000] = [j for j in range(50)] + [bytes(2000)]
    i += 1
    if i % 1000 == 0:
        time.sleep(0.005)
        if os.path.exists(stop):
            break
ok = all(len(v) == 51 and len(v[50]) == 2000 and v[49] == 49 for v in d.values())
print("keys=%d checked=%s" % (len(d), "ok" if ok else "BAD"))

"""markers.py — the poolscope package used the way a Python program would:
a thread name, point markers with payloads, scopes as context managers and
decorators (also from three threads at once), requests, markers from a
signal handler interrupting markers of the main thread ("tick" inside a run
of "spin": each keeps its own payload), and a stretch paused with
stop()/start() whose markers must not reach the trace.

    python3 markers.py [N]        N rounds, default 5

Prints active=0|1, then the counts it emitted while recording as key=value
lines in pstdump's names (mark_point, mark_begin, mark_end, thread_name,
mark.NAME = points and begins of NAME, thread_name.NAME).
"""
import signal
import sys
import threading
import time

import poolscope

n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
counts = {}


def count(key, k=1):
    counts[key] = counts.get(key, 0) + k


def point(name, *payload):
    poolscope.mark(name, *payload)
    count("mark_point")
    count("mark." + name)


def scoped(name):
    count("mark_begin")
    count("mark_end")
    count("mark." + name)


poolscope.thread_name("py-main")
count("thread_name")
count("thread_name.py-main")


@poolscope.scope("tokenize")
def tokenize(text):
    return text.split()


def worker(k):
    poolscope.thread_name("py-worker-%d" % k)
    for _ in range(40 * n):
        tokenize("a b c")


for i in range(n):
    point("step", i, -i, 1 << 40)
    with poolscope.scope("load"):
        with poolscope.scope("load"):        # the same name nested
            pass
    scoped("load")
    scoped("load")
    tokenize("x y")
    scoped("tokenize")
    with poolscope.request(100 + i, 10 + i, 32):
        pass
    scoped("request")
    poolscope.begin("layer", i, i)
    poolscope.end("layer", i)
    scoped("layer")

threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for k in range(3):
    count("thread_name")
    count("thread_name.py-worker-%d" % k)
    for _ in range(40 * n):
        scoped("tokenize")

ticks = [0]


def on_alarm(sig, frame):
    ticks[0] += 1
    poolscope.mark("tick", ticks[0])


signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
j, t_end = 0, time.monotonic() + 5
while (ticks[0] < 40 or j < 1000) and time.monotonic() < t_end:
    j += 1
    poolscope.mark("spin", j, 2 * j)
signal.setitimer(signal.ITIMER_REAL, 0, 0)
signal.signal(signal.SIGALRM, signal.SIG_DFL)
count("mark_point", j + ticks[0])
count("mark.spin", j)
count("mark.tick", ticks[0])

point("big", *range(1, 12))                  # 11 values: the first 8 are kept
s = poolscope.scope("reused")
with s:
    with s:                                  # one object entered twice
        pass
scoped("reused")
scoped("reused")

poolscope.stop()
was = poolscope.recording()
poolscope.mark("hidden", 1)                  # paused: not in the trace
with poolscope.scope("hidden"):
    pass
poolscope.start()
point("after", int(was))

print("active=%d" % (1 if poolscope.active() else 0))
for k in sorted(counts):
    print("%s=%d" % (k, counts[k]))

"""layout.py — one call of each poolscope entry point with distinct
arguments, for the fake tracer of fake_api.c: the log it writes must be
layout.expected line for line. Prints active=0|1 and recording=0|1 first.
"""
import poolscope

print("active=%d" % (1 if poolscope.active() else 0))
print("recording=%d" % (1 if poolscope.recording() else 0))
poolscope.thread_name("t-name")
poolscope.mark("point")
poolscope.mark("payload", 1, -2, 1 << 40, -(1 << 62))
poolscope.mark("nine", *range(1, 10))
poolscope.begin("begin", 7, 3)
poolscope.end("begin", 7)
poolscope.begin("wide", (1 << 64) - 1)
poolscope.end("wide", -1)
with poolscope.scope("fixed", instance=42, payload=(5, 6)):
    pass
with poolscope.request(9, 128, 64):
    pass
poolscope.mark(b"bytes-name")
poolscope.mark("utf8-\u00e9")
poolscope.stop()
print("stopped_recording=%d" % (1 if poolscope.recording() else 0))
poolscope.start()

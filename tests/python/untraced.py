"""untraced.py — the poolscope package without a tracer: it imports, every
entry point returns without error, and nothing is set up that could cost:
scope() is one shared object, the decorator hands back the function itself,
steps() the iterable itself, and instrument() registers no hook.

    python3 untraced.py      prints "untraced ok", exit 0; else a message, exit 1
"""
import sys

import torch

import poolscope
import poolscope.torch as pst

fail = []


def want(cond, what):
    if not cond:
        fail.append(what)


want(poolscope.active() is False, "active() is not False")
want(poolscope.recording() is False, "recording() is not False")
poolscope.thread_name("x")
poolscope.mark("m")
poolscope.mark("m", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
poolscope.begin("b", 1, 2)
poolscope.end("b", 1)
poolscope.start()
poolscope.stop()
with poolscope.scope("s", instance=3, payload=(1, 2)) as s:
    pass
with poolscope.request(1, 10, 20):
    pass
want(poolscope.scope("a") is poolscope.scope("b"), "scope() allocates without the tracer")


def f(v):
    return v + 1


want(poolscope.scope("f")(f) is f, "the decorator wrapped the function")
want(f(1) == 2, "f changed")
r = range(3)
want(pst.steps(r) is r, "steps() wrapped the iterable")
with pst.prefill():
    pass
with pst.decode_step(payload=(1,)):
    pass

model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
h = pst.instrument(model)
want(h.n_hooks == 0, "instrument() registered hooks")
want(len(h.modules) == 2, "instrument() chose %d modules, not 2" % len(h.modules))
want(all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules()),
     "a module has hooks")
model(torch.randn(1, 4))
h.remove()

if fail:
    print("untraced: " + "; ".join(fail))
    sys.exit(1)
print("untraced ok")

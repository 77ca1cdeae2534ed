"""torch_model.py — poolscope.torch on small models: instrument() on a
Sequential of 3 Linear layers called 5 times (5 "forward" scopes, 15
"Linear"), then remove() and 2 calls more (none); a module holding a
ModuleList of 3 layers plus a head, instrumented with a name and a layer
name (ModuleList is not a level of depth: 4 "block" scopes per call, 2
calls); and a generate loop through steps() (1 "prefill", 3 "decode").

    python3 torch_model.py

Prints active=0|1, hooks=N, the chosen modules, then the counts it expects
as key=value lines in pstdump's names (mark.NAME, mark_begin, mark_end).
"""
import torch

import poolscope
import poolscope.torch as pst

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
counts = {}


def count(name, k):
    for key in ("mark." + name, "mark_begin", "mark_end"):
        counts[key] = counts.get(key, 0) + k


h = pst.instrument(model)
x = torch.randn(4, 16)
with torch.no_grad():
    for _ in range(5):
        y = model(x)
count("forward", 5)
count("Linear", 15)
hooks = h.n_hooks
h.remove()
with torch.no_grad():
    for _ in range(2):
        y = model(x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])
        self.head = torch.nn.Linear(8, 2)

    def forward(self, v):
        for layer in self.layers:
            v = torch.relu(layer(v))
        return self.head(v)


net = Net()
with pst.instrument(net, name="net", layer_name="block") as h2:
    with torch.no_grad():
        net(torch.randn(2, 8))
        net(torch.randn(2, 8))
    chosen = ",".join(q for q, _ in h2.modules)
count("net", 2)
count("block", 8)

ids = torch.zeros(1, 16)
with torch.no_grad():
    for step in pst.steps(range(4)):
        ids = torch.cat([ids[:, 1:], model(ids)[:, :1]], dim=1)
count("prefill", 1)
count("decode", 3)

print("active=%d" % (1 if poolscope.active() else 0))
print("hooks=%d" % hooks)
print("chosen=%s" % chosen)
for k in sorted(counts):
    print("%s=%d" % (k, counts[k]))

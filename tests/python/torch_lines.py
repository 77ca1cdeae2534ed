"""torch_lines.py — CPU inference with a model whose forward allocates on
its own lines, for python_frames.sh: the tensors made on LINE:matmul and
LINE:residual must be named by those lines (Block.forward) in report, and
inside the "forward" scopes of poolscope.torch (report --phase forward)."""
import torch

import poolscope.torch as pst


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d, 4 * d))
        self.v = torch.nn.Parameter(torch.randn(4 * d, d))

    def forward(self, x):
        h = torch.relu(x @ self.w)   # LINE:matmul
        return x + h @ self.v   # LINE:residual


torch.manual_seed(0)
model = torch.nn.Sequential(*[Block(256) for _ in range(4)])
pst.instrument(model)
x = torch.randn(64, 256)
with torch.no_grad():
    for _ in range(20):
        y = model(x)
print("done", tuple(y.shape))

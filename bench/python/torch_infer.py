"""torch_infer.py — PyTorch CPU inference for `make bench`
(scripts/bench-python.sh): a small transformer-style model (embedding,
two encoder blocks of attention + MLP written as nn.Modules, a head) run
under torch.inference_mode on batches of token ids, one intra-op thread
so runs compare on a shared machine. Deterministic weights and inputs;
prints one checksum line. A few seconds untraced; STEPS (argv[1],
default 10) scales it."""
import sys

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self, vocab=1000, dim=128, heads=4, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    torch.manual_seed(1)
    torch.set_num_threads(1)
    model = Model().eval()
    gen = torch.Generator().manual_seed(2)
    total = 0
    with torch.inference_mode():
        for s in range(steps):
            ids = torch.randint(0, 1000, (8, 64), generator=gen)
            logits = model(ids)
            total += int(logits.argmax(dim=-1).sum())
    print("torch_infer", steps, total)


if __name__ == "__main__":
    main()

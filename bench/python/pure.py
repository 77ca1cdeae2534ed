"""pure.py — a pure-Python workload for `make bench` (scripts/bench-python.sh):
many small objects (dicts, tuples, lists, strings) made and dropped in
nested function calls, a bounded working set kept alive across rounds.
Deterministic; prints one checksum line. About 1-3 s untraced on the
bench machine; ROUNDS (argv[1], default 1000) scales it."""
import sys


class Point:
    __slots__ = ("x", "y", "tag")

    def __init__(self, x, y, tag):
        self.x = x
        self.y = y
        self.tag = tag


def make_record(i):
    # a dict and a short string per record: pymalloc-sized objects
    return {"id": i, "name": "item-%d" % i, "pos": Point(i, i * 2, str(i % 97))}


def make_batch(base, n):
    return [make_record(base + i) for i in range(n)]


def summarize(batch):
    by_tag = {}
    for rec in batch:
        by_tag.setdefault(rec["pos"].tag, []).append(rec["id"])
    return sorted((k, len(v)) for k, v in by_tag.items())


def transform(batch):
    return [(r["id"], r["name"].upper(), (r["pos"].x, r["pos"].y)) for r in batch if r["id"] % 3]


def step(r, keep):
    batch = make_batch(r * 2000, 2000)
    rows = transform(batch)
    s = summarize(batch)
    keep.append(rows)
    if len(keep) > 8:
        keep.pop(0)
    return len(rows) + len(s)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    keep = []
    total = 0
    for r in range(rounds):
        total += step(r, keep)
    print("pure", rounds, total)


if __name__ == "__main__":
    main()

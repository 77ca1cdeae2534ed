"""pytest_limits.py — the fixture of tests/integration/pytest_plugin.sh: one
test over its limit_memory, one under it, one leaking over its limit_leaks
and one without markers, run by the poolscope pytest plugin
(python/poolscope/pytest.py). The lines that allocate carry a
"# poolscope: NAME" comment: the script finds their numbers by grep, and the
plugin's failure messages must name them (file.py:LINE).

Not collected by a plain `pytest tests/` (the name does not match test_*.py):
pytest_plugin.sh passes it by path. As a script, `python3 pytest_limits.py
NAME` runs test NAME under tracemalloc and prints its peak and what it left
live (tracemalloc's figures: the independent count).
"""
import sys

import pytest

MiB = 1024 * 1024
KEEP = []


@pytest.mark.limit_memory("5 MB")
def test_over_memory():
    blocks = [bytearray(MiB) for _ in range(4)]   # poolscope: over_small
    big = bytearray(6 * MiB)   # poolscope: over_big
    del big, blocks


@pytest.mark.limit_memory("5 MB")
def test_under_memory():
    x = bytearray(2 * MiB)   # poolscope: under
    del x


@pytest.mark.limit_leaks("1 MB")
def test_leaks():
    KEEP.append(bytearray(3 * MiB))   # poolscope: leak
    tmp = bytearray(4 * MiB)          # freed before the end: not a leak
    del tmp


def test_plain():
    x = [bytearray(1000) for _ in range(100)]
    assert len(x) == 100


if __name__ == "__main__":
    import tracemalloc
    fn = globals()[sys.argv[1]]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    fn()
    now, peak = tracemalloc.get_traced_memory()
    print("peak=%d" % (peak - before))
    print("leaked=%d" % (now - before))

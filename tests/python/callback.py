"""callback.py — Python called back from C, for python_frames.sh.

sorted(key=...) calls key() from the C sort (LINE:key allocates), and
libc's qsort through ctypes calls cmp() (LINE:cmp allocates): each stack
must read Python (the callback) < C (the sort) < Python (its caller,
LINE:sorted / LINE:qsort)."""
import ctypes


def key(x):
    return [x] * 300   # LINE:key


def by_sorted():
    return sorted(range(2000), key=key)   # LINE:sorted


CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
held = []


def cmp(a, b):
    held.append(bytearray(5000))   # LINE:cmp
    return 0


def by_qsort():
    arr = (ctypes.c_int * 64)()
    ctypes.CDLL(None).qsort(arr, 64, 4, CMP(cmp))   # LINE:qsort


by_sorted()
by_qsort()

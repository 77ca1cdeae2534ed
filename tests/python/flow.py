"""flow.py — allocations inside a generator, a thread, a coroutine and an
exception handler, then after each (python_frames.sh): every line marked
LINE:<name> must be named with its own function, however control reached
it and left the frames before it. Prints "<name>=<bytes requested there>"."""
import asyncio
import threading

SIZES = {"gen": 300000, "thread": 400000, "coro": 500000, "except": 600000, "after": 700000}
kept = []


def gen():
    for _ in range(3):
        yield bytearray(SIZES["gen"])   # LINE:gen


def in_thread():
    kept.append(bytearray(SIZES["thread"]))   # LINE:thread


async def coro():
    await asyncio.sleep(0)
    return bytearray(SIZES["coro"])   # LINE:coro


def fails():
    raise ValueError("no")


def handler():
    try:
        fails()
    except ValueError:
        return bytearray(SIZES["except"])   # LINE:except


def main():
    kept.extend(gen())
    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    kept.append(asyncio.run(coro()))
    kept.append(handler())
    kept.append(bytearray(SIZES["after"]))   # LINE:after


main()
# a bytearray(n) asks for n + 1 bytes (its NUL)
for k, n in SIZES.items():
    print("%s=%d" % (k, (n + 1) * (3 if k == "gen" else 1)))

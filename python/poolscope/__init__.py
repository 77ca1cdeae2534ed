"""poolscope — markers for the poolscope tracer, from Python.

A program run under ``poolscope record -- python3 prog.py`` has the preload
library (libpoolscope-preload.so) in its process; this package finds the
event-API table that library exports as ``poolscope_api`` and calls it
through ctypes, the way ``include/poolscope/poolscope.h`` does from C:

    import poolscope
    poolscope.mark("checkpoint", 3)                 # a point marker, payload [3]
    with poolscope.scope("load"):                   # a begin/end pair
        ...
    @poolscope.scope("tokenize")                    # one scope per call
    def tokenize(text): ...
    with poolscope.request(rid, prompt_len, max_tokens):   # the analyzers' KV request
        ...
    poolscope.flush()                               # every event so far into the trace file

Without the tracer (no preload library, or a table of another layout) the
import still works and every entry point is bound, at import, to a function
that does nothing: ``scope(...)`` returns one shared object whose
``__enter__``/``__exit__`` do nothing and which, used as a decorator, hands
the function back unchanged.

The layout mirrored here is ABI (poolscope.h, "internal: not a stable API"):
``ps_api_t`` {u32 version, u32 size, emit, enable, enabled[, flush[, session]]} and
``ps_event_t``. A table whose version is not PS_API_VERSION, or whose size is
smaller than the first five members, or with a NULL entry point among them,
is ignored — as libtrace/api.c ignores it — so a mismatched tracer disables
the package instead of being called through entry points it does not have.
``flush`` was appended later: it is used only when the table's size covers
it and it is not NULL (an older tracer: flush() returns False). ``session``,
appended after it, is for the C pool adapter and is not read here.

An event is packed (struct.pack_into, at the offsets of the ctypes mirror)
into a buffer of the calling thread and its address handed to emit through
ctypes.PYFUNCTYPE: the GIL is kept for the call (the tracer never calls back
into Python and never waits on a Python thread), which saves releasing and
taking it again on every marker. Names are cached with their address (up to
4096 of them); the tracer copies the string during the call.

POOLSCOPE_PYTHON=0 in the environment turns the package off even under the
tracer.
"""
import ctypes
import functools
import itertools
import os

__all__ = [
    "mark", "scope", "begin", "end", "request", "thread_name",
    "start", "stop", "active", "recording", "flush", "API_VERSION", "MAX_PAYLOAD",
]
__version__ = "0.1.0"

API_VERSION = 1        # PS_API_VERSION of poolscope.h
MAX_PAYLOAD = 8        # PST_MAX_PAYLOAD: the tracer keeps the first 8 values

# Event numbers (poolscope.h / format.h).
_MARK_POINT = 44
_MARK_BEGIN = 45
_MARK_END = 46
_THREAD_NAME = 52


class _Event(ctypes.Structure):
    """ps_event_t: what crosses from the program to the tracer."""
    _fields_ = [
        ("type", ctypes.c_uint32),                  # PST_EV_* number
        ("n_fields", ctypes.c_uint32),              # entries used in f[]
        ("f", ctypes.c_uint64 * 10),                # fields in layout order
        ("name", ctypes.c_char_p),                  # the S field
        ("ids", ctypes.POINTER(ctypes.c_uint32)),   # the L field
        ("n_ids", ctypes.c_uint32),
        ("payload", ctypes.POINTER(ctypes.c_int64)),  # the P field
        ("n_payload", ctypes.c_uint32),
    ]


_EMIT_T = ctypes.PYFUNCTYPE(None, ctypes.POINTER(_Event))
_ENABLE_T = ctypes.PYFUNCTYPE(None, ctypes.c_int)
_ENABLED_T = ctypes.PYFUNCTYPE(ctypes.c_int)
# flush() sleeps until the tracer's flusher thread has written the file:
# CFUNCTYPE releases the GIL for it, so other Python threads run meanwhile.
_FLUSH_T = ctypes.CFUNCTYPE(ctypes.c_int)


class _ApiHead(ctypes.Structure):
    """The first two members of ps_api_t, read before anything else."""
    _fields_ = [("version", ctypes.c_uint32), ("size", ctypes.c_uint32)]


class _Api(ctypes.Structure):
    """ps_api_t, the table the preload library exports as poolscope_api."""
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("emit", _EMIT_T),
        ("enable", _ENABLE_T),
        ("enabled", _ENABLED_T),
    ]


class _ApiFlush(ctypes.Structure):
    """ps_api_t with the member appended after the first release: read
    only from a table whose size covers it."""
    _fields_ = _Api._fields_ + [("flush", _FLUSH_T)]


def _candidates():
    """Handles in which to look for poolscope_api: the global scope first
    (dlopen(NULL): the executable, its libraries and every LD_PRELOAD one —
    what dlsym(RTLD_DEFAULT) searches), then each library named in
    LD_PRELOAD, opened with RTLD_NOLOAD so a library not already in the
    process is never loaded by us (loading a malloc interposer late would
    hand it frees of blocks it never saw)."""
    try:
        yield ctypes.CDLL(None)
    except OSError:
        pass
    noload = getattr(os, "RTLD_NOLOAD", 0)
    if not noload:
        return
    for lib in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        try:
            yield ctypes.CDLL(lib, mode=noload | getattr(os, "RTLD_LAZY", 1))
        except OSError:
            pass


def _find_api():
    """The tracer's table if there is a usable one, else None."""
    for lib in _candidates():
        try:
            head = _ApiHead.in_dll(lib, "poolscope_api")
        except (ValueError, OSError):
            continue
        if head.version != API_VERSION or head.size < ctypes.sizeof(_Api):
            return None   # a tracer of another layout: never call into it
        api = _Api.in_dll(lib, "poolscope_api")
        if not (api.emit and api.enable and api.enabled):
            return None
        return api
    return None


def _usable_layout():
    """Our mirror of ps_event_t must be the C one: on LP64, 128 bytes with
    name at offset 88 and payload at 112 (checked against the header by
    tests/python/fake_api.c)."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return True   # ILP32: ctypes lays the structure out as the C compiler does
    return (ctypes.sizeof(_Event) == 128 and _Event.name.offset == 88 and
            _Event.payload.offset == 112 and ctypes.sizeof(_Api) == 32)


_api = None
if os.environ.get("POOLSCOPE_PYTHON", "1") != "0" and _usable_layout():
    _api = _find_api()

# Instance ids of scopes opened without one: unique in the process, so an
# export pairs every begin with its end. next() on itertools.count is atomic
# under the GIL.
_next_instance = itertools.count(1).__next__


# ---- no-op side: what every name is bound to without the tracer ------------

class _NullScope:
    """scope() without the tracer: one shared object that does nothing."""
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


_NULL_SCOPE = _NullScope()


def _noop_mark(name, *payload):
    pass


def _noop_begin(name, instance, *payload):
    pass


def _noop_end(name, instance):
    pass


def _noop_scope(name, instance=None, payload=()):
    return _NULL_SCOPE


def _noop_request(id, prompt_len, max_tokens):
    return _NULL_SCOPE


def _noop_thread_name(name):
    pass


def _noop_start():
    pass


def _noop_stop():
    pass


def _noop_active():
    return False


def _noop_recording():
    return False


def _noop_flush():
    return False


# ---- tracer side ------------------------------------------------------------

def _bytes(name):
    return name if isinstance(name, bytes) else str(name).encode("utf-8", "replace")


def _pack_format():
    """A struct format writing ps_event_t's type, n_fields, f[1], name,
    payload and n_payload at _Event's own offsets (native alignment, the
    gaps as pad bytes): one pack_into per event instead of a ctypes object
    and its attribute assignments. None if it does not come out the size
    of _Event."""
    import struct
    fields = [(_Event.type.offset, "I"), (_Event.n_fields.offset, "I"), (_Event.f.offset + 8, "Q"), (_Event.name.offset, "P"),
              (_Event.payload.offset, "P"), (_Event.n_payload.offset, "I")]
    fmt, at = "@", 0
    for off, code in fields:
        if off < at:
            return None
        if off > at:
            fmt += "%dx" % (off - at)
        fmt += code
        at = off + struct.calcsize("@" + code)
    if ctypes.sizeof(_Event) > at:
        fmt += "%dx" % (ctypes.sizeof(_Event) - at)
    st = struct.Struct(fmt)
    return st if st.size == ctypes.sizeof(_Event) else None


_HEAD = _pack_format() if _api is not None else None
if _HEAD is None:
    _api = None


if _api is not None:
    import struct
    import threading

    # emit takes the event's address: packing into a per-thread buffer and
    # passing an int avoids building a ctypes object per call.
    _emit = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(ctypes.cast(_api.emit, ctypes.c_void_p).value)
    _enable = _api.enable
    _enabled = _api.enabled
    _EV_SIZE = ctypes.sizeof(_Event)
    _pack_head = _HEAD.pack_into
    _PAYLOAD = [struct.Struct("@%dq" % n).pack_into for n in range(MAX_PAYLOAD + 1)]
    _MASK64 = 0xFFFFFFFFFFFFFFFF
    _tls = threading.local()

    def _new_buffer():
        """An event buffer: ps_event_t, then 8 payload values; and its address."""
        buf = ctypes.create_string_buffer(_EV_SIZE + 8 * MAX_PAYLOAD)
        return buf, ctypes.addressof(buf)

    # name -> (its bytes, their address). The tracer copies the string during
    # the call; the bytes kept here only make the address a constant. Names
    # past the bound (a program naming markers f"req-{i}") are not cached.
    _names = {}
    _NAMES_MAX = 4096

    def _name_addr(name):
        b = _bytes(name)
        a = ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value
        if len(_names) < _NAMES_MAX:
            _names[name] = (b, a)
        return b, a

    def _int64(v):
        v = int(v) & _MASK64
        return v - (1 << 64) if v >> 63 else v

    def _emit_event(type_, n_fields, instance, name, payload):
        # This thread's buffer is taken for the call and put back after it: a
        # marker emitted from a signal handler or a finalizer that runs in
        # between gets a buffer of its own instead of overwriting this one.
        t = _tls
        b = getattr(t, "b", None)
        if b is None:
            b = _new_buffer()
        else:
            t.b = None
        buf, addr = b
        nb = _names.get(name) or _name_addr(name)   # nb[0] alive until the call returns
        n = len(payload)
        if n:
            if n > MAX_PAYLOAD:
                n = MAX_PAYLOAD            # what the tracer would keep anyway
                payload = payload[:n]
            try:
                _PAYLOAD[n](buf, _EV_SIZE, *payload)
            except struct.error:           # a float, or past int64: as ctypes would store it
                _PAYLOAD[n](buf, _EV_SIZE, *[_int64(v) for v in payload])
            _pack_head(buf, 0, type_, n_fields, instance, nb[1], addr + _EV_SIZE, n)
        else:
            _pack_head(buf, 0, type_, n_fields, instance, nb[1], 0, 0)
        _emit(addr)
        t.b = b

    def _mark(name, *payload):
        _emit_event(_MARK_POINT, 0, 0, name, payload)

    def _begin(name, instance, *payload):
        # f[0] is the S field: name carries it; f[1] the instance
        _emit_event(_MARK_BEGIN, 2, instance & _MASK64, name, payload)

    def _end(name, instance):
        _emit_event(_MARK_END, 2, instance & _MASK64, name, ())

    class _Scope:
        """A begin/end pair; a context manager and a decorator."""
        __slots__ = ("_name", "_instance", "_payload", "_open")

        def __init__(self, name, instance, payload):
            self._name = _bytes(name)
            self._instance = instance
            self._payload = tuple(payload)
            self._open = []       # instances entered and not yet left (nesting)

        def __enter__(self):
            inst = self._instance if self._instance is not None else _next_instance()
            self._open.append(inst)
            _begin(self._name, inst, *self._payload)
            return self

        def __exit__(self, *exc):
            _end(self._name, self._open.pop())
            return False

        def __call__(self, fn):
            name, fixed, payload = self._name, self._instance, self._payload

            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                inst = fixed if fixed is not None else _next_instance()
                _begin(name, inst, *payload)
                try:
                    return fn(*args, **kwargs)
                finally:
                    _end(name, inst)
            return wrapper

    def _scope(name, instance=None, payload=()):
        return _Scope(name, instance, payload)

    def _request(id, prompt_len, max_tokens):
        return _Scope("request", id, (prompt_len, max_tokens))

    def _thread_name(name):
        _emit_event(_THREAD_NAME, 0, 0, name, ())

    def _start():
        _enable(1)

    def _stop():
        _enable(0)

    _flush_fn = None
    if _api.size >= ctypes.sizeof(_ApiFlush):
        _flush_fn = _ApiFlush.from_address(ctypes.addressof(_api)).flush or None

    def _flush():
        return bool(_flush_fn) and _flush_fn() == 0

    def _active():
        return True

    def _recording():
        return bool(_enabled())

    _impl = dict(mark=_mark, begin=_begin, end=_end, scope=_scope, request=_request,
                 thread_name=_thread_name, start=_start, stop=_stop, active=_active,
                 recording=_recording, flush=_flush)
else:
    _impl = dict(mark=_noop_mark, begin=_noop_begin, end=_noop_end, scope=_noop_scope,
                 request=_noop_request, thread_name=_noop_thread_name, start=_noop_start,
                 stop=_noop_stop, active=_noop_active, recording=_noop_recording,
                 flush=_noop_flush)

_DOCS = dict(
    mark="""mark(name, *payload): a point marker; payload: up to 8 ints (more
are cut to 8, as the tracer would).""",
    begin="""begin(name, instance, *payload): open scope `name` of `instance`
(an int, kept as uint64); close it with end(name, instance). Scopes of one
name may overlap when their instances differ.""",
    end="""end(name, instance): close what begin(name, instance) opened.""",
    scope="""scope(name, instance=None, payload=()): a begin/end pair, as

    with scope("load"): ...          # one scope
    @scope("tokenize")               # one scope per call of the function
    def tokenize(text): ...

instance=None takes a fresh process-unique id for each scope opened. An
object used with `with` may be re-entered (nested) in one thread; the
decorator form is safe from any thread. Without the tracer the decorator
returns the function itself.""",
    request="""request(id, prompt_len, max_tokens): the "request" scope the
analyzers read: instance = id, payload [prompt_len, max_tokens] (the KV
model reserves prompt_len + max_tokens tokens for it).""",
    thread_name="""thread_name(name): name the calling thread in the trace.""",
    start="""start(): resume recording of the whole process (ps_trace_enable(1)),
e.g. after `poolscope record --paused` or stop().""",
    stop="""stop(): pause recording of the whole process (ps_trace_enable(0)).""",
    active="""active(): True when a tracer table was found (poolscope.h's
ps_active); False means every call of this package does nothing.""",
    recording="""recording(): True while the tracer records (found and not paused).""",
    flush="""flush(): write every event recorded so far (all threads) into the
trace file and wait until it is there (about 0.1 ms plus the write), so
`poolscope report` can read the unfinished trace from inside the program.
True when done; False without the tracer, with an older tracer that has no
flush entry, or when the trace is closing.""",
)

# ---- the API, bound once, here ------------------------------------------------

mark = _impl["mark"]
begin = _impl["begin"]
end = _impl["end"]
scope = _impl["scope"]
request = _impl["request"]
thread_name = _impl["thread_name"]
start = _impl["start"]
stop = _impl["stop"]
active = _impl["active"]
recording = _impl["recording"]
flush = _impl["flush"]
for _n, _f in _impl.items():
    _f.__doc__ = _DOCS[_n]
del _n, _f

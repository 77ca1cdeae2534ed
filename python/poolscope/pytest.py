"""poolscope.pytest — memory limits for pytest tests, measured by poolscope.

    python3 -m pytest -p poolscope.pytest --poolscope tests/
    pytest --poolscope tests/          # once the package is pip-installed (entry point)

    @pytest.mark.limit_memory("5 MB")  # peak of what the test allocated, held at once
    def test_load(): ...

    @pytest.mark.limit_leaks("1 MB")   # what the test allocated and still holds at its end
    def test_cache(): ...

Sizes are read as pytest-memray reads them: a number and B, KB, MB, GB, TB
(powers of 1024; KiB, MiB, GiB, TiB are accepted too), or a plain number of
bytes.

How it works. With --poolscope, the plugin needs the interpreter to run under
the tracer. If it does not (poolscope.active() is False), it runs the same
command again as

    poolscope record --paused -o poolscope-pytest.<pid>.pst -- PYTHON -m pytest ARGS

and exits with that run's status (the binary: --poolscope-bin, else
$POOLSCOPE_BIN, else `poolscope` on PATH; if there is none it prints that one
command and exits with an error). Under the tracer:

- each test's call (the test function, not its fixtures' setup and teardown:
  the span pytest-memray measures) is a scope named after the test
  (item.name, e.g. test_load or test_p[3]; the node id when two tests share
  a name), so `poolscope report TRACE --phase test_load` reads it afterwards;
- when the trace was started paused (as the re-run does), the plugin records
  only while a test's call runs: the trace holds the tests, not pytest's
  collection and reporting, and each measurement reads a small trace. A run
  already recording (poolscope record without --paused) is left recording;
- after a test with a limit marker it asks the tracer to write everything so
  far to the file (poolscope.flush()) and runs `poolscope report TRACE --phase
  NAME --json --no-symbols` on the unfinished trace (and, for a test over a
  limit, the same report with symbols for its lines). The figures:
    limit_memory  the peak of the bytes allocated during the call that were
                  live at once (report's `peak_selection_live_bytes`; a
                  report without that key: the phase's peak live bytes
                  minus the bytes live just before the call, measured by a
                  report at the call's start);
    limit_leaks   the bytes allocated during the call still live at its end
                  (report's `leaked_bytes` under --phase);
- a test over a limit fails with the figure, the limit and the lines that
  hold the memory: for each site of the report (sites live at the peak that
  allocated in the call; sites of the call's leaks) the first frame whose
  file ends in .py (file.py:LINE), else the site's first frame.

Only marked tests are measured; the others cost a begin and an end marker.
"""
import itertools
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time

import pytest

import poolscope

# ---- sizes ---------------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4, "PB": 1024 ** 5,
          "KIB": 1024, "MIB": 1024 ** 2, "GIB": 1024 ** 3, "TIB": 1024 ** 4, "PIB": 1024 ** 5}
_SIZE_RE = re.compile(r"^\s*\+?(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


def parse_size(value):
    """Bytes of a limit: an int, or "5 MB", "1.5GB", "512 KiB", "100" (units
    as pytest-memray's: powers of 1024). ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("not a size: %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a negative size: %r" % (value,))
        return value
    if isinstance(value, float):
        if value < 0 or value != value:
            raise ValueError("not a size: %r" % (value,))
        return int(value)
    m = _SIZE_RE.match(str(value))
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise ValueError("not a size: %r (a number and B, KB, MB, GB, TB: powers of 1024)" % (value,))
    return int(float(m.group(1)) * _UNITS[unit])


def format_size(n):
    """'10000080 B (9.54 MiB)': the exact figure, then a readable one."""
    n = int(n)
    for unit, k in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= k:
            return "%d B (%.2f %s)" % (n, n / k, unit)
    return "%d B" % n


# ---- site labels -----------------------------------------------------------------

# One frame of a site label as report prints it: "func (file:line)",
# "func (file:line) [inlined]", "func", "module+0x1f".
_FRAME_RE = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?):(?P<line>\d+)\)(?: \[inlined\])?$")


def site_line(label):
    """The frame a site label is charged to: (text, is_python). The first
    frame whose file ends in .py, as "file.py:LINE (function)"; else the
    label's first frame as it is."""
    frames = [f.strip() for f in label.split(" < ")]
    for f in frames:
        m = _FRAME_RE.match(f)
        if m and m.group("file").endswith(".py"):
            return "%s:%s (%s)" % (m.group("file"), m.group("line"), m.group("func")), True
    return (frames[0] if frames else label), False


def _shorten(text, root):
    """A path in text made relative to root when it lies inside it."""
    if root and text.startswith(root + os.sep):
        return text[len(root) + 1:]
    return text


def top_lines(rows, key, n, root=None, only_called=False, total=0):
    """[(bytes, line)] of the n lines holding most: rows of a report site
    table, grouped by site_line. Past the first line, lines holding less
    than 1% of total (pytest's own bookkeeping around the call) are left
    out."""
    acc = {}
    for r in rows:
        if only_called and not r.get("calls"):
            continue
        b = r.get(key) or 0
        if b <= 0:
            continue
        line, _ = site_line(r.get("site", "?"))
        line = _shorten(line, root)
        acc[line] = acc.get(line, 0) + b
    out = sorted(((b, l) for l, b in acc.items()), key=lambda x: (-x[0], x[1]))[:n]
    return out[:1] + [x for x in out[1:] if x[0] * 100 >= total]


# ---- finding things ------------------------------------------------------------

def _preload_libs():
    return [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if "poolscope" in p]


def find_binary(opt=None):
    """The poolscope CLI: --poolscope-bin, $POOLSCOPE_BIN, PATH, then next
    to the preload library this process runs with (<prefix>/lib/... ->
    <prefix>/bin/poolscope). None if none is executable."""
    cands = [opt, os.environ.get("POOLSCOPE_BIN"), shutil.which("poolscope")]
    for lib in _preload_libs():
        d = os.path.dirname(os.path.abspath(lib))
        cands += [os.path.join(d, "..", "bin", "poolscope"), os.path.join(d, "..", "..", "bin", "poolscope")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def find_trace():
    """This process image's trace file: its line in the manifest `poolscope
    record` keeps (POOLSCOPE_MANIFEST: pid TAB path), else the .pst file the
    tracer holds open (/proc/self/fd), else POOLSCOPE_OUT if it exists."""
    pid = str(os.getpid())
    man = os.environ.get("POOLSCOPE_MANIFEST")
    found = None
    if man:
        try:
            with open(man, "rb") as f:
                for raw in f:
                    p, sep, path = raw.decode("utf-8", "surrogateescape").rstrip("\n").partition("\t")
                    if sep and p == pid:
                        found = path          # the latest line of this pid
        except OSError:
            pass
    if found and os.path.isfile(found):
        return found
    try:
        for fd in sorted(os.listdir("/proc/self/fd"), key=int, reverse=True):
            try:
                t = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                continue
            if t.endswith(".pst") and os.path.isfile(t):
                return t
    except OSError:
        pass
    out = os.environ.get("POOLSCOPE_OUT")
    return out if out and os.path.isfile(out) else None


def _clean_env():
    """The environment for the analyzer we run: without the tracer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSCOPE_")}
    pre = [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if "poolscope" not in p]
    if pre:
        env["LD_PRELOAD"] = " ".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
    return env


# ---- the plugin -------------------------------------------------------------------

def pytest_addoption(parser):
    g = parser.getgroup("poolscope", "memory limits measured by the poolscope tracer")
    g.addoption("--poolscope", action="store_true", default=False,
                help="enforce limit_memory / limit_leaks markers (runs pytest under `poolscope record` "
                     "when it is not already traced)")
    g.addoption("--poolscope-bin", default=None, metavar="PATH",
                help="the poolscope program (default: $POOLSCOPE_BIN, then PATH)")
    g.addoption("--poolscope-out", default=None, metavar="FILE",
                help="the trace when pytest runs itself under record (default poolscope-pytest.<pid>.pst)")
    g.addoption("--poolscope-record-args", default="", metavar="ARGS",
                help="more options for `poolscope record` when pytest runs itself under it, e.g. '--stacks fp'")
    g.addoption("--poolscope-all", action="store_true", default=False,
                help="record the whole session (collection, fixtures), not only the tests' calls")
    g.addoption("--poolscope-lines", type=int, default=5, metavar="N",
                help="lines shown per exceeded limit (default 5)")


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_memory(size): fail the test when the memory it allocated and held "
                            "at once peaks above size (\"5 MB\"); needs --poolscope")
    config.addinivalue_line("markers", "limit_leaks(size): fail the test when what it allocated and still holds "
                            "at its end exceeds size (\"1 MB\"); needs --poolscope")
    if not config.getoption("poolscope"):
        return
    if not poolscope.active():
        return   # not traced: pytest_cmdline_main has run pytest again under the tracer
    config.pluginmanager.register(_Plugin(config), "poolscope-plugin")


def _command(config, binary, out):
    """The command that runs this pytest again under `poolscope record`."""
    args = list(config.invocation_params.args)
    argv = list(getattr(sys, "orig_argv", []) or [])
    if len(argv) > len(args) and (not args or argv[-len(args):] == args):
        py = argv[:len(argv) - len(args)]
        py[0] = sys.executable or py[0]
    else:
        py = [sys.executable, "-m", "pytest"]
    rec = [binary, "record"]
    if not config.getoption("poolscope_all"):
        rec.append("--paused")
    rec += shlex.split(config.getoption("poolscope_record_args") or "")
    return rec + ["-o", out, "--"] + py + args


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    if not config.getoption("poolscope") or poolscope.active():
        return None
    out = config.getoption("poolscope_out") or "poolscope-pytest.%d.pst" % os.getpid()
    out = os.path.join(str(config.invocation_params.dir), out)
    binary = find_binary(config.getoption("poolscope_bin"))
    if os.environ.get("POOLSCOPE_PYTEST_RERUN") == "1":
        raise pytest.UsageError(
            "poolscope: this pytest was run under `poolscope record` but the tracer is not in the process "
            "(POOLSCOPE_PYTHON=0, or the environment dropped LD_PRELOAD)")
    cmd = _command(config, binary or "poolscope", out)
    if binary is None:
        raise pytest.UsageError(
            "poolscope: --poolscope needs the tracer and no poolscope program was found "
            "(--poolscope-bin PATH, $POOLSCOPE_BIN, or PATH); run:\n  " + " ".join(shlex.quote(c) for c in cmd))
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.stop_global_capturing()
    sys.stderr.write("poolscope: not traced; running under the tracer: %s\n" % " ".join(shlex.quote(c) for c in cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    env = dict(os.environ, POOLSCOPE_PYTEST_RERUN="1")
    os.chdir(str(config.invocation_params.dir))
    if list(config.invocation_params.args) == sys.argv[1:]:
        os.execve(binary, cmd, env)       # the command line's own pytest: become the traced run
    import subprocess                     # pytest.main() from a program: a child, its status
    return subprocess.call(cmd, env=env)


class _Measure:
    """What one measured test gave."""
    __slots__ = ("peak", "peak_exact", "leaked", "peak_lines", "peak_what", "leak_lines", "seconds", "error")

    def __init__(self):
        self.peak = self.leaked = None
        self.peak_exact = True
        self.peak_lines = self.leak_lines = ()
        self.peak_what = "at the peak"
        self.seconds = 0.0
        self.error = None


class _Plugin:
    def __init__(self, config):
        self.config = config
        self.trace = find_trace()
        self.binary = find_binary(config.getoption("poolscope_bin"))
        self.paused = not poolscope.recording()   # started paused: record only the tests' calls
        self.n_lines = max(1, config.getoption("poolscope_lines"))
        self.root = str(config.rootpath) if hasattr(config, "rootpath") else str(config.rootdir)
        self.names = {}            # phase name -> node id
        self.instance = itertools.count(1)
        self.exact = None          # report has peak_selection_live_bytes (None: not known yet)
        self.can_flush = None
        self.measured = 0
        self.spent = 0.0
        self.tmp = tempfile.mkdtemp(prefix="poolscope-pytest.")
        config.add_cleanup(lambda: shutil.rmtree(self.tmp, ignore_errors=True))
        if self.trace is None:
            raise pytest.UsageError("poolscope: the tracer is in this process but its trace file was not found "
                                    "(POOLSCOPE_MANIFEST, /proc/self/fd)")
        if self.binary is None:
            raise pytest.UsageError("poolscope: no poolscope program to read the trace with "
                                    "(--poolscope-bin PATH, $POOLSCOPE_BIN, or PATH)")

    # -- the analyzer --

    def _flush(self):
        if self.can_flush is not False:
            ok = poolscope.flush()
            if self.can_flush is None:
                self.can_flush = ok
            if ok:
                return
        time.sleep(0.12)    # an older tracer: its flusher writes every ring every 50 ms

    def _report(self, *args):
        """`poolscope report TRACE ARGS --json` on the trace so far, parsed."""
        out = os.path.join(self.tmp, "report.json")
        err = os.path.join(self.tmp, "report.err")
        argv = [self.binary, "report", self.trace, "--json"] + list(args)
        fa = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
              (os.POSIX_SPAWN_OPEN, 1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              (os.POSIX_SPAWN_OPEN, 2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
        # posix_spawn with an environment without the tracer: no traced child
        pid = os.posix_spawn(self.binary, argv, _clean_env(), file_actions=fa)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        try:
            with open(out, "rb") as f:
                text = f.read()
            if rc == 0:
                return json.loads(text)
        except (OSError, ValueError):
            pass
        try:
            with open(err, "rb") as f:
                msg = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            msg = []
        raise RuntimeError("%s exited with %d: %s" % (" ".join(argv), rc, msg[-1] if msg else "no output"))

    def live_now(self):
        """Bytes live now as the trace tells (report's leaked_bytes of the trace so far)."""
        self._flush()
        return self._report("--no-symbols", "--top", "1")

    def measure(self, name, limits, baseline):
        """The call's figures from the trace so far; the lines only for a
        test over a limit (symbolizing costs most of a report: about
        0.1 s, against 0.03 s for the figures alone)."""
        m = _Measure()
        t0 = time.perf_counter()
        try:
            self._flush()
            j = self._report("--phase", name, "--no-symbols", "--top", "1")
            if "peak_selection_live_bytes" in j:
                self.exact = True
                m.peak = j["peak_selection_live_bytes"]
            else:
                self.exact = False
                m.peak_exact = False
                m.peak = max(0, j.get("peak_live_bytes", 0) - (baseline or 0))
            m.leaked = j.get("leaked_bytes", 0)
            over_mem = "limit_memory" in limits and m.peak > limits["limit_memory"][1]
            over_leak = "limit_leaks" in limits and m.leaked > limits["limit_leaks"][1]
            if over_mem or over_leak:
                sites = self._report("--phase", name, "--top", "50", "--depth", "8").get("sites", {})
            else:
                sites = {}
            # Sites live at the phase's peak of the whole live set that
            # allocated in the call. When they hold under half the figure,
            # that peak was not the call's own (memory from before the call
            # was freed in it): the lines that allocated most in the call.
            if over_mem:
                m.peak_lines = top_lines(sites.get("by_peak", []), "peak_bytes", self.n_lines, self.root,
                                         only_called=True, total=m.peak)
                if 2 * sum(b for b, _ in m.peak_lines) < m.peak:
                    m.peak_lines = top_lines(sites.get("by_bytes", []), "bytes", self.n_lines, self.root,
                                             total=m.peak)
                    m.peak_what = "bytes allocated during the test"
            if over_leak:
                m.leak_lines = top_lines(sites.get("leaks", []), "leaked_bytes", self.n_lines, self.root,
                                         total=m.leaked)
        except Exception as e:       # noqa: BLE001 - reported as the test's error
            m.error = str(e)
        m.seconds = time.perf_counter() - t0
        self.measured += 1
        self.spent += m.seconds
        return m

    # -- hooks --

    def _phase_name(self, item):
        name = item.name
        owner = self.names.setdefault(name, item.nodeid)
        if owner != item.nodeid:
            name = item.nodeid
            self.names.setdefault(name, item.nodeid)
        return name

    @staticmethod
    def _limits(item):
        """{marker: (as written, bytes)}; a marker without a size fails the test."""
        limits = {}
        for kind in ("limit_memory", "limit_leaks"):
            mk = item.get_closest_marker(kind)
            if mk is None:
                continue
            arg = mk.args[0] if mk.args else None
            for k in ("limit", "size", "memory_limit", "location_limit"):   # pytest-memray's names too
                if arg is None:
                    arg = mk.kwargs.get(k)
            try:
                limits[kind] = (arg, parse_size(arg))
            except ValueError as e:
                pytest.fail("poolscope: @pytest.mark.%s: %s" % (kind, e), pytrace=False)
        return limits

    @pytest.hookimpl(hookwrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        # the test function's call alone (pytest-memray's span): what
        # pytest_runtest_call adds around it is pytest's own (10 KB a test)
        item = pyfuncitem
        limits = self._limits(item)
        name = self._phase_name(item)
        inst = next(self.instance)
        baseline = None
        t0 = time.perf_counter()
        if limits and "limit_memory" in limits and self.exact is not True:
            try:
                j = self.live_now()
                baseline = j.get("leaked_bytes", 0)
                if "peak_selection_live_bytes" in j:
                    self.exact = True
                del j
            except Exception:        # noqa: BLE001 - the measurement at the end says it
                baseline = None
        self.spent += time.perf_counter() - t0 if limits else 0.0
        if self.paused:
            poolscope.start()
        poolscope.begin(name, inst)
        try:
            yield
        finally:
            poolscope.end(name, inst)
            if self.paused:
                poolscope.stop()
        if limits:
            item.stash[_KEY] = (name, limits, self.measure(name, limits, baseline))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        if call.when != "call" or _KEY not in item.stash:
            return
        name, limits, m = item.stash[_KEY]
        msg = self._verdict(item, name, limits, m)
        if msg and rep.passed:
            rep.outcome = "failed"
            rep.longrepr = msg
        elif msg:
            rep.sections.append(("poolscope", msg))

    def _verdict(self, item, name, limits, m):
        """The failure message, or None when every limit holds."""
        hint = "phase %s of %s: poolscope report %s --phase %s" % (
            name, self.trace, shlex.quote(self.trace), shlex.quote(name))
        if m.error:
            return "poolscope: %s could not be measured: %s\n%s" % (item.nodeid, m.error, hint)
        parts = []
        if "limit_memory" in limits:
            given, lim = limits["limit_memory"]
            if m.peak > lim:
                how = "" if m.peak_exact else " (peak live minus live at the start: this report has no " \
                                              "peak_selection_live_bytes)"
                parts.append(("%s allocated %s held at once (its peak), over its limit_memory(%r) of %s%s"
                              % (name, format_size(m.peak), given, format_size(lim), how), m.peak_lines,
                              m.peak_what))
        if "limit_leaks" in limits:
            given, lim = limits["limit_leaks"]
            if m.leaked > lim:
                parts.append(("%s leaked %s (allocated during the test, still live at its end), over its "
                              "limit_leaks(%r) of %s" % (name, format_size(m.leaked), given, format_size(lim)),
                              m.leak_lines, "leaked"))
        if not parts:
            return None
        out = []
        for head, lines, what in parts:
            out.append("poolscope: " + head)
            if lines:
                out.append("  top lines (%s):" % what)
                out += ["    %12s  %s" % (_human(b), l) for b, l in lines]
            else:
                out.append("  (no site recorded: record with stacks to see the lines)")
        out.append("  " + hint)
        return "\n".join(out)

    def pytest_report_header(self, config):
        mode = "only the tests' calls" if self.paused else "the whole session"
        return "poolscope: tracing %s into %s" % (mode, self.trace)

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        line = "poolscope: trace %s" % self.trace
        if self.measured:
            line += "; %d test%s measured in %.2f s (%.0f ms each)" % (
                self.measured, "" if self.measured == 1 else "s", self.spent, 1000 * self.spent / self.measured)
        tr.write_line(line)


def _human(n):
    for unit, k in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= k:
            return "%.2f %s" % (n / k, unit)
    return "%d B" % n


_KEY = pytest.StashKey()

"""poolscope.torch — scopes for PyTorch models and generate loops.

    import poolscope.torch as pst
    h = pst.instrument(model)            # "forward" per call, a scope per layer
    ...
    h.remove()

    for step in pst.steps(range(max_new_tokens)):   # 1st: "prefill", then "decode"
        logits = model(ids)

`instrument` puts forward pre/post hooks on the model (one "forward" scope
per call) and on its submodules at `depth` (one scope per call of each,
named after the module's class, e.g. "LlamaDecoderLayer", or `layer_name`).
The analyzers read "forward" with `poolscope report --phase forward`, and
"decode" scopes as decode steps (analyzer/metrics.h, step_marker):
`report --phase decode`, `allocs_per_decode_step`, `replay`.

Torch is imported only when `instrument` needs its container classes, so
this module imports without torch (prefill/decode_step/steps work alone).
Without the tracer nothing is hooked: `instrument` returns a handle with the
modules it would have hooked and no hooks, and `steps(it)` returns `it`.
"""

from . import active, begin, end, scope, _next_instance

__all__ = ["instrument", "Instrumented", "prefill", "decode_step", "steps", "modules_at_depth"]


def _is_container(m):
    """ModuleList and ModuleDict only hold modules and are never called:
    they are not a level of depth (model.layers[3] is at depth 1, as a child
    of a Sequential is)."""
    import torch.nn as nn
    return isinstance(m, (nn.ModuleList, nn.ModuleDict))


def modules_at_depth(model, depth=1):
    """[(qualified name, module)] of the submodules `depth` calls below
    `model` (depth 0: the model itself), containers not counted, each module
    once, in registration order."""
    if depth <= 0:
        return [("", model)]
    out, seen = [], set()

    def walk(m, d, path):
        for cname, child in m.named_children():
            p = path + "." + cname if path else cname
            if _is_container(child):
                walk(child, d, p)
            elif d + 1 == depth:
                if id(child) not in seen:
                    seen.add(id(child))
                    out.append((p, child))
            else:
                walk(child, d + 1, p)
    walk(model, 0, "")
    return out


def _shape_payload(args):
    """The shape of the first tensor argument (up to 8 dims), or ()."""
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None:
            return tuple(int(s) for s in shape)[:8]
    return ()


class Instrumented:
    """What instrument() returns. `modules`: [(qualified name, scope name)]
    of the submodules chosen; `n_hooks`: hooks registered (0 without the
    tracer). remove() takes every hook off; usable as a context manager."""

    def __init__(self, modules):
        self.modules = modules
        self._handles = []

    @property
    def n_hooks(self):
        return len(self._handles)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def _post_hook(module, hook, handles):
    """register_forward_hook(always_call=True) where torch has it (2.1+:
    the end is emitted even when forward raises), else without."""
    try:
        handles.append(module.register_forward_hook(hook, always_call=True))
    except TypeError:
        handles.append(module.register_forward_hook(hook))


def _hook_scope(module, name, handles, instance_of, payload_of):
    """Begin `name` before each call of module, end it after. instance_of()
    gives the begin's instance; a per-module stack pairs the end with it
    (nested calls of one module pair innermost first). One model called from
    two threads at once would mix its pairs: instrument one per thread."""
    open_ = []

    def pre(mod, args):
        inst = instance_of()
        open_.append(inst)
        begin(name, inst, *payload_of(args))

    def post(mod, args, out):
        if open_:
            end(name, open_.pop())

    handles.append(module.register_forward_pre_hook(pre))
    _post_hook(module, post, handles)


def instrument(model, depth=1, name="forward", layer_name=None, layers=None):
    """Scopes for `model`: `name` ("forward") around each call of the model,
    instance = a process-unique call id, payload = the shape of the first
    tensor argument; and around each call of the submodules at `depth`
    (`modules_at_depth`; depth=0: the model alone), or of the modules given
    in `layers` instead (e.g. model.model.layers), named `layer_name` or
    else the module's class name, instance = its index in that list.
    Returns an Instrumented handle (remove() takes the hooks off)."""
    if layers is not None:
        chosen = [("%s" % i, m) for i, m in enumerate(layers)]
    elif depth > 0:
        chosen = modules_at_depth(model, depth)
    else:
        chosen = []
    h = Instrumented([(q, layer_name or type(m).__name__) for q, m in chosen])
    if not active():
        return h
    _hook_scope(model, name, h._handles, _next_instance, _shape_payload)
    for i, (q, m) in enumerate(chosen):
        _hook_scope(m, h.modules[i][1], h._handles,
                    (lambda i=i: i), (lambda args: ()))
    return h


def prefill(instance=None, payload=()):
    """A "prefill" scope (context manager or decorator)."""
    return scope("prefill", instance, payload)


def decode_step(instance=None, payload=()):
    """A "decode" scope: one decode step for the analyzers."""
    return scope("decode", instance, payload)


def _steps(iterable, first_is_prefill):
    for i, item in enumerate(iterable):
        name = "prefill" if i == 0 and first_is_prefill else "decode"
        inst = _next_instance()
        begin(name, inst, i)
        try:
            yield item
        finally:
            end(name, inst)


def steps(iterable, with_prefill=True):
    """Iterate `iterable` with each loop body inside a scope: the first
    "prefill" (unless with_prefill=False), every other one "decode" (payload:
    the step's index). A loop left by break or an exception closes its
    scope when the generator is dropped (at once in CPython). Without the
    tracer it returns `iterable` itself."""
    if not active():
        return iterable
    return _steps(iterable, with_prefill)

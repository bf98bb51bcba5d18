"""mixprec.torch: what half precision does to a PyTorch model's numbers,
measured inside its own training loop.

    mon = Monitor(model, formats=("fp16", "bf16"), every=10)
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        mon.after_backward(scaler, loss=loss)   # or a number: the scale the gradients carry
        scaler.step(opt); scaler.update()
        mon.after_step(scaler)
    mon.report("report.html")

On every `every`-th step (the first included) the monitor records:

- for every parameter, what storing its gradient (as it is in .grad, loss
  scale included) in each format would lose: underflow (nonzero values that
  become 0), subnormal, overflow (inf in .grad included) and NaN counts
  (stats(), history());
- for every module, its output as it is in its dtype (exact zeros,
  subnormals, infs, NaNs, the largest finite magnitude, and the headroom
  log2(format max / that) in each format), and the same for the gradient of
  its output in the backward pass (activations());
- with shadow=True, the step's gradients recomputed in fp32 from the same
  inputs and the same gradient of the model's output, and per parameter the
  values nonzero in fp32 that are 0 in the run's .grad (lost()).

On every step it reads the loss scale, and a step after which the scale went
down is a skipped step: the parameters whose gradients held inf or NaN are
named (skips()). A step that was not skipped with a non-finite loss (or,
on a recorded step, gradients) is a warning and in nonfinite().

after_backward may come before or after scaler.unscale_(opt) and clipping:
the scaler's record says whether the gradients still carry the scale. The
forward hooks are on the modules only for recorded steps; forwards without
gradients or in eval() mode are not the step's. Give Monitor the module
torch.compile returns: its recorded steps run eagerly, the others compiled.

Counts of CPU tensors are computed by libmixprec on the tensor's memory;
those of other tensors by torch's operations on their device, one small
vector of counts per tensor, all read once per recorded step
(counts="torch" takes that path for CPU tensors too: the same numbers).
"""
import ctypes
import functools
import math
import numbers
import operator
import os
import shlex
import statistics
import sys
import time
import types
import warnings

import numpy as np
import torch

from . import _memory
from ._lib import (DTYPES, HIST_BINS, ConvertStats, MixprecError, Report, ReportLayerSeries, ReportRun, ReportSkip,
                   TensorStats,
                   ValueCounts, check, dtype_code, integer, lib, names, path_arg, text_arg, threads_check)

__all__ = ["Monitor", "MixprecOverflow"]

_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_TORCH2 = int(torch.__version__.split(".")[0]) >= 2
_HIST_LO = -64  # the report's histogram: log2 |g| bins 2^-64 .. 2^19, ends clamped (as the CLI's)


def _scale_of(s, what):
    """The loss scale a GradScaler (enabled or not) or a number stands for: another type is a TypeError, a
    scale that is not finite and > 0 a ValueError, each naming what (the method and its argument)."""
    if hasattr(s, "get_scale"):
        v = float(s.get_scale())
    elif isinstance(s, torch.Tensor) and s.numel() == 1 and not s.is_complex() \
            and s.dtype != torch.bool:
        v = float(s)
    elif isinstance(s, numbers.Real) and not isinstance(s, (bool, np.bool_)):
        v = float(s)
    else:
        raise TypeError("mixprec: %s takes a GradScaler or a number (the loss scale), not %s"
                        % (what, type(s).__name__))
    if not (math.isfinite(v) and v > 0):
        raise ValueError("mixprec: %s: the loss scale must be finite and > 0, not %r" % (what, v))
    return v


_RT_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _grad_stats(g, factor, formats):
    """What the counts of a gradient (its zero, subnormal, inf and NaN values and amax, counted with the
    store counts) do not give: the finite values' min, max, mean and std and the smallest nonzero magnitude,
    as .grad holds them; and, for each format, the error of storing the nonzero finite values times factor
    (the loss scale they carry) in it and back (fp16, bf16 and fp32 by torch's conversions, which round as
    mixprec's; e4m3 and e5m2 by libmixprec's): the mean squared error and the largest relative error."""
    x = g.detach().float()
    xf = x[torch.isfinite(x)]
    nan = float("nan")
    mm = torch.stack([xf.min(), xf.max(), xf.mean(), xf.std(unbiased=False)]).tolist() if xf.numel() else [nan] * 4
    s = xf[xf != 0]
    out = {"min": mm[0], "max": mm[1], "mean": mm[2], "std": mm[3],
           "amin_nonzero": s.abs().min().item() if s.numel() else nan, "round_trip": {}}
    s = s * factor
    for f in formats:
        if not s.numel():
            out["round_trip"][f] = None
            continue
        if f in _RT_DTYPES:
            back = s.to(_RT_DTYPES[f]).float()
        else:  # e4m3, e5m2: libmixprec's own conversions there and back, on the CPU
            v = s.detach().cpu().contiguous().numpy()
            codes, b = np.empty(v.size, np.uint8), np.empty(v.size, np.float32)
            threads_check()
            check(lib.mp_convert(codes.ctypes.data, DTYPES[f], v.ctypes.data, DTYPES["fp32"], v.size, None))
            check(lib.mp_convert(b.ctypes.data, DTYPES["fp32"], codes.ctypes.data, DTYPES[f], v.size, None))
            back = torch.from_numpy(b).to(s.device)
        err = back - s
        out["round_trip"][f] = {"mse": (err / factor).pow(2).mean().item(),
                                "max_relative": (err.abs() / s.abs()).max().item()}
    return out


def _jsonable(x):
    """x with every float that JSON has no number for (inf, NaN: a headroom over a tensor of zeros) as None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


class MixprecOverflow(MixprecError):
    """Raised by a Monitor with trap set at the first inf or NaN in a module's output or in its gradient: the
    message names the step, the module, the tensor, their magnitudes and the modules that ran before it."""


def _magnitudes(ts):
    """'[min, max]' of each tensor's absolute finite values, and its inf and NaN counts, for a trap's frames."""
    out = []
    for t in ts:
        a = t.detach().float().abs()
        fin = a[torch.isfinite(a)]
        rng = "[%.3g, %.3g]" % (fin.min().item(), fin.max().item()) if fin.numel() else "[no finite value]"
        bad = (~torch.isfinite(a)).sum().item()
        out.append(rng + (" with %d inf/NaN" % bad if bad else ""))
    return ", ".join(out) or "none"


def _carried(scaler, optimizer, scale):
    """The loss scale the gradients carry now: scale, or 1 after scaler.unscale_(optimizer), as the
    GradScaler's per-optimizer record says (torch.amp's OptState). A number is the scale they carry."""
    states = getattr(scaler, "_per_optimizer_states", None)
    if states is None or not getattr(scaler, "_enabled", True):
        return scale
    if optimizer is not None:
        st = states.get(id(optimizer))
        stages = {st["stage"].name} if st else {"READY"}
    else:
        stages = {st["stage"].name for st in states.values()}
    if "STEPPED" in stages:
        raise MixprecError("mixprec: after_backward after scaler.step(): the gradients are unscaled and the "
                           "weights updated; call it after backward and before scaler.step (before or after "
                           "scaler.unscale_)")
    if stages == {"UNSCALED"}:
        return 1.0
    if "UNSCALED" in stages:
        raise MixprecError("mixprec: after_backward: scaler.unscale_ was called for some of this scaler's "
                           "optimizers and not for others; say whose gradients these are: "
                           "after_backward(scaler, optimizer=opt)")
    return scale


def _warn_user(msg):
    """A RuntimeWarning attributed to the first caller outside this module (the user's call that led here)."""
    f, level = sys._getframe(1), 2
    while f is not None and f.f_code.co_filename == __file__:
        f, level = f.f_back, level + 1
    warnings.warn(msg, RuntimeWarning, stacklevel=level)


def _nonfinite_text(s):
    what = []
    if s["loss"] is not None and not math.isfinite(s["loss"]):
        what.append("its loss is %r" % s["loss"])
    if s["params"]:
        p = s["params"]
        what.append("inf/NaN in the gradients of " + ", ".join(p[:3]) + (" and %d more" % (len(p) - 3)
                                                                          if len(p) > 3 else ""))
    return " and ".join(what)


def _values(t, mem=None):
    """t's values as they are in their dtype, counted by libmixprec (mem: _memory(t), when the caller has it)."""
    ptr, code, n, owner = mem or _memory(t)
    c = ValueCounts()
    threads_check()
    check(lib.mp_count_values(ptr, code, n, ctypes.byref(c)))
    return {"elements": n, "zero": c.zero, "subnormal": c.subnormal, "inf": c.inf, "nan": c.nan,
            "amax": float(c.amax)}


def _store(mem, code):
    """What storing the values at mem (_memory's tuple) in the format code would do (mp_convert_count)."""
    ptr, src, n, owner = mem
    st = ConvertStats()
    threads_check()
    check(lib.mp_convert_count(code, ptr, src, n, 1.0, ctypes.byref(st)))
    return {"total": n, "underflow": st.underflow, "subnormal": st.subnormal, "overflow": st.overflow, "nan": st.nan}


def _tensors(out):
    """The floating-point tensors in a module's output (a tensor, or tuples,
    lists and dicts of them), in order."""
    if isinstance(out, torch.Tensor):
        if out.is_floating_point():
            yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)


def _on_grad(t, fn):
    """Calls fn(g) with the gradient of t (a non-leaf tensor) in the backward pass, through a hook on the
    autograd node that made t: it lives as long as that node (one step), and it sees t's own gradient even
    when a later module modified t in place (a tensor hook does not on torch 1.13). A leaf (a module that
    passes a leaf input through) is not watched: False."""
    node = t.grad_fn
    if node is None:
        return False
    i = t.output_nr

    def hook(grad_inputs, grad_outputs):
        if grad_outputs[i] is not None:
            fn(grad_outputs[i])
    node.register_hook(hook)
    return True


def _floats(obj):
    """obj (the model's arguments) with its floating-point tensors in fp32, inside tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.is_floating_point() else obj
    if isinstance(obj, tuple) and hasattr(obj, "_make"):  # a namedtuple, PackedSequence
        return obj._make(_floats(o) for o in obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_floats(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _floats(v) for k, v in obj.items()}
    return obj


def _reaches(a, b):
    """Whether autograd node b is a strict (transitive) input of node a."""
    todo, seen = [n for n, _ in a.next_functions] if a is not None else [], set()
    while todo:
        f = todo.pop()
        if f is b:
            return True
        if f is None or f in seen:
            continue
        seen.add(f)
        todo.extend(n for n, _ in f.next_functions)
    return False


def _sources(pairs):
    """The (output, gradient) pairs to push back: each output tensor once, and none that another output was
    computed from (the logits of a model that also returns its loss received their gradient through the
    loss, and pushing both back would count it twice). Outputs of one node (torch.chunk) are all kept."""
    once, seen = [], set()
    for o, g in pairs:
        if id(o) not in seen:
            seen.add(id(o))
            once.append((o, g))
    return [(o, g) for i, (o, g) in enumerate(once)
            if not any(j != i and _reaches(once[j][0].grad_fn, o.grad_fn) for j in range(len(once)))]


def _add(total, counts):
    for k, v in counts.items():
        if k == "amax":
            total[k] = max(total.get(k, 0.0), v)
        elif k != "dtype":
            total[k] = total.get(k, 0) + v


def _headroom(amax, fmax):
    return math.log2(fmax / amax) if amax > 0 else math.inf


def _limits(code):
    """The fp32 magnitudes at which storing into format code changes what it does, found by bisection over
    fp32 bit patterns with libmixprec's own conversion (mp_convert_count of one value): (the smallest that
    is not stored as 0, the smallest stored as a normal number or beyond, the smallest that overflows; inf
    for never). The torch-operations counts compare against them, so both paths count the same values."""
    if code in _LIMITS:
        return _LIMITS[code]
    one = np.zeros(1, dtype=np.uint32)

    def st(bits):
        one[0] = bits
        s = ConvertStats()
        check(lib.mp_convert_count(code, one.ctypes.data, DTYPES["fp32"], 1, 1.0, ctypes.byref(s)))
        return s

    def first(pred):
        lo, hi = 1, 0x7F7FFFFF  # the positive finite fp32 values, in order
        if not pred(st(hi)):
            return math.inf
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(st(mid)):
                hi = mid
            else:
                lo = mid + 1
        return float(np.array([lo], dtype=np.uint32).view(np.float32)[0])

    _LIMITS[code] = (first(lambda s: not s.underflow), first(lambda s: not s.underflow and not s.subnormal),
                     first(lambda s: s.overflow))
    return _LIMITS[code]


_LIMITS = {}
_GRAD = operator.attrgetter("grad")
_LOSS_READS = 16  # losses given as tensors are read all together at recorded and skipped steps, or 16 steps at most
_isfinite, _perf_counter, _NAN = math.isfinite, time.perf_counter, math.nan
_NVALUES, _NSTORE = 5, 4  # the layout of a counts vector: see _Counter


def _plain(t):
    """t as the C functions read it: fp32, fp16 and bf16 as they are, other floating types in fp32."""
    t = t.detach()
    return t if t.dtype in _NAMES else t.float()


class _Counter:
    """Counts of one tensor as one vector: its values as they are ([zero, subnormal, inf, nan, amax]), what
    storing it times a scale in each format would do ([underflow, subnormal, overflow, nan] per format) and
    the report's histogram ([zeros, bins...]). By libmixprec on the tensor's memory (a list, at once) for a
    CPU tensor, by torch's operations on the tensor's device otherwise, or always with torch_ops (a float64
    tensor, read later with every other one of the step: _Pending)."""

    def __init__(self, codes, torch_ops):
        self.codes, self.torch_ops = codes, torch_ops
        self.limits = [_limits(c) for c in codes]

    def __call__(self, t, values=True, store=False, scale=1.0, hist=False, shift=0):
        t = _plain(t)
        if self.torch_ops or t.device.type != "cpu":
            return self._torch(t, values, store, scale, hist, shift)
        mem = _memory(t)
        out = []
        if values:
            c = _values(t, mem)
            out += [c["zero"], c["subnormal"], c["inf"], c["nan"], c["amax"]]
        if store:
            ptr, src, n, owner = mem
            for code in self.codes:
                s = ConvertStats()
                threads_check()
                check(lib.mp_convert_count(code, ptr, src, n, scale, ctypes.byref(s)))
                out += [s.underflow, s.subnormal, s.overflow, s.nan]
        if hist:
            h = _Histogram(_HIST_LO - shift)
            h.add(mem)
            bins, zeros = h.result()
            out += [zeros] + bins
        return out

    def _torch(self, t, values, store, scale, hist, shift):
        parts = []
        fin = torch.isfinite(t)
        nan = torch.isnan(t).sum()
        if values:
            a = t.abs()
            amax = (torch.where(fin, a, torch.zeros((), dtype=t.dtype, device=t.device)).max() if t.numel()
                    else torch.zeros((), device=t.device))
            parts += [(t == 0).sum(), ((a < torch.finfo(t.dtype).tiny) & (t != 0)).sum(), torch.isinf(t).sum(), nan,
                      amax]
        if store or hist:
            x = t.float()
        if store:
            y = (x * scale if scale != 1.0 else x).abs()  # the product in fp32, as mp_convert_count's
            nz = (x != 0) & fin
            inf = torch.isinf(x)
            for nonzero, normal, over in self.limits:
                parts += [(nz & (y < nonzero)).sum(), (fin & (y >= nonzero) & (y < normal)).sum(),
                          (inf | (fin & (y >= over))).sum(), nan]
        if hist:
            nzf = fin & (x != 0)
            _, e = torch.frexp(torch.where(nzf, x, torch.ones((), device=x.device)))  # |x| = m 2^e, m in [.5, 1)
            b = torch.where(nzf, (e.long() - 1 - (_HIST_LO - shift)).clamp(0, HIST_BINS - 1),
                            torch.full((), HIST_BINS, dtype=torch.long, device=x.device))
            bins = torch.zeros(HIST_BINS + 1, dtype=torch.long, device=x.device)
            bins.scatter_add_(0, b.reshape(-1), torch.ones_like(b.reshape(-1)))
            parts += [(x == 0).sum()]
            parts = [p.reshape(1).to(torch.float64) for p in parts] + [bins[:HIST_BINS].to(torch.float64)]
            return torch.cat(parts)
        return torch.stack([p.to(torch.float64) for p in parts])


class _Pending:
    """Counts waiting to be read: the lists of the libmixprec path at once, the tensors of the torch path
    all together when read() is called (one copy to the host per device and recorded step)."""

    def __init__(self):
        self.items = []

    def add(self, vec, done):
        if isinstance(vec, list):
            done(vec)
        else:
            self.items.append((vec, done))

    def read(self):
        items, self.items = self.items, []
        by_dev = {}
        for vec, done in items:
            by_dev.setdefault(vec.device, []).append((vec, done))
        for group in by_dev.values():
            flat = torch.cat([v for v, _ in group]).tolist()
            i = 0
            for v, done in group:
                done(flat[i:i + v.numel()])
                i += v.numel()


def _as_values(n, v):
    return {"elements": n, "zero": int(v[0]), "subnormal": int(v[1]), "inf": int(v[2]), "nan": int(v[3]),
            "amax": float(v[4])}


def _as_store(n, v):
    return {"total": n, "underflow": int(v[0]), "subnormal": int(v[1]), "overflow": int(v[2]), "nan": int(v[3])}


# ---- under torch.distributed: each recorded step's counts over the ranks ----

def _sum_counts(dicts):
    """Counts dicts ({"total": n, ...} or a module's {"dtype", "elements", ..., "amax"}) of the ranks as one: summed,
    amax the largest, dtype the first's."""
    out = dict(dicts[0])
    for d in dicts[1:]:
        for k, v in d.items():
            if k == "amax":
                out[k] = max(out[k], v)
            elif k != "dtype" and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def _sum_keyed(maps, merge):
    """{name: value} of the ranks as one, the names in the order they first appear; merge(values of the ranks that
    have the name)."""
    names = list(dict.fromkeys(n for m in maps for n in m))
    return {n: merge([m[n] for m in maps if n in m]) for n in names}


def _sum_tstats(parts):
    """tensor_stats' raw figures of one parameter from several ranks, each with its own values' counts: min, max and
    the smallest nonzero magnitude over all, mean, std and each format's MSE weighted by the values they are of,
    the largest relative error the largest."""
    nan = float("nan")
    ws = [p["_n"] for p in parts]
    n = sum(ws)
    out = {"_n": n, "_nz": sum(p["_nz"] for p in parts)}
    fin = [(p, w) for p, w in zip(parts, ws) if w > 0]
    out["min"] = min((p["min"] for p, _ in fin), default=nan)
    out["max"] = max((p["max"] for p, _ in fin), default=nan)
    out["mean"] = sum(p["mean"] * w for p, w in fin) / n if n else nan
    # the variance over all: E[x^2] - mean^2, E[x^2] of each rank being its std^2 + mean^2
    out["std"] = math.sqrt(max(sum((p["std"] ** 2 + p["mean"] ** 2) * w for p, w in fin) / n - out["mean"] ** 2, 0.0)) \
        if n else nan
    out["amin_nonzero"] = min((p["amin_nonzero"] for p in parts if p["_nz"] > 0), default=nan)
    out["round_trip"] = {}
    for f in parts[0]["round_trip"]:
        rts = [(p["round_trip"][f], p["_nz"]) for p in parts if p["round_trip"].get(f) is not None]
        nz = sum(w for _, w in rts)
        out["round_trip"][f] = {"mse": sum(r["mse"] * w for r, w in rts) / nz,
                                "max_relative": max(r["max_relative"] for r, _ in rts)} if nz else None
    return out


def _sum_lost(parts):
    """lost() of one parameter from several ranks: the counts summed, the MSE weighted by the values compared (the
    nonzero ones in fp32), the largest relative error the largest."""
    out = {k: sum(p[k] for p in parts) for k in ("total", "lost", "dead")}
    ws = [p["total"] - p["dead"] for p in parts]
    w = sum(ws)
    if "mse" in parts[0]:
        out["mse"] = sum(p["mse"] * x for p, x in zip(parts, ws)) / w if w else 0.0
        out["max_relative"] = max(p["max_relative"] for p in parts)
    return out


class Monitor:
    """Watches model's numbers in a training loop; see the module's help.

    formats: the formats whose losses are counted ("fp16", "bf16", "e4m3",
    "e5m2"; not "e8m0" or "e2m1"); the first is the one the report's per-layer
    charts use.
    every: record every every-th step (1: every step), from step start
    (0) to before step stop (None: no end). layers: a name or regular
    expression, or a list of them: only the parameters and modules it
    matches (the whole name, or a dotted prefix of it) are watched (None:
    all). shadow: also recompute
    the recorded steps' gradients in fp32 (one more forward and backward of
    the model in fp32 per recorded step; needs fp32 parameters, as autocast
    keeps them, and one forward with gradients per step: no gradient
    accumulation). On torch 1.13, whose forward pre-hooks do not see keyword
    arguments, shadow=True wraps model.forward until close().
    counts: "auto" counts CPU tensors with libmixprec and other tensors with
    torch's operations on their own device; "torch" uses torch's operations
    for every tensor (the same numbers: the GPU path, checked on the CPU).

    The model's parameters and modules are read again on every recorded
    step: one replaced, added or removed since is a RuntimeWarning naming it,
    and the monitor watches the model as it is from that step on.

    trap: True, or a path for the report: on every step, recorded or not,
    every module's output and the gradient of each output are checked, and at
    the first inf or NaN the run stops with MixprecOverflow, naming the step,
    the module and the tensor, with the magnitudes of the inputs and outputs
    of the last 20 modules that ran (as Hugging Face's underflow_overflow
    debugger); the report is written first when trap is a path, and the
    monitor is closed. It checks the modules the model has when the monitor
    is made, at the cost of a check (a device sync) per module and step. With
    a loss scaler, a gradient overflow that the scaler would skip stops the
    run too.

    stats: also compute tensor_stats() on recorded steps (min, max, mean,
    std, dynamic range and each format's round-trip error of every gradient;
    about as much work again as the counts on those steps).
    log: a path: each recorded step as one JSON line (to_json()'s
    "recorded" entries) as the run goes, written at its after_step.
    tensorboard: a torch.utils.tensorboard.SummaryWriter: each recorded
    step's loss, loss scale, per-parameter underflow and overflow fractions
    and per-module headroom as scalars ("mixprec/...").

    group: under torch.distributed, the process group whose ranks' counts
    are put together on each recorded step (None: the default group, when
    torch.distributed is initialized; False: each rank counts alone). Each
    rank's activations and their gradients are summed. The weight gradients
    are counted once where every rank counted the same (DDP: all-reduced,
    the same on every rank), else summed (DDP's no_sync, sharded or
    model-parallel parameters); updates() as the gradients; with shadow, the
    fp32 gradients are averaged over the ranks as DDP averages the run's.
    Every rank of the group must reach each recorded step (two collectives,
    and one more at its after_step); rank 0 writes the log. A
    DistributedDataParallel model is watched as the module it wraps.

    mixprec.lightning.MixprecCallback and mixprec.huggingface's
    MixprecTrainerCallback attach a Monitor to a Lightning or Hugging Face
    Trainer with one line (each importable where that library is)."""

    def __init__(self, model, formats=("fp16", "bf16"), every=10, shadow=False, counts="auto", trap=False,
                 log=None, tensorboard=None, layers=None, start=0, stop=None, stats=False, group=None):
        if not hasattr(model, "named_parameters") or not hasattr(model, "named_modules"):
            raise TypeError("mixprec: Monitor watches a torch.nn.Module (model), not %s" % type(model).__name__)
        if group is not None and group is not False and not type(group).__name__.endswith("ProcessGroup"):
            raise TypeError("mixprec: Monitor's group is a torch.distributed process group, None (the default group "
                            "when torch.distributed is initialized) or False (no sums over ranks), not %s"
                            % type(group).__name__)
        self._group = group
        formats = names(formats, "formats")
        if not formats:
            raise ValueError("mixprec: Monitor needs at least one format (formats is empty)")
        self.formats = formats
        self._codes = [dtype_code(f, "formats") for f in self.formats]
        for f, c in zip(self.formats, self._codes):
            if c in (DTYPES["e8m0"], DTYPES["e2m1"]):
                raise ValueError("mixprec: formats: Monitor counts fp32, fp16, bf16, e4m3 and e5m2 stores, not %s "
                                 "(e8m0 holds block scales; fp4 values are scaled per block of 16 or 32)" % f)
        self._fmax = {f: lib.mp_format(c).contents.max for f, c in zip(self.formats, self._codes)}
        every = integer(every, "Monitor's every", 1)
        if not isinstance(stats, (bool, np.bool_)):
            raise TypeError("mixprec: Monitor's stats is True or False, not %s" % type(stats).__name__)
        self._want_stats = bool(stats)
        self.start = integer(start, "Monitor's start", 0)
        self.stop = None if stop is None else integer(stop, "Monitor's stop", self.start + 1)
        if layers is None:
            self._layer_re = None
        else:
            import re
            pats = [layers] if isinstance(layers, str) else names(layers, "Monitor's layers")
            try:
                self._layer_re = [re.compile(p) for p in pats]
            except re.error as e:
                raise ValueError("mixprec: Monitor's layers: %r is not a regular expression (%s)" % (e.pattern, e))
        if not isinstance(shadow, (bool, np.bool_)):
            raise TypeError("mixprec: Monitor's shadow is True or False, not %s" % type(shadow).__name__)
        text_arg(counts, "Monitor's counts", "\"auto\" or \"torch\"")
        if counts not in ("auto", "torch"):
            raise ValueError("mixprec: Monitor's counts is \"auto\" or \"torch\", not %r" % (counts,))
        # torch.compile's module: its original's names, and the recorded steps run eagerly (_attach)
        self._compiled = None
        if hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule":
            if not callable(model.__dict__.get("forward")):
                raise MixprecError("mixprec: this torch.compile module (torch %s) has no forward of its own to "
                                   "run eagerly on recorded steps; give Monitor the uncompiled module and call "
                                   "it uncompiled" % torch.__version__)
            self._compiled, model = model, model._orig_mod
        if type(model).__name__ == "DistributedDataParallel" and isinstance(getattr(model, "module", None),
                                                                            torch.nn.Module):
            model = model.module  # the module DDP runs: its names without "module.", and its forward for the shadow
        self.model, self.every, self.shadow = model, every, bool(shadow)
        self._unseen_warned = False
        self._count = _Counter(self._codes, counts == "torch")
        self._pending = _Pending()
        self._all_params, self._modules = [], []  # as the model has them now: (name, object)
        self._owner = {}  # parameter name -> module name (the module holding it directly), every one seen
        self._layers = {}  # module name -> whether the report draws it as a layer, every one seen, in order
        self._read_model()
        self._hooks, self._mod_hooks, self._compiled_forward, self._closed = [], [], None, False
        self._forward = None
        if self.shadow and not _TORCH2:  # torch 1.13's pre-hooks do not see keyword arguments: wrap its forward
            def forward(mod, *args, **kwargs):  # a method of the model: a deep copy calls its own
                if mod is self.model and self._hooks:
                    self._root_pre_hook(mod, args, kwargs)
                return type(mod).forward(mod, *args, **kwargs)
            model.forward = self._forward = types.MethodType(forward, model)
        self._in_shadow = False
        self.step = 0  # steps ended by after_step
        self._steps, self._unread = [], []  # see _loss; the steps whose loss (a tensor) is not read yet
        self._nonfinite = []
        self._scale_now = None
        self._pending_loss = None
        self._grads = None  # the step's gradient tensors, as after_backward found them
        self._history = {}  # step -> record
        self._skips = []
        self._scale_key = None  # a GradScaler's scale tensor, its version and value, as last read
        self._next_rec = self._following(0)  # the next step to record (None: none)
        self._new_record()
        if self._next_rec == 0:
            self._attach()
        # under torch.distributed, rank 0 writes the log (the records, summed over ranks, are the same on all)
        self._log = None if log is None or self._rank() != 0 else open(path_arg(log, "Monitor's log"), "w",
                                                                        encoding="utf-8")
        if tensorboard is not None and not callable(getattr(tensorboard, "add_scalar", None)):
            raise TypeError("mixprec: Monitor's tensorboard is a torch.utils.tensorboard.SummaryWriter (or anything "
                            "with add_scalar), not %s" % type(tensorboard).__name__)
        self._tb = tensorboard
        self._trap_hooks, self._frames, self._trap = [], [], None
        if trap is not False and trap is not None:
            self._trap = trap if trap is True else path_arg(trap, "Monitor's trap")
            self._arm_trap()

    # ---- the model's parameters and modules, read again when they change ----

    def _read_model(self):
        """Reads the model's parameters and modules (again); returns what changed since the last read, as
        text ("" for nothing, and on the first read). A replaced, added or removed parameter or module is
        watched, or no longer, from here on; the report keeps what was recorded of the removed ones."""
        params = list(self.model.named_parameters())
        modules = [(n or "(model)", m) for n, m in self.model.named_modules()]
        changes = []
        if self._modules:
            for what, old, new in (("parameter", self._all_params, params), ("module", self._modules, modules)):
                before, now = dict(old), dict(new)
                for verb, names in (("added", [n for n in now if n not in before]),
                                    ("removed", [n for n in before if n not in now]),
                                    ("replaced", [n for n in now if n in before and now[n] is not before[n]])):
                    if names:
                        more = " and %d more" % (len(names) - 4) if len(names) > 4 else ""
                        changes.append("%s%s %s: %s%s" % (what, "s" if len(names) > 1 else "", verb,
                                                           ", ".join(names[:4]), more))
        if self.shadow:
            for n, p in params:
                if p.requires_grad and p.dtype != torch.float32:
                    raise ValueError("mixprec: shadow=True recomputes in fp32 and needs fp32 parameters; "
                                       "%s is %s" % (n, p.dtype))
        self._all_params, self._modules = params, modules
        self._bufs = {n: b for n, b in getattr(self, "_bufs", {}).items() if n in dict(params)}
        self._watched_hooks = [(m, functools.partial(self._module_hook, n)) for n, m in modules if self._watched(n)]
        self._params = [(n, p) for n, p in params if p.requires_grad and self._watched(n)]
        self._plist = [p for _, p in self._params]
        for mn, m in modules:
            self._layers[mn] = not list(m.children()) or bool(list(m.parameters(recurse=False)))
            for pn, _ in m.named_parameters(recurse=False):
                self._owner[(mn + "." if mn != "(model)" else "") + pn] = mn
        return "; ".join(changes)

    def _sync(self):
        """The model's parameters and modules read again (on recorded steps only: 2 ms for a model of 1200
        modules); a change is a warning, and the hooks of a recorded step move to the current modules."""
        params = [(n, p) for n, p in self.model.named_parameters()]
        if len(params) == len(self._all_params) and all(a[0] == b[0] and a[1] is b[1]
                                                        for a, b in zip(params, self._all_params)):
            trained = [(n, p) for n, p in params if p.requires_grad and self._watched(n)]
            if [n for n, _ in trained] != [n for n, _ in self._params]:  # requires_grad changed
                self._params = trained
                self._plist = [p for _, p in trained]
            modules = list(self.model.named_modules())
            if len(modules) == len(self._modules) and all(a[1] is b[1] for a, b in zip(modules, self._modules)):
                return
        changed = self._read_model()
        if changed and self._mod_hooks:  # the hooks of this recorded step on the modules as they are now
            self._unhook_modules()
            self._hook_modules()
        if changed:
            warnings.warn("mixprec: step %d: the model changed since the monitor last read it (%s): the monitor "
                          "watches its current parameters and modules from this step on" % (self.step, changed),
                          RuntimeWarning, stacklevel=4)

    def _sync_hook(self, module, args, kwargs=None):
        """The root's pre-hook on a recorded step: at its first training forward, the model read again and the
        hooks put on its modules; on every training forward, the shadow's record of the inputs."""
        if not (self._recording() and self._training(module)):
            return None
        self._sync()
        if len(self._hooks) == 1:  # only this pre-hook: the step's first training forward
            self._hook_modules()
            self._hooks.append(self.model.register_forward_hook(self._root_hook))
        if self.shadow and _TORCH2:
            self._root_pre_hook(module, args, kwargs)
        return None

    # ---- hooks: the root's pre-hook from the end of the step before a recorded one, the modules' from the
    # recorded step's first forward, all to its after_backward ----

    def _following(self, step):
        """The first step from step on that is recorded (start, start + every, ..., before stop), or None."""
        k = max(step, self.start)
        k += -(k - self.start) % self.every
        return k if self.stop is None or k < self.stop else None

    def _read_scale(self, s, what):
        """_scale_of(s, what), with its cost only where it is needed: a plain number taken as it is, and a
        GradScaler's scale tensor read (.item()) only when its version says it changed (update() writes it in
        place) since the last read."""
        t = type(s)
        if t is float or t is int:
            v = float(s)
            if 0 < v < math.inf:
                return v
        st = getattr(s, "_scale", None)
        if type(st) is torch.Tensor and getattr(s, "_enabled", False):
            k = self._scale_key
            if k is not None and k[0] is st and k[1] == st._version:
                return k[2]
            v = _scale_of(s, what)
            self._scale_key = (st, st._version, v)
            return v
        return _scale_of(s, what)

    def _recording(self):
        return (self.start <= self.step and (self.stop is None or self.step < self.stop) and
                (self.step - self.start) % self.every == 0 and not self._in_shadow)

    def _watched(self, name):
        """Whether layers (names or regular expressions) selects this parameter or module: a pattern matching
        the whole name or a dotted prefix of it ("transformer.h.0" selects everything under it)."""
        if self._layer_re is None:
            return True
        parts = name.split(".")
        return any(r.fullmatch(".".join(parts[:k])) for r in self._layer_re for k in range(len(parts), 0, -1))

    def _attach(self):
        """Hooks on the modules for a recorded step. A module from torch.compile runs that step eagerly (its
        forward, Dynamo's wrapper of the original module's __call__, is the original's __call__ until
        after_backward): Dynamo does not guard on hooks, so its graph would run without them; the other steps
        run the graph compiled without hooks. Nothing else in the process changes."""
        if self._hooks or self._closed:
            return
        # one pre-hook on the root: it reads the model again as the recorded forward begins and hooks its modules
        # then (_sync_hook), so that this step, an unrecorded one's end, registers one hook, not one per module
        if _TORCH2:
            self._hooks = [self.model.register_forward_pre_hook(self._sync_hook, with_kwargs=True)]
        else:
            self._hooks = [self.model.register_forward_pre_hook(self._sync_hook)]
        if self._compiled is not None:
            self._compiled_forward = self._compiled.__dict__["forward"]
            self._compiled.forward = self._compiled._orig_mod.__call__  # the model, or the DDP that wraps it

    def _detach(self):
        for h in self._hooks + self._mod_hooks:
            h.remove()
        self._hooks, self._mod_hooks = [], []
        if self._compiled_forward is not None:
            self._compiled.forward = self._compiled_forward
            self._compiled_forward = None

    def _new_record(self):
        self._rec = {"step": self.step, "scale": None, "carried": None, "params": {}, "dead": {}, "values": {},
                     "bad": None, "lost": None, "updates": None, "act": {}, "act_grad": {}, "first_bad_act": None,
                     "hist": None, "ranks": None}
        self._inputs = self._rng = self._before = self._moved = None
        self._forwards = 0  # forward passes of the model with gradients on this step (shadow)
        self._out_grads = []

    @staticmethod
    def _training(module):
        """A forward of the training step: gradients on, the module in training mode (not an evaluation
        under torch.no_grad(), torch.inference_mode() or model.eval())."""
        return torch.is_grad_enabled() and module.training

    def _hook_modules(self):
        """A forward hook on each watched module (made when the model is read, not here: this runs as the
        recorded step's first forward begins)."""
        self._mod_hooks = [m.register_forward_hook(fn) for m, fn in self._watched_hooks]

    def _unhook_modules(self):
        for h in self._mod_hooks:
            h.remove()
        self._mod_hooks = []

    def _module_hook(self, name, module, inputs, output):
        """The forward hook of a watched module while a recorded step runs: its outputs counted, and a hook on the
        gradient of each."""
        if not self._recording() or not self._training(module):
            return
        for t in _tensors(output):
            dtype = _NAMES.get(t.dtype, str(t.dtype))
            self._pending.add(self._count(t), lambda v, n=t.numel(), dtype=dtype: self._add_act(name, dtype, n, v))
            if t.requires_grad:
                _on_grad(t, self._grad_hook(name))

    def _add_act(self, name, dtype, n, v):
        c = _as_values(n, v)
        _add(self._rec["act"].setdefault(name, {"dtype": dtype}), c)
        if (c["inf"] or c["nan"]) and self._rec["first_bad_act"] is None:
            self._rec["first_bad_act"] = name

    def _grad_hook(self, name):
        def hook(g):
            if not self._in_shadow:
                dtype = _NAMES.get(g.dtype, str(g.dtype))
                self._pending.add(self._count(g), lambda v, n=g.numel(): _add(
                    self._rec["act_grad"].setdefault(name, {"dtype": dtype}), _as_values(n, v)))
        return hook

    def _root_pre_hook(self, module, args, kwargs):
        if self._recording() and self._training(module):
            self._forwards += 1
            self._inputs = (args, kwargs)
            cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
            self._rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else [])

    def _root_hook(self, module, inputs, output):
        if not (self.shadow and self._recording() and self._training(module)):
            return
        grads = self._out_grads = []
        for i, t in enumerate(_tensors(output)):
            grads.append(None)
            if t.requires_grad:
                _on_grad(t, lambda g, i=i, grads=grads: grads.__setitem__(i, g))

    # ---- the two calls of a training step ----

    def after_backward(self, scaler=1.0, loss=None, optimizer=None):
        """Call after backward, before the optimizer step (before or after
        scaler.unscale_ and gradient clipping). scaler: the GradScaler, or
        the loss scale as a number (1.0 when none is used). The counts are of
        the gradients times the loss scale, as backward left them: after
        scaler.unscale_(opt) (the scaler's record for opt says so) they are
        multiplied by the scale again. optimizer: the one whose state to read
        when the scaler serves several. loss (optional, a number or a tensor):
        the step's unscaled loss, for the report's loss curve."""
        t = type(scaler)
        if (t is float or t is int) and 0 < scaler < 1e999:  # the common cases first: each check costs
            scale = scaler * 1.0
        else:
            scale = self._read_scale(scaler, "after_backward's scaler")
        if loss is not None and type(loss) is not float:
            loss = self._loss_of(loss)
        if optimizer is not None and not hasattr(optimizer, "param_groups"):
            raise TypeError("mixprec: after_backward's optimizer is a torch.optim.Optimizer, not %s"
                            % type(optimizer).__name__)
        self._scale_now, self._pending_loss = scale, loss
        if self.step != self._next_rec:
            # an unrecorded step: only the references of the gradients, kept until after_step to name the
            # parameters of a skipped step, and only where a step can be skipped (a loss scale other than 1)
            if scale != 1.0:
                self._grads = list(map(_GRAD, self._plist))
            return
        if loss is not None and type(loss) is not float:
            self._pending_loss = float(loss.item())
        carried = _carried(scaler, optimizer, scale)
        self._sync()  # the model as it is now (its forward's pre-hook read it too, when it ran)
        self._grads = list(map(_GRAD, self._plist))
        try:
            self._record_grads(carried)
            ranks = self._ranks()
            if ranks > 1:
                self._sum_grads(ranks)
            if self.shadow:
                self._rec["hist"] = self._shadow_pass()
            if ranks > 1:
                self._sum_rest()
        finally:
            self._detach()

    @staticmethod
    def _loss_of(loss):
        """after_backward's loss: a number as a float, a one-element tensor detached (read later, with the
        others: _read_losses)."""
        if isinstance(loss, torch.Tensor) and loss.numel() == 1 and not loss.is_complex():
            return loss.detach()
        if isinstance(loss, numbers.Real) and not isinstance(loss, (bool, np.bool_)):
            return float(loss)
        raise TypeError("mixprec: after_backward's loss is a number or a one-element tensor, not %s"
                        % (type(loss).__name__ if not isinstance(loss, torch.Tensor) else
                           "a %s tensor of %d elements" % (loss.dtype, loss.numel())))

    def _record_grads(self, carried):
        rec = self._rec
        rec["scale"], rec["carried"] = self._scale_now, carried
        rec["tstats"] = {}
        factor = self._scale_now / carried  # 1, or the scale unscale_ took out
        shift = round(math.log2(factor))  # the histogram of the scaled values: bins shifted (exact for 2^k)
        hist = [0] * (HIST_BINS + 1)
        bad = rec["bad"] = []

        def done(name, n, v):
            c = _as_values(n, v[:_NVALUES])
            k = _NVALUES + _NSTORE * len(self.formats)
            rec["params"][name] = {f: _as_store(n, v[_NVALUES + _NSTORE * i:_NVALUES + _NSTORE * (i + 1)])
                                   for i, f in enumerate(self.formats)}
            rec["dead"][name] = c["zero"]
            rec["values"][name] = c
            if c["inf"] or c["nan"]:
                bad.append(name)
            for i, x in enumerate(v[k:]):
                hist[i] += int(x)
        moved = []
        for name, p in self._params:
            if p.grad is None:
                continue
            self._pending.add(self._count(p.grad, store=True, scale=factor, hist=True, shift=shift),
                              lambda v, name=name, n=p.grad.numel(): done(name, n, v))
            moved.append((name, self._moved_mask(name, p)))  # for updates(): the values to move
            if self._want_stats:
                rec["tstats"][name] = _grad_stats(p.grad, factor, self.formats)
        self._pending.read()  # the forward's and backward's counts too
        if moved and not rec["act"] and not self._closed and "torch._dynamo" in sys.modules \
                and not self._unseen_warned:
            self._unseen_warned = True
            warnings.warn("mixprec: step %d: gradients but no forward of the model seen by the monitor's hooks: "
                          "if it runs compiled, give Monitor the module torch.compile returned" % self.step,
                          RuntimeWarning, stacklevel=3)
        bad.sort(key=[n for n, _ in self._params].index)
        rec["hist"] = (hist[1:], hist[0])
        self._moved = moved
        self._before = [(name, p, self._copy_of(name, p)) for name, p in self._params if p.grad is not None]

    def _buffers(self, name, p):
        """The buffers updates() reads for parameter name, kept from one recorded step to the next: a copy of the
        weights before the step and a mask of the values with a nonzero finite gradient. Made once (again when
        the parameter changes shape, dtype or device): allocated and freed on every recorded step, they made the
        allocator hand that memory back to the system and the next steps fault it in again (on the CPU, the
        backward of a 1.2 ms MLP step +70% on the step after a recorded one, +20% on the one after that)."""
        b = self._bufs.get(name)
        if b is None or b[0].shape != p.shape or b[0].dtype != p.dtype or b[0].device != p.device:
            b = self._bufs[name] = (torch.empty_like(p, memory_format=torch.contiguous_format),
                                    torch.empty(p.shape, dtype=torch.bool, device=p.device))
        return b

    def _copy_of(self, name, p):
        before = self._buffers(name, p)[0]
        with torch.no_grad():
            before.copy_(p.detach())
        return before

    def _moved_mask(self, name, p):
        mask = self._buffers(name, p)[1]
        g = p.grad.detach()
        with torch.no_grad():
            torch.ne(g, 0, out=mask)
            mask &= torch.isfinite(g)
        return mask

    def _shadow_pass(self):
        """Recomputes the step's gradients in fp32 and records lost(); returns their histogram."""
        if self._forwards > 1:
            raise MixprecError("mixprec: shadow=True: the model ran %d forward passes with gradients in this step "
                               "(gradient accumulation?); the shadow pass recomputes one: record without shadow"
                               % self._forwards)
        if self._inputs is None or not any(g is not None for g in self._out_grads):
            raise MixprecError("mixprec: shadow=True: this step's forward and backward did not run through the "
                               "monitored model (call after_backward after loss.backward())")
        model, names = self.model, [n for n, _ in self._params]
        params = [p for _, p in self._params]
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
        cpu_rng, cuda_rng = self._rng
        dev = next((p.device.type for p in params), "cpu")
        self._in_shadow = True
        try:
            with torch.random.fork_rng(devices=range(len(cuda_rng))):  # the run's RNG continues unchanged
                torch.set_rng_state(cpu_rng)  # the run's dropout masks again
                for d, state in enumerate(cuda_rng):
                    torch.cuda.set_rng_state(state, d)
                with torch.autocast(device_type=dev, enabled=False), torch.enable_grad():
                    args, kwargs = _floats(self._inputs)
                    outs = list(_tensors(model(*args, **kwargs)))
            pairs = _sources([(o, g) for o, g in zip(outs, self._out_grads) if g is not None and o.requires_grad])
            if not pairs:
                raise MixprecError("mixprec: shadow=True: no output of the fp32 recomputation needs a gradient")
            grads = torch.autograd.grad([o for o, _ in pairs], params, [g.to(o.dtype) for o, g in pairs],
                                        allow_unused=True)
        finally:
            self._in_shadow = False
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
        if self._rec["ranks"] is not None and self._rec["ranks"]["gradients"] == "identical":
            grads = self._average_ranks(grads)
        lost, hist, err = {}, [0] * (HIST_BINS + 1), {}
        shift = round(math.log2(self._rec["scale"] / self._rec["carried"]))
        factor, scale = self._rec["scale"] / self._rec["carried"], self._rec["scale"]

        def done(n, total, v):
            lost[n] = {"total": total, "lost": int(v[0]), "dead": int(v[1])}
            for i, x in enumerate(v[2:]):
                hist[i] += int(x)
        for n, p, g32 in zip(names, params, grads):
            if g32 is None or p.grad is None:
                continue
            g = p.grad
            # the run's gradient against the fp32 one where that is finite and nonzero: the mean squared error
            # (unscaled) and the largest relative error
            with torch.no_grad():
                x, r = g.detach().float() * factor, g32.detach().float()
                ok = torch.isfinite(x) & torch.isfinite(r) & (r != 0)
                d = (x - r)[ok]
                err[n] = {"mse": (d / scale).pow(2).mean().item() if d.numel() else 0.0,
                          "max_relative": (d.abs() / r[ok].abs()).max().item() if d.numel() else 0.0}
            h = self._count(g32, values=False, hist=True, shift=shift)
            c = torch.stack([((g32 != 0) & (g == 0)).sum(), (g32 == 0).sum()])
            if isinstance(h, list):
                c = c.tolist() + h
            else:
                c = torch.cat([c.to(torch.float64), h])
            self._pending.add(c, lambda v, n=n, total=g.numel(): done(n, total, v))
        self._pending.read()
        for n, e in err.items():
            lost[n].update(e)
        self._rec["lost"] = lost
        return hist[1:], hist[0]

    def after_step(self, scaler=None):
        """Call after the optimizer step (and scaler.update()), before or
        after zeroing the gradients. scaler: the GradScaler, or the loss
        scale now as a number; a step after which the scale went down was
        skipped (inf/NaN in its gradients), and the parameters whose
        gradients held them are named. None: no scale."""
        if self._scale_now is None:
            raise MixprecError("mixprec: after_step before after_backward")
        t = type(scaler)
        if scaler is None:
            new = self._scale_now
        elif (t is float or t is int) and 0 < scaler < 1e999:
            new = scaler
        else:
            new = self._read_scale(scaler, "after_step's scaler")
        skipped = new < self._scale_now
        loss = self._pending_loss
        recorded = self._rec["scale"] is not None
        if recorded or skipped:
            self._step_ends(skipped, recorded)
        elif loss is not None and (type(loss) is not float or not _isfinite(loss)):
            if type(loss) is float:
                self._nonfinite_step(self.step, loss, [])
            else:  # a tensor, read with the others (at most _LOSS_READS steps later)
                self._unread.append(self.step)
        self._steps.append((self._pending_loss, self._scale_now, skipped, _perf_counter()))
        self._pending_loss = self._scale_now = self._grads = None
        if recorded:
            self._end_recorded(skipped)
        elif len(self._unread) >= _LOSS_READS:
            self._read_losses()
        self.step += 1
        if self.step == self._next_rec:
            self._rec["step"] = self.step
            self._attach()

    def _step_ends(self, skipped, recorded):
        """after_step's work on a recorded or skipped step: the losses read, the skip or the non-finite
        loss or gradients recorded."""
        self._read_losses()
        loss = self._pending_loss
        if loss is not None and type(loss) is not float:
            loss = self._pending_loss = float(loss.item())
        if recorded:
            bad = list(self._rec["bad"])
        else:
            bad = self._bad_grads()
        if skipped:
            # none found: the gradients were zeroed in place before this call, or not those of the step
            self._skips.append({"step": self.step, "scale": self._scale_now, "params": bad or None,
                                "activation": self._rec["first_bad_act"] if recorded else None})
        elif bad or (loss is not None and not _isfinite(loss)):
            self._nonfinite_step(self.step, loss, bad)

    def _nonfinite_step(self, step, loss, bad):
        self._nonfinite.append({"step": step, "loss": loss, "params": bad})
        if len(self._nonfinite) == 1:
            _warn_user("mixprec: step %d was not skipped and %s (no loss scaler skips such a step: the weights may "
                       "now hold inf/NaN); mon.nonfinite() lists every such step"
                       % (step, _nonfinite_text(self._nonfinite[0])))

    def _read_losses(self):
        """The losses given as tensors, read all together (one copy per device: no wait for the device on the
        steps between): each step's loss in its place, and a non-finite one on a step not skipped recorded."""
        if not self._unread:
            return
        unread, self._unread = self._unread, []
        by_dev = {}
        for i in unread:
            t = self._steps[i][0]
            by_dev.setdefault(t.device, []).append(i)
        values = {}
        for dev, idx in by_dev.items():
            if dev.type == "cpu":
                vals = [self._steps[i][0].item() for i in idx]
            else:
                vals = torch.cat([self._steps[i][0].reshape(1).float() for i in idx]).tolist()
            values.update(zip(idx, vals))
        for i in unread:
            _, scale, skipped, t = self._steps[i]
            v = float(values[i])
            self._steps[i] = (v, scale, skipped, t)
            if not _isfinite(v) and not skipped:
                self._nonfinite_step(i, v, [])
        self._nonfinite.sort(key=lambda s: s["step"])

    # the per-step record: self._steps[i] = (loss: a float, None when not given, or a tensor not read yet;
    # the loss scale; whether skipped; time.perf_counter() at its after_step)
    @property
    def _loss(self):
        self._read_losses()
        return [_NAN if s[0] is None else s[0] for s in self._steps]

    @property
    def _loss_given(self):
        return [s[0] is not None for s in self._steps]

    @property
    def _scale(self):
        return [s[1] for s in self._steps]

    @property
    def _skipped(self):
        return [s[2] for s in self._steps]

    @property
    def _times(self):
        return [b[3] - a[3] for a, b in zip(self._steps, self._steps[1:])]

    def _end_recorded(self, skipped):
        """after_step's work on a recorded step: the updates, the record kept and logged, the hooks off, and the
        next recorded step found."""
        if self._moved is not None and not skipped:
            self._rec["updates"] = self._updates()
        if self._rec["ranks"] is not None:  # every rank takes part, with its updates or without
            self._rec["updates"] = self._sum_updates(self._rec["updates"])
        self._history[self.step] = self._rec
        if self._log is not None or self._tb is not None:
            j = _jsonable(self._step_json(self.step))
            if self._log is not None:
                import json
                self._log.write(json.dumps(j, allow_nan=False) + "\n")
                self._log.flush()
            if self._tb is not None:
                self._to_tensorboard(j)
        self._new_record()
        self._detach()
        self._next_rec = self._following(self.step + 1)

    def _bad_grads(self):
        """The parameters whose gradient (as after_backward found it: the tensor is kept even when .grad was
        set to None since) holds inf or NaN."""
        out = _Pending()
        bad = []
        grads = self._grads if self._grads is not None else list(map(_GRAD, self._plist))  # not kept: as they are
        for (name, _), g in zip(self._params, grads):
            if g is None:
                continue
            if g.device.type == "cpu" and not self._count.torch_ops:
                c = _values(g)
                v = [c["inf"] + c["nan"]]
            else:
                v = (~torch.isfinite(g.detach())).sum().reshape(1).to(torch.float64)
            out.add(v, lambda v, name=name: bad.append(name) if v[0] else None)
        out.read()
        return [n for n, _ in self._params if n in bad]

    def _updates(self):
        """Per parameter: the values with a nonzero finite gradient at after_backward, and those of them the
        step left unchanged (an update too small for the weight's format, or zero)."""
        out, pending = {}, _Pending()
        with torch.no_grad():
            for (name, moved), (_, p, before) in zip(self._moved, self._before):
                c = torch.stack([moved.sum(), (moved & (p == before)).sum()])
                pending.add(c.tolist() if c.device.type == "cpu" else c.to(torch.float64), lambda v, name=name:
                            out.__setitem__(name, {"updated": int(v[0]), "lost": int(v[1])}))
        pending.read()
        self._moved = self._before = None
        return out

    # ---- under torch.distributed ----

    def _dist_group(self):
        """torch.distributed and the group whose ranks' counts are summed, or None when there is none."""
        if self._group is False:
            return None
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return dist, self._group

    def _rank(self):
        g = self._dist_group()
        return 0 if g is None else g[0].get_rank(g[1])

    def _ranks(self):
        g = self._dist_group()
        return 1 if g is None else g[0].get_world_size(g[1])

    def _gather(self, obj):
        dist, group = self._dist_group()
        out = [None] * dist.get_world_size(group)
        dist.all_gather_object(out, obj, group=group)
        return out

    def _sum_grads(self, ranks):
        """The recorded step's gradient counts over the ranks. Where every rank counted the same (DDP: the
        gradients all-reduced, the same on every rank), they are counted once; else (each rank's own: DDP's
        no_sync, sharded or model-parallel parameters) summed, amax the largest."""
        rec = self._rec
        own = {"params": rec["params"], "values": rec["values"], "dead": rec["dead"], "hist": rec["hist"],
               "tstats": rec["tstats"]}
        if self._want_stats:  # the values each rank's figures are of, to weight them by
            own["tstats"] = {n: dict(st, _n=rec["values"][n]["elements"] - rec["values"][n]["inf"] -
                                     rec["values"][n]["nan"],
                                     _nz=rec["values"][n]["elements"] - rec["values"][n]["inf"] -
                                     rec["values"][n]["nan"] - rec["values"][n]["zero"])
                             for n, st in rec["tstats"].items()}
        parts = self._gather(own)
        same = all(p["params"] == parts[0]["params"] and p["values"] == parts[0]["values"] for p in parts)
        rec["ranks"] = {"ranks": ranks, "gradients": "identical" if same else "summed"}
        if same:
            merged = parts[0]
        else:
            merged = {"params": _sum_keyed([p["params"] for p in parts],
                                           lambda per: {f: _sum_counts([q[f] for q in per]) for f in per[0]}),
                      "values": _sum_keyed([p["values"] for p in parts], _sum_counts),
                      "dead": _sum_keyed([p["dead"] for p in parts], sum),
                      "hist": ([sum(b) for b in zip(*(p["hist"][0] for p in parts))], sum(p["hist"][1] for p in parts)),
                      "tstats": _sum_keyed([p["tstats"] for p in parts], _sum_tstats)}
        rec["params"], rec["values"], rec["dead"], rec["hist"] = (merged["params"], merged["values"], merged["dead"],
                                                                  merged["hist"])
        rec["tstats"] = {n: {k: v for k, v in st.items() if not k.startswith("_")}
                         for n, st in merged["tstats"].items()}
        order = {n: i for i, (n, _) in enumerate(self._params)}
        rec["bad"][:] = sorted((n for n, c in rec["values"].items() if c["inf"] or c["nan"]),
                               key=lambda n: order.get(n, len(order)))

    def _sum_rest(self):
        """The recorded step's activations and their gradients summed over the ranks (each rank's own batch), the
        first overflowing activation the first rank's that had one; with shadow, lost() and the fp32 gradients'
        histogram counted once where the gradients were the same on every rank (the fp32 ones averaged as DDP
        averages), else summed."""
        rec = self._rec
        parts = self._gather({"act": rec["act"], "act_grad": rec["act_grad"], "first_bad_act": rec["first_bad_act"],
                              "lost": rec["lost"], "hist": rec["hist"]})
        rec["act"] = _sum_keyed([p["act"] for p in parts], _sum_counts)
        rec["act_grad"] = _sum_keyed([p["act_grad"] for p in parts], _sum_counts)
        rec["first_bad_act"] = next((p["first_bad_act"] for p in parts if p["first_bad_act"]), None)
        if rec["lost"] is not None:
            if rec["ranks"]["gradients"] == "identical":
                rec["lost"], rec["hist"] = parts[0]["lost"], parts[0]["hist"]
            else:
                rec["lost"] = _sum_keyed([p["lost"] for p in parts], _sum_lost)
                rec["hist"] = ([sum(b) for b in zip(*(p["hist"][0] for p in parts))], sum(p["hist"][1] for p in parts))

    def _average_ranks(self, grads):
        """The shadow's fp32 gradients averaged over the ranks, as DDP averages the run's (one all-reduce of them
        all, per device), where the run's gradients were the same on every rank."""
        dist, group = self._dist_group()
        n = dist.get_world_size(group)
        have = [g for g in grads if g is not None]
        by_dev = {}
        for g in have:
            by_dev.setdefault(g.device, []).append(g)
        with torch.no_grad():
            for gs in by_dev.values():
                flat = torch.cat([g.reshape(-1).float() for g in gs])
                dist.all_reduce(flat, group=group)
                flat /= n
                i = 0
                for g in gs:
                    g.copy_(flat[i:i + g.numel()].view_as(g))
                    i += g.numel()
        return grads

    def _sum_updates(self, ups):
        """updates() over the ranks: once where the gradients were the same on every rank (so are the weights),
        else summed."""
        parts = [p for p in self._gather(ups) if p is not None]
        if not parts:
            return None
        if self._rec["ranks"]["gradients"] == "identical":
            return parts[0]
        return _sum_keyed(parts, _sum_counts)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- the overflow trap: every step, every module ----

    _FRAMES = 20  # the modules a trap's message lists, the last that ran

    def _arm_trap(self):
        for name, mod in self._modules:
            if mod is not self.model:
                self._trap_hooks.append(mod.register_forward_hook(self._trap_hook(name)))

    def _trap_hook(self, name):
        def hook(module, inputs, output):
            label = "%s (%s)" % (name, type(module).__name__)
            outs = list(_tensors(output))
            frame = "%s: inputs %s; outputs %s" % (label, _magnitudes(_tensors(inputs)), _magnitudes(outs))
            self._frames = (self._frames + [frame])[-self._FRAMES:]
            for i, t in enumerate(outs):
                if not torch.isfinite(t).all():
                    self._tripped("the forward of %s: its output %d (%s, %s) holds inf/NaN" %
                                  (label, i, tuple(t.shape), t.dtype))
                if t.requires_grad and torch.is_grad_enabled():
                    t.register_hook(lambda g, i=i, t=t: self._trap_grad(label, i, t, g))
        return hook

    def _trap_grad(self, label, i, t, g):
        if not torch.isfinite(g).all():
            self._frames = (self._frames + ["%s: the gradient of output %d %s" % (label, i, _magnitudes([g]))])[
                -self._FRAMES:]
            self._tripped("the backward of %s: the gradient of its output %d (%s, %s) holds inf/NaN" %
                          (label, i, tuple(t.shape), g.dtype))
        return None

    def _tripped(self, where):
        """The trap: the report written (when trap names a path), then MixprecOverflow with the frames."""
        frames = "\n  ".join(self._frames)
        msg = "mixprec: trap at step %d, %s; the last %d modules that ran:\n  %s" % (self.step, where,
                                                                                     len(self._frames), frames)
        if self._trap is not True and self._trap is not None:
            try:
                self.report(os.fsdecode(self._trap))
                msg += "\nreport: %s" % os.fsdecode(self._trap)
            except (MixprecError, OSError) as e:
                msg += "\nthe report could not be written: %s" % e
        self.close()
        raise MixprecOverflow(msg)

    def close(self):
        """Removes the monitor's hooks from the model (and, used as `with Monitor(...) as mon:`, at the end of
        the block, however it ends). A second call does nothing."""
        self._closed = True
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
        for h in getattr(self, "_trap_hooks", []):
            h.remove()
        self._trap_hooks = []
        self._detach()
        if self._forward is not None and self.model.__dict__.get("forward") is self._forward:
            del self.model.forward
        self._forward = None

    def nonfinite(self):
        """The steps that were not skipped with a loss or gradients holding inf or NaN (a run without a loss
        scaler, as bf16's): [{"step", "loss" (None when not given), "params": the parameters whose gradients
        held inf/NaN, when the step was recorded (gradients are read on recorded steps only)}]."""
        self._read_losses()
        return [dict(s) for s in self._nonfinite]

    # ---- what it found ----

    def _last(self):
        if not self._history:
            raise MixprecError("mixprec: no step recorded yet (after_backward and after_step end a step)")
        return self._history[max(self._history)]

    def stats(self):
        """The last recorded step's gradient counts: {parameter: {format:
        {"total", "underflow", "subnormal", "overflow", "nan"}}}."""
        return self._last()["params"]

    def tensor_stats(self):
        """The last recorded step's statistics of each parameter's gradient: {parameter: {"min", "max",
        "mean", "std" (of the finite values), "amax", "amin_nonzero", "dynamic_range_log2", "zero",
        "subnormal", "inf", "nan", "formats": {format: {"lost": the fraction of the values that become 0,
        "saturated": the fraction that overflow, at the loss scale they carry; "round_trip": {"mse",
        "max_relative"} of storing them in the format and back}}}}."""
        if not self._want_stats:
            raise MixprecError("mixprec: tensor_stats() needs Monitor(..., stats=True) (about as much work again "
                               "as the counts, on recorded steps)")
        return self._tensor_stats_of(self._last())

    @staticmethod
    def _tensor_stats_of(r):
        out = {}
        for name, st in r.get("tstats", {}).items():
            d = {k: v for k, v in st.items() if k != "round_trip"}
            c = r["values"][name]  # counted with the store counts
            d.update(amax=c["amax"], zero=c["zero"], subnormal=c["subnormal"], inf=c["inf"], nan=c["nan"],
                     dynamic_range_log2=math.log2(c["amax"] / d["amin_nonzero"]) if d["amin_nonzero"] > 0 else None)
            counts = r["params"].get(name, {})
            d["formats"] = {f: {"lost": c["underflow"] / c["total"] if c["total"] else 0.0,
                                "saturated": c["overflow"] / c["total"] if c["total"] else 0.0,
                                "round_trip": st["round_trip"].get(f)} for f, c in counts.items()}
            out[name] = d
        return out

    def history(self):
        """stats() for every recorded step: {step: {parameter: {format: counts}}}."""
        return {s: r["params"] for s, r in self._history.items()}

    def lost(self):
        """With shadow=True, the last recorded step: {parameter: {"total", "lost"
        (nonzero in fp32, 0 in the run), "dead" (0 in fp32 too), "mse" and
        "max_relative": the run's gradient against the fp32 recomputation's
        where that is finite and nonzero (the squared error unscaled)}}."""
        r = self._last()
        if r["lost"] is None:
            raise MixprecError("mixprec: lost() needs Monitor(..., shadow=True)")
        return r["lost"]

    def activations(self):
        """The last recorded step's module outputs and their gradients:
        {module: {"dtype", "elements", "zero", "subnormal", "inf", "nan",
        "amax", "headroom": {format: log2(max / amax)}, "grad": the same
        counts of the output's gradient, or None}} ("(model)" is the model)."""
        return self._activations_of(self._last())

    def _activations_of(self, r):
        out = {}
        for name, a in r["act"].items():
            d = dict(a)
            d["headroom"] = {f: _headroom(a["amax"], self._fmax[f]) for f in self.formats}
            d["grad"] = dict(r["act_grad"][name]) if name in r["act_grad"] else None
            out[name] = d
        return out

    # ---- exports ----

    def _step_json(self, step):
        """A recorded step as the log's line and to_json's entry."""
        r = self._history[step]
        loss, scale, skipped, _ = self._steps[step] if step < len(self._steps) else (None, None, None, None)
        return {"step": step, "loss": None if loss is None or not math.isfinite(loss) else loss,
                "loss_finite": None if loss is None else math.isfinite(loss),
                "scale": scale, "skipped": None if skipped is None else bool(skipped),
                "ranks": r["ranks"], "params": r["params"], "activations": self._activations_of(r),
                "updates": dict(r["updates"] or {}), "lost": r["lost"], "tensor_stats": self._tensor_stats_of(r)}

    def _to_tensorboard(self, j):
        """A recorded step as scalars: the loss and loss scale, each parameter's gradient values lost to zero
        (underflow) and to inf (overflow) in each format, as fractions, and each module's headroom in each
        format (log2 of the format's max over the output's amax)."""
        tb, step = self._tb, j["step"]
        if j["loss"] is not None:
            tb.add_scalar("mixprec/loss", j["loss"], step)
        if j["scale"] is not None:
            tb.add_scalar("mixprec/loss_scale", j["scale"], step)
        for p, per in j["params"].items():
            for f, c in per.items():
                if c.get("total"):
                    tb.add_scalar("mixprec/%s_underflow/%s" % (f, p), c["underflow"] / c["total"], step)
                    tb.add_scalar("mixprec/%s_overflow/%s" % (f, p), c["overflow"] / c["total"], step)
        for m, a in j["activations"].items():
            for f, h in a["headroom"].items():
                if h is not None:
                    tb.add_scalar("mixprec/%s_headroom/%s" % (f, m), h, step)

    def to_json(self, path=None):
        """Everything the monitor recorded, as a dict that json.dump takes: the formats, every step's loss,
        scale and whether it was skipped, each recorded step's counts (stats(), activations(), updates(),
        lost(), tensor_stats()), the skipped and non-finite steps; written to path as JSON too when given."""
        self._read_losses()
        out = {"formats": list(self.formats), "every": self.every,
               "steps": [{"step": i, "loss": (l if g and math.isfinite(l) else None), "scale": s, "skipped": k}
                         for i, (l, g, s, k) in enumerate(zip(self._loss, self._loss_given, self._scale,
                                                              self._skipped))],
               "recorded": [self._step_json(s) for s in sorted(self._history)],
               "skips": self.skips(), "nonfinite": self.nonfinite()}
        out = _jsonable(out)
        if path is not None:
            import json
            with open(path_arg(path, "to_json's path"), "w", encoding="utf-8") as f:
                json.dump(out, f, allow_nan=False)
        return out

    def updates(self):
        """The last recorded step's updates (recorded when the step was not skipped):
        {parameter: {"updated": values with a nonzero finite gradient, "lost": those of them the optimizer
        step left unchanged (the update rounded away in the weight's format)}}; {} when the step was skipped."""
        return dict(self._last()["updates"] or {})

    def skips(self):
        """The skipped steps: [{"step", "scale", "params": [names with inf/NaN
        gradients], or None when the monitor did not see them (the gradients
        zeroed in place before after_step), "activation": the first module
        whose output held inf/NaN on that step, when it was a recorded step,
        else None}]."""
        return [dict(s) for s in self._skips]

    # ---- the report ----

    def report(self, path, title=None):
        """Writes mixprec's HTML report of the run so far to path (atomically):
        loss and loss scale per step with the skipped steps, per-layer
        gradient underflow over time (heat map), activation headroom, the
        per-tensor table and the gradient histogram of the last recorded step."""
        p = path_arg(path, "path")
        if title is not None:
            text_arg(title, "report's title")
        if not self._history:
            raise MixprecError("mixprec: report: no step recorded yet")
        self._read_losses()
        build = _ReportBuilder(self, title)
        check(lib.mp_report_write(p, ctypes.byref(build.report)))
        return path


class _Histogram:
    """log2 |g| of gradients as the report draws it (mp_log2_histogram): counts per bin from 2^_HIST_LO, the
    ends clamped, and the zeros."""

    def __init__(self, lo=_HIST_LO):
        self.lo = lo
        self.bins, self.zeros = (ctypes.c_uint64 * HIST_BINS)(), ctypes.c_uint64(0)

    def add(self, mem):
        ptr, code, n, owner = mem
        check(lib.mp_log2_histogram(ptr, code, n, self.lo, HIST_BINS, self.bins, ctypes.byref(self.zeros)))

    def result(self):
        return list(self.bins), self.zeros.value


# per format, a dark colour for its values that become 0 and a light one for those that become subnormal
_SERIES_COLORS = [b"#1f77b4", b"#aec7e8", b"#ff7f0e", b"#ffbb78", b"#2ca02c", b"#98df8a", b"#d62728", b"#ff9896"]


class _ReportBuilder:
    """The monitor's findings as report.h's structures (kept alive here while
    the library writes them)."""

    def __init__(self, mon, title):
        fmt = mon.formats[0]
        seen = self._seen(mon)
        layers = [n for n, is_layer in mon._layers.items() if is_layer and n in seen]
        steps = sorted(mon._history)
        nsteps, nl = len(mon._loss), len(layers)
        index = {n: i for i, n in enumerate(layers)}
        # per step and layer: the share of its parameters' gradient values lost (shadow) or that would
        # underflow in fmt; sampled on the recorded steps, held until the next one
        under = np.zeros((max(nsteps, 1), max(nl, 1)), dtype=np.float32)
        shadow = any(mon._history[s]["lost"] is not None for s in steps)
        # without shadow, the charts draw what was measured: per format, the share of each layer's gradient values
        # that would become 0 and that would become subnormal if stored at the recorded scale
        measured = {} if shadow else {(f, k): np.zeros_like(under) for f in mon.formats
                                      for k in ("underflow", "subnormal")}
        tensors = (TensorStats * max(nl, 1))()
        wlost = wdead = wtotal = 0
        for i, n in enumerate(layers):
            tensors[i].name = n.encode()[:63]
        for s in steps:
            r = mon._history[s]
            frac_n, frac_d = np.zeros(max(nl, 1)), np.zeros(max(nl, 1))
            meas = {k: np.zeros(max(nl, 1)) for k in measured}
            for pn, counts in r["params"].items():
                owner = mon._owner.get(pn)
                if owner not in index:
                    continue
                i = index[owner]
                for f, k in measured:
                    meas[f, k][i] += counts[f][k]
                t = tensors[i]
                t.has_wgrad = 1
                if r["lost"] is not None and pn in r["lost"]:
                    lost, dead, total = r["lost"][pn]["lost"], r["lost"][pn]["dead"], r["lost"][pn]["total"]
                else:
                    lost, dead, total = counts[fmt]["underflow"], r["dead"][pn], counts[fmt]["total"]
                t.wgrad_elements += total
                t.wgrad_lost += lost
                t.wgrad_dead += dead
                wlost, wdead, wtotal = wlost + lost, wdead + dead, wtotal + total
                frac_n[i] += lost
                frac_d[i] += total
            under[s:, :nl] = np.where(frac_d[:nl] > 0, frac_n[:nl] / np.maximum(frac_d[:nl], 1), 0)
            for key, m in measured.items():
                m[s:, :nl] = np.where(frac_d[:nl] > 0, meas[key][:nl] / np.maximum(frac_d[:nl], 1), 0)
            for kind, field in (("act", "fwd"), ("act_grad", "bwd")):
                for mn, c in r[kind].items():
                    if mn not in index:
                        continue
                    t = tensors[index[mn]]
                    st = getattr(t, field)
                    st.subnormal += c["subnormal"]
                    st.overflow += c["inf"]
                    st.nan += c["nan"]
                    setattr(t, field + "_elements", getattr(t, field + "_elements") + c["elements"])
                    st.amax = max(st.amax, c["amax"])
        dtypes = [a["dtype"] for s in steps for n, a in mon._history[s]["act"].items() if n in index]
        compute = max(set(dtypes), key=dtypes.count) if dtypes else "fp32"
        self._keep = [under, tensors]
        self.names = (ctypes.c_char * 64 * max(nl, 1))()
        for i, n in enumerate(layers):
            self.names[i].value = n.encode()[:63]
        loss = np.array(mon._loss or [math.nan], dtype=np.float32)
        scale = np.array(mon._scale or [1.0], dtype=np.float32)
        skipped = np.array(mon._skipped or [0], dtype=np.uint8)
        wheres = [self._where(s) for s in mon._skips[:20]]
        self.skips = (ReportSkip * max(len(wheres), 1))(*[ReportSkip(s["step"], s["scale"], w)
                                                           for s, w in zip(mon._skips, wheres)])
        last = mon._history[steps[-1]]
        bins, zeros = last["hist"] or ([0] * HIST_BINS, 0)
        given = loss[np.array(mon._loss_given or [False], dtype=bool)]  # the losses passed, finite or not
        tail = given[-10:]
        self._keep += [loss, scale, skipped, wheres]
        self.run = ReportRun()
        u = self.run
        u.name = ("pytorch-" + compute).encode()
        u.format = compute.encode()
        u.color = b"#1f77b4"
        u.nsteps = nsteps
        u.loss = loss.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        u.scale = scale.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        u.skipped = skipped.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        u.nlayers = nl
        u.layer_names = ctypes.cast(self.names, ctypes.POINTER(ctypes.c_char * 64))
        u.layer_underflow = under.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        u.eval = float(tail.mean()) if tail.size else math.nan
        u.last_loss = float(given[-1]) if given.size else math.nan
        u.underflow = wlost / wtotal if wtotal else 0.0
        u.lost_gradients = wlost / wtotal if wtotal else 0.0
        u.dead_gradients = wdead / wtotal if wtotal else 0.0
        ups = [c for s in steps if mon._history[s]["updates"] for c in mon._history[s]["updates"].values()]
        moved = sum(c["updated"] for c in ups)
        u.lost_updates = sum(c["lost"] for c in ups) / moved if moved else 0.0
        lost_updates = u.lost_updates if moved else None
        u.ms_per_step = 1000 * statistics.median(mon._times) if mon._times else 0.0
        u.memory_mib = math.nan  # the process's peak is Python's and torch's too, not the model's: not shown
        u.final_scale = float(mon._scale[-1]) if mon._scale else 1.0
        u.skipped_total = sum(mon._skipped)
        u.has_hist, u.hist_lo, u.hist_zeros, u.hist_scale = (last["hist"] is not None, _HIST_LO, float(zeros),
                                                             float(last["scale"]))
        for b in range(HIST_BINS):
            u.hist[b] = float(bins[b])
        u.tensors = ctypes.cast(tensors, ctypes.POINTER(TensorStats))
        u.headroom_format = lib.mp_format(dtype_code(fmt))
        u.skips = ctypes.cast(self.skips, ctypes.POINTER(ReportSkip))
        u.nskips = len(wheres)
        u.sample_words = math.nan
        if measured:
            self._keep += list(measured.values())
            self.series = (ReportLayerSeries * len(measured))(*[
                ReportLayerSeries(("%s: %s" % (f, "to 0" if k == "underflow" else "subnormal")).encode(),
                                  _SERIES_COLORS[(2 * mon.formats.index(f) + (k != "underflow")) % len(_SERIES_COLORS)],
                                  m.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
                for (f, k), m in measured.items()])
            u.layer_series, u.nlayer_series = ctypes.cast(self.series, ctypes.POINTER(ReportLayerSeries)), len(measured)
            u.layer_title = ("Weight-gradient values that would become 0 or subnormal if stored in %s at the recorded "
                             "loss scale (recorded steps, held between them)" % " or ".join(mon.formats)).encode()
        self.runs = (ReportRun * 1)(u)
        f16 = lib.mp_format(dtype_code("fp16")).contents
        self.strings = [(title or "mixprec monitor: %s" % type(mon.model).__name__).encode(),
                        " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv).encode(),
                        self._reading(mon, layers, steps, compute, fmt, wlost, wtotal, lost_updates).encode(),
                        b"mean train loss, last 10 steps", b"loss"]
        rep = Report()
        rep.title, rep.command, rep.reading, rep.eval_name, rep.eval_loss_name = self.strings
        rep.fp16_min_subnormal, rep.fp16_min_normal, rep.fp16_max = f16.min_subnormal, f16.min_normal, f16.max
        rep.baseline = -1
        rep.runs = ctypes.cast(self.runs, ctypes.POINTER(ReportRun))
        rep.nruns = 1
        self.report = rep

    @staticmethod
    def _seen(mon):
        seen = {mon._owner[(mn + "." if mn != "(model)" else "") + pn]
                for mn, m in mon._modules for pn, _ in m.named_parameters(recurse=False)}
        for r in mon._history.values():
            seen.update(r["act"])
            seen.update(mon._owner[pn] for pn in r["params"])
        return seen

    @staticmethod
    def _where(s):
        p = s["params"]
        w = ("inf/NaN in the gradients of " + ", ".join(p[:3]) + (" and %d more" % (len(p) - 3) if len(p) > 3 else "")
             if p else "the gradients with inf/NaN were not seen (zeroed in place before after_step?)")
        if s["activation"]:
            w += "; first overflowing activation " + s["activation"]
        return w.encode()

    @staticmethod
    def _verdict(mon, layers, steps):
        """The findings first, one line each: the skipped steps and the tensors that caused them, the steps
        that kept inf/NaN, each format's parameter that would lose the most gradient values at the recorded
        scale (above 1%), the module with the least headroom (under 4 doublings); or that it looks healthy."""
        lines = []
        if mon._skips:
            who = sorted({p for s in mon._skips for p in (s["params"] or [])})
            lines.append("Verdict: %d step%s skipped (inf/NaN in the gradients: the loss scale backed off): step%s "
                         "%s%s." % (len(mon._skips), "s" if len(mon._skips) > 1 else "",
                                    "s" if len(mon._skips) > 1 else "",
                                    ", ".join(str(s["step"]) for s in mon._skips[:8]),
                                    "; caused by " + ", ".join(who[:6]) if who else "; their tensors not seen"))
        if mon._nonfinite:
            lines.append("Verdict: %d step%s kept inf/NaN (no loss scaler skipped them), the first step %d."
                         % (len(mon._nonfinite), "s" if len(mon._nonfinite) > 1 else "", mon._nonfinite[0]["step"]))
        for f in mon.formats:
            worst, frac = None, 0.0
            for s in steps:
                for p, c in mon._history[s]["params"].items():
                    if c[f]["total"] and c[f]["underflow"] / c[f]["total"] > frac:
                        worst, frac = p, c[f]["underflow"] / c[f]["total"]
            if worst is not None and frac > 0.01:
                lines.append("Verdict: %.3g%% of %s's gradient values would be lost (0) in %s at the recorded "
                             "loss scale." % (100 * frac, worst, f))
        head = {}
        for s in steps:
            for n, a in mon._history[s]["act"].items():
                if n in layers and a["amax"] > 0:
                    head[n] = min(head.get(n, math.inf), _headroom(a["amax"], mon._fmax[mon.formats[0]]))
        if head:
            n = min(head, key=head.get)
            if head[n] < 4:
                lines.append("Verdict: headroom under %d doublings in %s: its outputs reach %.3g doublings below "
                             "%s's largest value." % (math.ceil(head[n]) if head[n] > 0 else 0, n, head[n],
                                                      mon.formats[0]))
        if not lines:
            lines.append("Verdict: healthy: no skipped step, no inf/NaN kept, under 1%% of any gradient lost in "
                         "%s, at least 4 doublings of headroom in every layer." % " or ".join(mon.formats))
        return lines

    @staticmethod
    def _reading(mon, layers, steps, compute, fmt, wlost, wtotal, lost_updates):
        nsteps = len(mon._loss)
        shadow = any(mon._history[s]["lost"] is not None for s in steps)
        ps = _ReportBuilder._verdict(mon, layers, steps)
        scales = "Loss scale %g throughout" % mon._scale[0] if min(mon._scale) == max(mon._scale) else \
            "Loss scale from %g at the first step to %g at the last (between %g and %g)" % (
                mon._scale[0], mon._scale[-1], min(mon._scale), max(mon._scale))
        ps.append("%d steps of %s, %d recorded (every %d%s); activations computed in %s. %s; %d skipped steps."
                  % (nsteps, type(mon.model).__name__, len(steps), mon.every, "-th step" if mon.every > 1 else
                     " step", compute, scales, sum(mon._skipped)))
        what = ("nonzero in the fp32 recomputation (shadow) and 0 in this run's gradients" if shadow else
                "that would become 0 if the gradients, as they are in .grad (loss scale included), were stored in "
                + fmt)
        charts = ("the per-layer charts, the heat map and the \"weight gradients lost\" column count the same "
                  "values" if shadow else "the heat map and the \"weight gradients lost\" column count the same "
                  "values, and the per-layer charts those that would become 0 and those that would become subnormal "
                  "in each format")
        ps.append("Weight-gradient values %s: %.4g%% over the recorded steps (%d of %d); %s, sampled on the recorded "
                  "steps and held between them." % (what, 100 * wlost / wtotal if wtotal else 0, wlost, wtotal, charts))
        for f in mon.formats:
            tot = und = sub = ovf = 0
            for s in steps:
                for c in mon._history[s]["params"].values():
                    tot, und, sub, ovf = (tot + c[f]["total"], und + c[f]["underflow"], sub + c[f]["subnormal"],
                                          ovf + c[f]["overflow"])
            ps.append("Stored in %s, %.4g%% of the gradient values would underflow to 0, %.4g%% would become "
                      "subnormal and %d would overflow." % (f, 100 * und / tot if tot else 0,
                                                            100 * sub / tot if tot else 0, ovf))
        amax = {}
        for s in steps:
            for n, a in mon._history[s]["act"].items():
                if n in layers:
                    amax[n] = max(amax.get(n, 0.0), a["amax"])
        if amax:
            n = max(amax, key=amax.get)
            ps.append("The largest activation was in %s: %.4g, %.2f doublings below fp16's largest value 65504."
                      % (n, amax[n], _headroom(amax[n], 65504.0)))
        ranks = [mon._history[s]["ranks"] for s in steps if mon._history[s]["ranks"] is not None]
        if ranks:
            same = all(r["gradients"] == "identical" for r in ranks)
            ps.append("Counts over %d ranks (torch.distributed): each rank's activations and their gradients summed; "
                      "the weight gradients %s. The loss is this rank's." % (
                          ranks[-1]["ranks"], "the same on every rank (DDP's all-reduced ones), counted once" if same
                          else "summed where the ranks' differed (%d of %d recorded steps), counted once where they "
                          "were the same" % (sum(r["gradients"] == "summed" for r in ranks), len(ranks))))
        if mon._nonfinite:
            s = mon._nonfinite[0]
            ps.append("%d steps were not skipped with inf/NaN in their loss or gradients (no loss scaler skips "
                      "them); the first, step %d: %s." % (len(mon._nonfinite), s["step"], _nonfinite_text(s)))
        if lost_updates is not None:
            ps.append("Of the weight values with a nonzero gradient on the recorded steps, %.4g%% were left unchanged "
                      "by the optimizer step (\"updates lost\")." % (100 * lost_updates))
        ps.append("Activation and activation-gradient counts are of the values as they are in their dtype: a value "
                  "that underflowed is an ordinary 0 there, so those columns show subnormals, infs and NaNs, and "
                  "underflow only for the weight gradients.")
        return "\n\n".join(ps)

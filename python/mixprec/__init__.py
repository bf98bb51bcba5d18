"""mixprec: exact fp16/bf16/fp8/fp4 formats and what they do to your numbers, over
libmixprec (the C library of the mixprec command). The C functions read the
memory of numpy arrays and CPU tensors in place.

    formats()                      the formats and their limits
    convert(x, "fp16")             -> (codes, stats): x stored in a format, with what it lost
    underflow(g, "fp16", scales)   the figures of `mixprec underflow --json`
    explore(g, "page.html")        the interactive page of `mixprec explore`
    train(model=..., precision=...)    a run of `mixprec train`, its summary as a dict
    compare(precisions=[...], ...)     the modes side by side, as `mixprec compare`

mixprec.torch.Monitor watches a PyTorch training loop (imports torch).

A wrong type is a TypeError and a bad value a ValueError, each naming the
argument; a value the library refuses is a MixprecValueError (a ValueError
and a MixprecError); MixprecError (a RuntimeError) is the library's own
failures (a file that cannot be written, a failed run)."""
import ctypes
import math
import numbers

import numpy as np

from ._lib import (DTYPES, MAX_SCALES, ConvertStats, MixprecError, MixprecValueError, Underflow, check, dtype_code,
                   lib, names, path_arg, text_arg, threads_check)
from ._train import compare, train

__all__ = ["MixprecError", "MixprecValueError", "version", "formats", "convert", "underflow", "explore", "train",
           "compare"]

DEFAULT_SCALES = (1, 256, 4096, 65536, 1048576)  # as `mixprec underflow`


def version():
    """The library's version string, e.g. "0.1.0"."""
    return lib.mp_version().decode()


def formats():
    """Every format mixprec knows, as dicts: name, bits (of the format: 4 for
    e2m1, which mixprec's buffers hold one to a byte), bytes (per element in a
    buffer), exponent_bits, mantissa_bits (stored, without the hidden bit),
    bias, has_inf, max, min_normal, min_subnormal, eps. e8m0 (MX scales) has no
    sign, zero or subnormals: its min_subnormal is its min_normal, 2^-127, as
    ml_dtypes.finfo says."""
    out = []
    for code in sorted(DTYPES.values()):
        f = lib.mp_format(code).contents
        bits = f.exponent_bits + f.mantissa_bits + (0 if code == DTYPES["e8m0"] else 1)  # e8m0 has no sign bit
        out.append({"name": f.name.decode(), "bits": bits, "bytes": f.size, "exponent_bits": f.exponent_bits,
                    "mantissa_bits": f.mantissa_bits, "bias": f.bias, "has_inf": bool(f.has_inf), "max": f.max,
                    "min_normal": f.min_normal, "min_subnormal": f.min_subnormal, "eps": f.eps})
    return out


_TORCH_DTYPES = {"torch.float32": DTYPES["fp32"], "torch.float16": DTYPES["fp16"], "torch.bfloat16": DTYPES["bf16"]}
_NUMPY_DTYPES = {"float32": DTYPES["fp32"], "float16": DTYPES["fp16"], "bfloat16": DTYPES["bf16"]}


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def _torch_strided():
    import torch
    return torch.strided


def _memory(x, what="values"):
    """(address, mp_dtype, number of elements, owner) of x's values as the C
    functions read them: a torch tensor (float32, float16 or bfloat16, on the
    CPU and contiguous: read in place; otherwise copied to one first) or
    anything numpy takes (float32 and float16 arrays, and ml_dtypes' bfloat16,
    read in place; other numbers are converted to float32, a copy). Keep owner
    alive while the address is used. Values of other types (float64) are
    rounded to float32 first, one rounding more than a direct store: a value
    below float32's range reads as a zero (not an underflow), one beyond it as
    an infinity (not an overflow). Arrays not in the machine's byte order are
    copied into it. A tensor or an array of something else than numbers
    (str, object, complex, dates) is a TypeError naming what."""
    if _is_torch(x):
        t = x.detach()
        if t.is_meta:
            raise ValueError("mixprec: %s: a tensor on the meta device holds no values" % what)
        if t.layout != _torch_strided():
            raise ValueError("mixprec: %s: a %s tensor: give a dense one (x.to_dense())"
                             % (what, str(t.layout).replace("torch.", "")))
        if str(t.dtype) not in _TORCH_DTYPES:
            if not t.is_floating_point():
                raise TypeError("mixprec: %s: a %s tensor holds no floating-point values" % (what, t.dtype))
            t = t.float()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        return t.data_ptr(), _TORCH_DTYPES[str(t.dtype)], t.numel(), t
    if x is None or isinstance(x, (str, bytes, bytearray)):
        raise TypeError("mixprec: %s is an array of numbers, not %s" % (what, type(x).__name__))
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise TypeError("mixprec: %s is an array of real numbers, not of dtype %s" % (what, a.dtype))
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    code = _NUMPY_DTYPES.get(a.dtype.name)
    if code is None:
        a, code = a.astype(np.float32), DTYPES["fp32"]
    a = np.ascontiguousarray(a)
    return a.ctypes.data, code, a.size, a


def _stats(s):
    return {"underflow": s.underflow, "subnormal": s.subnormal, "overflow": s.overflow, "nan": s.nan}


def convert(x, fmt):
    """x stored in fmt ("fp32", "fp16", "bf16", "e4m3", "e5m2", "e8m0",
    "e2m1"), rounded as mixprec converts: to nearest even (E4M3: overflow
    becomes NaN; E2M1 saturates to +-6 and, as ml_dtypes, stores +NaN as 0x8
    and -NaN as 0x0), E8M0 to the nearest power of two with ties up (zeros,
    negatives, inf and NaN become 0xFF, NaN). Returns (codes, stats): codes a
    numpy array of x's shape holding the bit patterns (uint16 for fp16/bf16,
    uint8 for e4m3/e5m2/e8m0/e2m1 -- e2m1 one code per byte, in the low 4
    bits --, float32 values for fp32), stats a dict of counts: underflow
    (nonzero finite values that became 0), subnormal (results subnormal in
    fmt), overflow (finite values that became inf or NaN; e2m1: |x| >= 7,
    saturated; e8m0: too large, became NaN), nan (NaN inputs; e8m0: also
    finite values <= 0, which it cannot hold)."""
    code = dtype_code(fmt, "fmt")
    ptr, src, n, owner = _memory(x, "x")
    shape = tuple(owner.shape)
    out = np.empty(shape, dtype={4: np.float32, 2: np.uint16, 1: np.uint8}[lib.mp_format(code).contents.size])
    st = ConvertStats()
    threads_check()
    check(lib.mp_convert(out.ctypes.data, code, ptr, src, n, ctypes.byref(st)))
    return out, _stats(st)


def _underflow_one(ptr, src, n, fmt, scales):
    code = dtype_code(fmt, "formats")
    arr = (ctypes.c_double * max(1, len(scales)))(*scales)
    u = Underflow()
    threads_check()
    check(lib.mp_underflow_analyze(ptr, src, n, code, arr, len(scales), ctypes.byref(u)))
    m = u.n
    return {"format": lib.mp_format(code).contents.name.decode(), "n": m, "median": u.median, "p5": u.p5,
            "zero_fraction": u.zero_count / m, "zero_count": u.zero_count,
            "scales": [{"scale": c.scale, "survive": c.survive / m, "subnormal": c.subnormal / m,
                        "overflow": c.overflow / m, "zero": c.zero / m} for c in u.scales[:u.nscales]],
            "best_scale": u.best_scale}


def underflow(values, formats="fp16", scales=DEFAULT_SCALES):
    """What storing values (their magnitudes |x|; non-finite ones dropped)
    multiplied by each loss scale loses in a format: the figures of
    `mixprec underflow --json` (format, n, median, p5, zero_fraction,
    zero_count, scales: survive/subnormal/overflow/zero fractions per scale,
    best_scale). formats: one name (returns that dict) or a sequence of names
    (returns {name: dict})."""
    if isinstance(scales, (str, bytes, bytearray)) or not hasattr(scales, "__iter__"):
        raise TypeError("mixprec: scales is a sequence of numbers, not %s" % type(scales).__name__)
    scales = list(scales)
    for s in scales:
        if isinstance(s, bool) or not isinstance(s, numbers.Real):
            raise TypeError("mixprec: scales: each scale is a number, not %s" % type(s).__name__)
    scales = [float(s) for s in scales]
    if not 1 <= len(scales) <= MAX_SCALES:
        raise ValueError("mixprec: scales holds 1 to %d loss scales, not %d" % (MAX_SCALES, len(scales)))
    for s in scales:
        if not (math.isfinite(s) and s > 0):
            raise ValueError("mixprec: scales: each scale is finite and > 0, not %r" % s)
    fmts = names(formats, "formats")
    for f in fmts:
        dtype_code(f, "formats")
    ptr, src, n, owner = _memory(values, "values")
    if isinstance(formats, str):
        return _underflow_one(ptr, src, n, formats, scales)
    return {f: _underflow_one(ptr, src, n, f, scales) for f in fmts}


def explore(values, path, description=None):
    """Writes `mixprec explore`'s interactive page for values (their
    magnitudes) to path: a histogram against fp16, bf16, e5m2 and e4m3 with a
    loss-scale slider, every count computed by mixprec. Returns path."""
    p = path_arg(path, "path")
    if description is not None:
        text_arg(description, "description")
    ptr, src, n, owner = _memory(values, "values")
    if description is None:
        description = "%d values (%s)" % (n, getattr(values, "dtype", type(values).__name__))
    threads_check()
    check(lib.mp_explore_write(p, ptr, src, n, description.encode(errors="replace")))
    return path

"""libmixprec through ctypes: finding the library, the C structures the package
uses, and errors. The structures mirror include/mixprec/*.h field for field."""
import ctypes
import glob
import numbers
import operator
import os

__all__ = ["lib", "MixprecError", "MixprecValueError", "check", "threads_check", "error", "integer", "names", "path_arg", "text_arg",
           "DTYPES", "dtype_code",
           "FormatInfo", "ConvertStats", "ValueCounts", "ScaleCounts", "Underflow",
           "TensorStats", "ReportSkip", "ReportRun", "Report", "HIST_BINS"]


class MixprecError(RuntimeError):
    """An error reported by libmixprec; the message is the library's own
    (mp_last_error())."""


class MixprecValueError(MixprecError, ValueError):
    """A value the library refused (MP_EINVAL: an unknown format, an option
    out of range, options that exclude each other), with the library's
    message: a ValueError, as numpy raises for a bad value, and still a
    MixprecError for code that catches those."""


def _find():
    """MIXPREC_LIB if set, else the library installed next to this file (by
    pip), else the build tree's (build/libmixprec.so, for a checkout)."""
    env = os.environ.get("MIXPREC_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libmixprec.so*", os.path.join("..", "..", "build", "libmixprec.so")):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    raise ImportError("mixprec: libmixprec not found: install the package (pip install <mixprec checkout>), "
                      "or set MIXPREC_LIB to the path of libmixprec.so")


lib = ctypes.CDLL(_find())

# mp_dtype: include/mixprec/format.h (e8m0: MX block scales; e2m1: fp4, one code per byte)
DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2, "e4m3": 3, "e5m2": 4, "e8m0": 5, "e2m1": 6}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def dtype_code(name, what="the format"):
    """The mp_dtype of a format name ("fp16", "bf16", ...); the library parses
    it, so its aliases and its message apply (after what, the argument's name:
    a ValueError). A name that is not a str is a TypeError."""
    name = text_arg(name, what, "a format name such as 'fp16'")
    out = ctypes.c_int()
    status = lib.mp_dtype_parse(name.encode(errors="replace"), ctypes.byref(out))
    if status != 0:
        raise MixprecValueError("mixprec: %s: %s" % (what, lib.mp_last_error().decode(errors="replace")))
    return out.value


class FormatInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("name", ctypes.c_char_p), ("size", ctypes.c_size_t),
                ("exponent_bits", ctypes.c_int), ("mantissa_bits", ctypes.c_int), ("bias", ctypes.c_int),
                ("has_inf", ctypes.c_int), ("max", ctypes.c_double), ("min_normal", ctypes.c_double),
                ("min_subnormal", ctypes.c_double), ("eps", ctypes.c_double)]


class ConvertStats(ctypes.Structure):
    _fields_ = [("underflow", ctypes.c_uint64), ("subnormal", ctypes.c_uint64), ("overflow", ctypes.c_uint64),
                ("nan", ctypes.c_uint64), ("amax", ctypes.c_float)]


class ValueCounts(ctypes.Structure):
    _fields_ = [("zero", ctypes.c_uint64), ("subnormal", ctypes.c_uint64), ("inf", ctypes.c_uint64),
                ("nan", ctypes.c_uint64), ("amax", ctypes.c_float)]


class ScaleCounts(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_double), ("zero", ctypes.c_uint64), ("subnormal", ctypes.c_uint64),
                ("overflow", ctypes.c_uint64), ("survive", ctypes.c_uint64)]


MAX_SCALES = 32  # MP_UNDERFLOW_MAX_SCALES


class Underflow(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("n", ctypes.c_size_t), ("median", ctypes.c_double),
                ("p5", ctypes.c_double), ("zero_count", ctypes.c_uint64), ("best_scale", ctypes.c_double),
                ("best", ScaleCounts), ("nscales", ctypes.c_int), ("scales", ScaleCounts * MAX_SCALES)]


class TensorStats(ctypes.Structure):  # model.h
    _fields_ = [("name", ctypes.c_char * 64), ("fwd", ConvertStats), ("bwd", ConvertStats),
                ("fwd_elements", ctypes.c_uint64), ("bwd_elements", ctypes.c_uint64),
                ("has_wgrad", ctypes.c_int),
                ("wgrad_elements", ctypes.c_uint64), ("wgrad_lost", ctypes.c_uint64), ("wgrad_dead", ctypes.c_uint64)]


HIST_BINS = 84  # MP_REPORT_HIST_BINS


class ReportSkip(ctypes.Structure):  # report.h
    _fields_ = [("step", ctypes.c_long), ("scale", ctypes.c_double), ("where", ctypes.c_char_p)]


class ReportLayerSeries(ctypes.Structure):
    _fields_ = [("label", ctypes.c_char_p), ("color", ctypes.c_char_p), ("values", ctypes.POINTER(ctypes.c_float))]


class ReportRun(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("format", ctypes.c_char_p), ("color", ctypes.c_char_p),
                ("nsteps", ctypes.c_long), ("loss", ctypes.POINTER(ctypes.c_float)),
                ("scale", ctypes.POINTER(ctypes.c_float)), ("skipped", ctypes.POINTER(ctypes.c_uint8)),
                ("nlayers", ctypes.c_int), ("layer_names", ctypes.POINTER(ctypes.c_char * 64)),
                ("layer_underflow", ctypes.POINTER(ctypes.c_float)), ("eval", ctypes.c_double),
                ("last_loss", ctypes.c_double), ("underflow", ctypes.c_double), ("ms_per_step", ctypes.c_double),
                ("memory_mib", ctypes.c_double), ("final_scale", ctypes.c_double), ("bytes_per_param", ctypes.c_double),
                ("lost_gradients", ctypes.c_double), ("dead_gradients", ctypes.c_double),
                ("lost_updates", ctypes.c_double), ("skipped_total", ctypes.c_long),
                ("has_hist", ctypes.c_int), ("hist_lo", ctypes.c_int), ("hist", ctypes.c_double * HIST_BINS),
                ("hist_zeros", ctypes.c_double), ("hist_scale", ctypes.c_double),
                ("warnings", ctypes.POINTER(ctypes.c_char_p)), ("nwarnings", ctypes.c_int),
                ("tensors", ctypes.POINTER(TensorStats)), ("headroom_format", ctypes.POINTER(FormatInfo)),
                ("skips", ctypes.POINTER(ReportSkip)), ("nskips", ctypes.c_long), ("neval", ctypes.c_long),
                ("eval_steps", ctypes.POINTER(ctypes.c_long)), ("eval_losses", ctypes.POINTER(ctypes.c_double)),
                ("sample", ctypes.c_char_p), ("sample_printable", ctypes.c_double), ("sample_words", ctypes.c_double),
                ("precision", ctypes.c_void_p), ("quant", ctypes.c_void_p),
                ("layer_series", ctypes.POINTER(ReportLayerSeries)), ("nlayer_series", ctypes.c_int),
                ("layer_title", ctypes.c_char_p)]


class Report(ctypes.Structure):
    _fields_ = [("title", ctypes.c_char_p), ("command", ctypes.c_char_p), ("reading", ctypes.c_char_p),
                ("fp16_min_subnormal", ctypes.c_double), ("fp16_min_normal", ctypes.c_double),
                ("fp16_max", ctypes.c_double), ("eval_name", ctypes.c_char_p), ("eval_percent", ctypes.c_int),
                ("eval_loss_name", ctypes.c_char_p), ("baseline", ctypes.c_int),
                ("runs", ctypes.POINTER(ReportRun)), ("nruns", ctypes.c_int)]


_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_I = ctypes.c_int
for name, res, args in [
        ("mp_version", ctypes.c_char_p, []),
        ("mp_last_error", ctypes.c_char_p, []),
        ("mp_status_str", ctypes.c_char_p, [_I]),
        ("mp_cpu_env_check", _I, []),
        ("mp_threads_check", _I, []),
        ("mp_get_threads", _I, []),
        ("mp_format", ctypes.POINTER(FormatInfo), [_I]),
        ("mp_dtype_parse", _I, [ctypes.c_char_p, ctypes.POINTER(_I)]),
        ("mp_convert", _I, [_P, _I, _P, _I, _SZ, ctypes.POINTER(ConvertStats)]),
        ("mp_convert_count", _I, [_I, _P, _I, _SZ, ctypes.c_float, ctypes.POINTER(ConvertStats)]),
        ("mp_count_values", _I, [_P, _I, _SZ, ctypes.POINTER(ValueCounts)]),
        ("mp_underflow_analyze", _I, [_P, _I, _SZ, _I, ctypes.POINTER(ctypes.c_double), _I,
                                      ctypes.POINTER(Underflow)]),
        ("mp_log2_histogram", _I, [_P, _I, _SZ, _I, _I, ctypes.POINTER(ctypes.c_uint64),
                                   ctypes.POINTER(ctypes.c_uint64)]),
        ("mp_explore_write", _I, [ctypes.c_char_p, _P, _I, _SZ, ctypes.c_char_p]),
        ("mp_report_write", _I, [ctypes.c_char_p, ctypes.POINTER(Report)])]:
    f = getattr(lib, name)
    f.restype, f.argtypes = res, args


def _check_mirrors():
    """Each structure above against the library's own size of it: a package
    and a library from different versions are refused at import, not read
    past the end of a struct."""
    if not hasattr(lib, "mp_struct_size"):
        raise ImportError("mixprec: the library at %s has no mp_struct_size: it is older than this package"
                          % lib._name)
    lib.mp_struct_size.restype, lib.mp_struct_size.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
    for cname, mirror in [("mp_format_info", FormatInfo), ("mp_convert_stats", ConvertStats),
                          ("mp_value_counts", ValueCounts), ("mp_scale_counts", ScaleCounts),
                          ("mp_underflow", Underflow), ("mp_tensor_stats", TensorStats),
                          ("mp_report_skip", ReportSkip), ("mp_report_run", ReportRun), ("mp_report", Report)]:
        have, want = ctypes.sizeof(mirror), lib.mp_struct_size(cname.encode())
        if have != want:
            raise ImportError("mixprec: %s is %d bytes in the library at %s and %d in this package: the package "
                              "and the library are from different versions" % (cname, want, lib._name, have))


_check_mirrors()

if lib.mp_cpu_env_check() != 0:  # the library ignores such a value; say so once
    import warnings
    warnings.warn("mixprec: %s (ignored)" % lib.mp_last_error().decode(errors="replace"), RuntimeWarning, stacklevel=2)


MP_EINVAL = 1  # include/mixprec/status.h


def error(status):
    """The exception for a failing status, with the library's message: MixprecValueError for MP_EINVAL (a
    value the library refused), MixprecError for the others (a file that could not be written, a failed run)."""
    msg = lib.mp_last_error().decode(errors="replace") or lib.mp_status_str(status).decode()
    return MixprecValueError(msg) if status == MP_EINVAL else MixprecError(msg)


def check(status):
    """Raises error(status) for a failing status."""
    if status != 0:
        raise error(status)


_THREADS_OK = set()


def threads_check():
    """Before a call that runs the library's kernels on threads: that they can start, as the CLI checks (OpenMP's
    runtime ends the process when it cannot start them); a MixprecError naming why otherwise. Checked once per
    thread count."""
    n = lib.mp_get_threads()
    if n not in _THREADS_OK:
        check(lib.mp_threads_check())
        _THREADS_OK.add(n)


def path_arg(path, what):
    """path (a str, bytes or os.PathLike) as the bytes the library takes;
    another type (None included) is a TypeError and a path holding a NUL a
    ValueError, each naming what it is for."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("mixprec: %s is a file name (str, bytes or os.PathLike), not %s" % (what, type(path).__name__))
    p = os.fsencode(path)
    if b"\0" in p:
        raise ValueError("mixprec: %s holds a NUL character" % what)
    return p


def text_arg(value, what, kind="a str"):
    """value, a str (not bytes); anything else is a TypeError naming what, and a str holding a NUL (which the
    library would read as its end: "fp16\\0x" as "fp16") a ValueError."""
    if not isinstance(value, str):
        raise TypeError("mixprec: %s is %s, not %s" % (what, kind, type(value).__name__))
    if "\0" in value:
        raise ValueError("mixprec: %s holds a NUL character" % what)
    return value


def integer(value, what, minimum=None):
    """value as an int: any integral number (int, numpy's integers: operator.index) but a bool, else a
    TypeError naming what; below minimum, a ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) and not hasattr(value, "__index__"):
        raise TypeError("mixprec: %s is an integer, not %s" % (what, type(value).__name__))
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError("mixprec: %s is an integer, not %s" % (what, type(value).__name__)) from None
    if minimum is not None and n < minimum:
        raise ValueError("mixprec: %s must be an integer >= %d, not %d" % (what, minimum, n))
    return n


def names(value, what):
    """value, one format name (a str) or an iterable of them, as a tuple; bytes, a number or an element that
    is not a str is a TypeError naming what."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise TypeError("mixprec: %s is a name or a sequence of names such as ('fp16', 'bf16'), not %s"
                        % (what, type(value).__name__))
    out = tuple(value)
    for v in out:
        text_arg(v, "each of %s" % what, "a name such as 'fp16'")
    return out

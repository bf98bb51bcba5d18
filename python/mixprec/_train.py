"""Training runs through the library: mixprec.train and mixprec.compare call
mp_run and mp_compare (include/mixprec/run.h, compare.h), as `mixprec train`
and `mixprec compare` do, in this process."""
import ctypes
import inspect
import json
import numbers
import os

import numpy as np

from ._lib import error, lib, names, path_arg

_P = ctypes.c_void_p
for _name, _res, _args in [
        ("mp_run_spec_size", ctypes.c_size_t, []),
        ("mp_run_result_size", ctypes.c_size_t, []),
        ("mp_run_defaults", None, [_P]),
        ("mp_run_option", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p]),
        ("mp_run_option_takes_value", ctypes.c_int, [ctypes.c_char_p]),
        ("mp_run_option_name", ctypes.c_char_p, [ctypes.c_size_t]),
        ("mp_run_option_default", ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
        ("mp_run_options_help", ctypes.c_char_p, []),
        ("mp_run", ctypes.c_int, [_P, _P, _P]),
        ("mp_run_result_free", None, [_P]),
        ("mp_run_result_summary", ctypes.c_char_p, [_P]),
        ("mp_run_result_steps", ctypes.c_long, [_P, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
                                                ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
                                                ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8))]),
        ("mp_compare_spec_size", ctypes.c_size_t, []),
        ("mp_compare_result_size", ctypes.c_size_t, []),
        ("mp_compare_defaults", None, [_P]),
        ("mp_compare_option", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p]),
        ("mp_compare", ctypes.c_int, [_P, _P, _P]),
        ("mp_compare_result_free", None, [_P]),
        ("mp_compare_result_summary", ctypes.c_char_p, [_P]),
        ("mp_compare_result_reading", ctypes.c_char_p, [_P])]:
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args

MP_EOVERFLOW = 7  # include/mixprec/status.h
_COMPARE_OPTIONS = {b"precisions": 1, b"out": 1, b"checkpoints": 0}  # compare's own; the others are train's


_PATHS = {"data", "init", "save", "resume", "log", "summary", "dump_grads", "out"}


def _value(key, value):
    """One keyword argument's value as the bytes the library parses: a path as
    os.fsencode makes it (str, bytes or os.PathLike), a number or a name as
    its str(), a list or tuple of them joined with commas."""
    if key in _PATHS:
        return path_arg(value, key)
    if isinstance(value, (list, tuple)):
        return b",".join(_value(key, v) for v in value)
    if isinstance(value, (bytes, bytearray, dict, set, bool, np.bool_, complex, np.complexfloating)) or \
            not isinstance(value, (str, numbers.Number)):
        raise TypeError("mixprec: %s takes a number or a name, not %s" % (key, type(value).__name__))
    text = str(value)
    if "\0" in text:
        raise ValueError("mixprec: %s holds a NUL character" % key)
    try:
        return text.encode()
    except UnicodeEncodeError as e:
        raise ValueError("mixprec: %s is not valid text (%s)" % (key, e.reason)) from None


def _options(func, set_option, spec, options):
    """Each keyword argument as the CLI option of the same name (underscores
    for dashes): a flag takes True or False (False and None leave it
    unset), an option with a value anything _value encodes (None leaves the
    default; a path given as None is a TypeError: train's and compare's
    own defaults of None never come here, _given leaves them out). An unknown name is a
    TypeError as Python's for an unexpected keyword argument; a value the
    library refuses, a ValueError with its message. Returns the encoded
    values, which must outlive the run (the spec points into them)."""
    keep = []
    for key, value in options.items():
        name = key.replace("_", "-").encode()
        takes = _COMPARE_OPTIONS.get(name) if func == "compare" and name in _COMPARE_OPTIONS else \
            lib.mp_run_option_takes_value(name)
        if takes < 0:
            raise TypeError("%s() got an unexpected keyword argument %r" % (func, key))
        if value is None and key in _PATHS:
            raise TypeError("mixprec: %s is a file name (str, bytes or os.PathLike), not None: give a path, or "
                            "leave the argument out" % key)
        if takes == 0:
            if not isinstance(value, (bool, np.bool_)) and value is not None:
                raise TypeError("mixprec: %s is a flag: True or False, not %s" % (key, type(value).__name__))
            if not value:
                continue
            arg = None
        else:
            if value is None:
                continue
            if isinstance(value, (bool, np.bool_)):
                raise TypeError("mixprec: %s takes a number or a name, not bool" % key)
            arg = _value(key, value)
        keep.append((name, arg))
        status = set_option(spec, name, arg)
        if status != 0:
            raise error(status)
    return keep


def _raise(status):
    raise error(status)


def _default(name):
    """--NAME's default as Python shows it: a flag's False, a number, a name,
    a pair of numbers; None where the CLI has no fixed default (a file, or a
    value resolved from the model, mode or optimizer)."""
    buf = ctypes.create_string_buffer(256)
    if lib.mp_run_option_default(name, buf, len(buf)) != 1:
        return None
    text = buf.value.decode()
    if text == "false":
        return False
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if "," in text:
        return tuple(float(v) for v in text.split(","))
    return text


def _train_defaults():
    """{keyword: default} of every `mixprec train` option, in the help's order, from the library's table."""
    out, i = {}, 0
    while True:
        name = lib.mp_run_option_name(i)
        if name is None:
            return out
        out[name.decode().replace("-", "_")] = _default(name)
        i += 1


_TRAIN_DEFAULTS = _train_defaults()
_COMPARE_SETS = ("precision", "log", "summary", "save")  # compare sets these per mode


def _is_default(value, default):
    """value is the signature's default: the same object, or an equal value of the same kind (a number for a
    number, not a bool for a flag)."""
    if value is default:
        return True
    numeric = all(isinstance(x, numbers.Number) and not isinstance(x, (bool, np.bool_)) for x in (value, default))
    if not numeric and type(value) is not type(default):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


def _given(options, defaults):
    """The keyword arguments a caller changed: those equal to the signature's default are left out, so the
    library applies its own (the CLI's) defaults and checks exactly as `mixprec train` without them."""
    return {k: v for k, v in options.items() if k not in defaults or not _is_default(v, defaults[k])}


def _signature(func, leading, defaults, skip=()):
    """func's signature: its leading parameters, then every option as a keyword-only parameter with the
    CLI's default (help() and editors that introspect show them); **options still takes them."""
    params = list(leading)
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v)
               for k, v in defaults.items() if k not in skip and k not in {p.name for p in leading}]
    func.__signature__ = inspect.Signature(params)


def train(**options):
    """Trains as `mixprec train` does, with its options as keyword arguments
    (mixprec train --help): train(model="gpt:2-2-64-64", precision="bf16",
    steps=100, lr=3e-3, log="run.csv"). Silent; files only where asked
    (log, summary, save, dump_grads).

    Returns the run's summary (docs/LOGS.md: losses, evaluation, skipped steps,
    per-tensor underflow, warnings, ...) as a dict, with "loss" and "scale"
    per step added (the skipped steps are the summary's "skipped"). A run that stopped early (its loss scale at the
    floor) returns its results; its warnings say so. An unknown keyword
    argument, a flag given something else than True or False, a bool for an
    option with a value or a path that is not a str, bytes or os.PathLike
    is a TypeError; an option the library refuses, a MixprecValueError (a
    ValueError) with its message; a run that failed, a MixprecError."""
    spec = ctypes.create_string_buffer(lib.mp_run_spec_size())
    result = ctypes.create_string_buffer(lib.mp_run_result_size())
    lib.mp_run_defaults(spec)
    keep = _options("train", lib.mp_run_option, spec, _given(options, _TRAIN_DEFAULTS))
    status = lib.mp_run(spec, None, result)
    try:
        summary = lib.mp_run_result_summary(result)
        if status not in (0, MP_EOVERFLOW) or not summary:
            _raise(status)
        out = json.loads(summary.decode())
        loss, scale = ctypes.POINTER(ctypes.c_float)(), ctypes.POINTER(ctypes.c_float)()
        n = lib.mp_run_result_steps(result, ctypes.byref(loss), ctypes.byref(scale), None)
        out["loss"] = [loss[i] for i in range(n)]
        out["scale"] = [scale[i] for i in range(n)]
        return out
    finally:
        lib.mp_run_result_free(result)
        del keep


def compare(precisions=("fp32", "fp16", "fp16-dynamic", "bf16"), out="mixprec-compare", **options):
    """Trains the same network once per precision mode, as `mixprec compare`
    does: compare(precisions=["fp32", "fp16-dynamic"], model="mlp:784-32-10",
    steps=20, batch=32, out="cmp"). The other keyword arguments are the
    training options (mixprec train --help; not precision, log, summary or
    save, which compare sets per mode); checkpoints=True also writes each
    mode's checkpoint. Writes out/ (report.html, summary.json, each mode's
    .csv, .json and .txt).

    Returns summary.json's content as a dict ("command", "ablation", "runs":
    each mode's summary), with "reading" (the text the report opens with) and
    "report" (the report's path) added. Errors as train's; precisions is a
    name or a sequence of names (else a TypeError)."""
    spec = ctypes.create_string_buffer(lib.mp_compare_spec_size())
    result = ctypes.create_string_buffer(lib.mp_compare_result_size())
    lib.mp_compare_defaults(spec)
    precisions = list(names(precisions, "precisions"))
    keep = _options("compare", lib.mp_compare_option, spec,
                    dict(_given(options, _TRAIN_DEFAULTS), precisions=precisions, out=out))
    status = lib.mp_compare(spec, None, result)
    try:
        if status != 0:
            _raise(status)
        summary = json.loads(lib.mp_compare_result_summary(result).decode())
        summary["reading"] = lib.mp_compare_result_reading(result).decode()
        summary["report"] = os.path.join(os.fsdecode(out), "report.html")
        return summary
    finally:
        lib.mp_compare_result_free(result)
        del keep


_signature(train, [], _TRAIN_DEFAULTS)
_signature(compare, [inspect.Parameter("precisions", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                       default=("fp32", "fp16", "fp16-dynamic", "bf16")),
                     inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="mixprec-compare"),
                     inspect.Parameter("checkpoints", inspect.Parameter.KEYWORD_ONLY, default=False)],
           _TRAIN_DEFAULTS, skip=_COMPARE_SETS)
_OPTIONS_HELP = "\n\nThe options (mixprec train --help):\n" + lib.mp_run_options_help().decode()
train.__doc__ += _OPTIONS_HELP
compare.__doc__ += _OPTIONS_HELP

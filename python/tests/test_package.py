"""mixprec's Python functions against numpy, torch and the mixprec command."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import mixprec
from mixprec import MixprecError


def sample(seed=1, n=20000):
    """float32 values across fp16's whole range and beyond: its thresholds, zeros, NaN, inf."""
    r = np.random.default_rng(seed)
    x = np.concatenate([
        r.lognormal(-17.5, 1.6, n) * r.choice([-1, 1], n),
        r.lognormal(0, 8, n),
        [0.0, -0.0, 2.0**-25, 2.0**-25 * (1 + 2**-20), 2.0**-24, 1023.5 * 2.0**-24, 2.0**-14, 65504.0, 65519.0,
         65520.0, 1e5, np.inf, -np.inf, np.nan, 3e38, 3.4028235e38, 1e-45, 2.0**-140, -2.0**-135]])
    return x.astype(np.float32)


def test_formats_match_numpy():
    f = {d["name"]: d for d in mixprec.formats()}
    assert list(f) == ["fp32", "fp16", "bf16", "e4m3", "e5m2", "e8m0", "e2m1"]
    for name, dt in (("fp32", np.float32), ("fp16", np.float16)):
        fi = np.finfo(dt)
        assert f[name]["max"] == float(fi.max) and f[name]["min_normal"] == float(fi.tiny)
        assert f[name]["eps"] == float(fi.eps) and f[name]["bits"] == fi.bits
        assert f[name]["mantissa_bits"] == fi.nmant and f[name]["exponent_bits"] == fi.nexp
    assert f["fp16"]["min_subnormal"] == 2.0**-24
    assert f["bf16"]["max"] == float.fromhex("0x1.fep127") and f["bf16"]["mantissa_bits"] == 7
    assert f["e4m3"]["max"] == 448 and not f["e4m3"]["has_inf"] and f["e5m2"]["max"] == 57344
    assert f["e8m0"]["bits"] == 8 and f["e2m1"]["bits"] == 4 and f["e2m1"]["bytes"] == 1
    assert f["e8m0"]["max"] == 2.0**127 and f["e8m0"]["min_normal"] == f["e8m0"]["min_subnormal"] == 2.0**-127
    assert f["e2m1"]["max"] == 6 and f["e2m1"]["min_subnormal"] == 0.5 and f["e2m1"]["eps"] == 0.5


def test_mx_formats_match_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    f = {d["name"]: d for d in mixprec.formats()}
    for name, dt in (("e8m0", ml.float8_e8m0fnu), ("e2m1", ml.float4_e2m1fn), ("e4m3", ml.float8_e4m3fn),
                     ("e5m2", ml.float8_e5m2)):
        fi = ml.finfo(dt)
        assert (f[name]["max"], f[name]["min_normal"], f[name]["min_subnormal"], f[name]["eps"]) == (
            float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal), float(fi.eps)), name
        assert (f[name]["bits"], f[name]["mantissa_bits"], f[name]["exponent_bits"]) == (fi.bits, fi.nmant, fi.nexp)


def test_convert_mx_equals_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    x = np.concatenate([sample(5), np.array([0.25, 0.75, 5, 7, -7, 1.5, 3, 2.0**-128, 2.0**127 * 1.5, -1],
                                            dtype=np.float32)])
    for name, dt in (("e8m0", ml.float8_e8m0fnu), ("e2m1", ml.float4_e2m1fn)):
        codes, st = mixprec.convert(x, name)
        with np.errstate(over="ignore", invalid="ignore"):
            ref = x.astype(dt).view(np.uint8)
        assert codes.dtype == np.uint8 and np.array_equal(codes, ref), name
        fin = np.isfinite(x)
        if name == "e2m1":
            assert st == {"underflow": int(np.sum(fin & (x != 0) & (np.abs(x) <= 0.25))),
                          "subnormal": int(np.sum((ref & 7) == 1)), "overflow": int(np.sum(fin & (np.abs(x) >= 7))),
                          "nan": 1}
        else:
            assert st == {"underflow": 0, "subnormal": 0, "overflow": int(np.sum(fin & (x > 0) & (ref == 0xFF))),
                          "nan": 1 + int(np.sum(fin & ~(x > 0)))}
    with pytest.raises(MixprecError, match="e2m1"):
        mixprec.underflow(x, "e2m1")


def test_convert_fp16_equals_numpy():
    x = sample()
    codes, st = mixprec.convert(x, "fp16")
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    ref = h.view(np.uint16)
    nan = np.isnan(x)
    assert codes.dtype == np.uint16 and codes.shape == x.shape
    assert np.array_equal(codes[~nan], ref[~nan]) and np.all(np.isnan(codes[nan].view(np.float16)))
    fin = np.isfinite(x)
    assert st["underflow"] == np.sum((h == 0) & (x != 0) & fin) > 0
    assert st["subnormal"] == np.sum((h != 0) & (np.abs(h) < np.finfo(np.float16).tiny)) > 0
    assert st["overflow"] == np.sum(np.isinf(h) & fin) > 0
    assert st["nan"] == np.sum(nan) == 1


def test_convert_bf16_equals_torch():
    torch = pytest.importorskip("torch")
    x = sample(2)
    codes, st = mixprec.convert(x, "bf16")
    t = torch.from_numpy(x).to(torch.bfloat16)
    ref = t.view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(codes[~nan], ref[~nan])
    tf = t.float().numpy()
    assert st["underflow"] == np.sum((tf == 0) & (x != 0) & np.isfinite(x)) > 0
    assert st["overflow"] == np.sum(np.isinf(tf) & np.isfinite(x)) > 0
    # torch CPU tensors are read in place, bf16 ones too
    back, _ = mixprec.convert(t, "fp32")
    assert np.array_equal(back[~nan], tf[~nan])


def test_convert_fp8_values():
    x = np.array([448, 464, 0.5, -2.0**-9, 2.0**-10, 57344, 61440, np.nan], dtype=np.float32)
    e4, s4 = mixprec.convert(x, "e4m3")
    assert e4.dtype == np.uint8 and list(e4[:7]) == [0x7E, 0x7E, 0x30, 0x81, 0x00, 0x7F, 0x7F]
    assert s4 == {"underflow": 1, "subnormal": 1, "overflow": 2, "nan": 1}
    e5, s5 = mixprec.convert(x, "e5m2")
    assert list(e5[:6]) == [0x5F, 0x5F, 0x38, 0x98, 0x14, 0x7B] and e5[6] == 0x7C
    assert s5["overflow"] == 1 and s5["underflow"] == 0


def test_memory_is_read_in_place():
    a = np.ones(1000, dtype=np.float32)
    assert mixprec._memory(a)[0] == a.ctypes.data
    torch = pytest.importorskip("torch")
    t = torch.ones(1000, dtype=torch.bfloat16)
    assert mixprec._memory(t)[0] == t.data_ptr()


def test_other_byte_orders_and_types_are_read_as_values():
    x = sample(3)
    codes, st = mixprec.convert(x, "fp16")
    be_codes, be_st = mixprec.convert(x.astype(">f4"), "fp16")
    assert np.array_equal(be_codes, codes) and be_st == st
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    assert np.array_equal(mixprec.convert(h.astype(">f2"), "fp32")[0], mixprec.convert(h, "fp32")[0], equal_nan=True)
    # float64 is rounded to float32 first, as documented: 1e-50 reads as a zero and 1e300 as an infinity
    d = np.array([1e-8, 7e4, 1e-50, 1e300], dtype=np.float64)
    with np.errstate(over="ignore"):
        assert mixprec.convert(d, "fp16")[1] == {"underflow": 1, "subnormal": 0, "overflow": 1, "nan": 0}


def write_values(path, x):
    x.astype(np.float32).tofile(path)


def test_underflow_equals_cli(tmp_path, cli):
    x = sample(3)
    f = tmp_path / "g.f32"
    write_values(f, x)
    for fmt in ("fp16", "bf16", "e4m3", "e5m2"):
        out = subprocess.run([cli, "underflow", "--from", str(f), "--raw", "--format", fmt, "--scales", "1,0.5,1024,65536",
                              "--json"], capture_output=True, text=True, check=True).stdout
        want = json.loads(out)
        got = mixprec.underflow(x, fmt, scales=(1, 0.5, 1024, 65536))
        assert got.keys() == want.keys() and got["n"] == want["n"] == np.sum(np.isfinite(x))
        for k in ("median", "p5", "zero_fraction", "zero_count", "best_scale"):
            assert float("%.9g" % got[k]) == want[k], (fmt, k)
        for g, w in zip(got["scales"], want["scales"], strict=True):
            assert {k: float("%.9g" % v) for k, v in g.items()} == w
    both = mixprec.underflow(x, ("fp16", "bf16"))
    assert both["fp16"]["scales"][0]["zero"] > both["bf16"]["scales"][0]["zero"]


def test_explore_equals_cli(tmp_path, cli):
    x = sample(4)
    f = tmp_path / "g.f32"
    write_values(f, x)
    subprocess.run([cli, "explore", "--from", str(f), "--raw", "--out", str(tmp_path / "cli.html")], check=True,
                   capture_output=True)
    n = int(np.sum(np.isfinite(x)))
    mixprec.explore(x, tmp_path / "py.html", description="%d gradient magnitudes from %s" % (n, f))
    assert (tmp_path / "py.html").read_bytes() == (tmp_path / "cli.html").read_bytes()
    mixprec.explore(x, tmp_path / "esc.html", description="<script>alert(1)</script>")
    page = (tmp_path / "esc.html").read_text()
    assert "&lt;script&gt;alert(1)" in page and "<script>alert" not in page


@pytest.mark.parametrize("var,value", [("MIXPREC_THREADS", "1x"), ("MIXPREC_THREADS", "10000"), ("MIXPREC_ISA", "SCALAR")])
def test_bad_environment_values_are_named_on_import(var, value):
    """The library ignores a value it cannot take; importing the package says so once."""
    env = dict(os.environ, **{var: value})
    code = "import warnings; warnings.simplefilter('error'); import mixprec"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and f"{var}={value}: not a" in r.stderr, r.stderr
    env[var] = "1" if var == "MIXPREC_THREADS" else "scalar"
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_errors_carry_the_library_message(tmp_path):
    with pytest.raises(MixprecError, match="fp7"):
        mixprec.convert(np.ones(3, np.float32), "fp7")
    with pytest.raises(MixprecError, match="finite"):
        mixprec.underflow(np.full(4, np.nan, np.float32))
    with pytest.raises(ValueError, match="scales: each scale is finite and > 0, not -2.0"):
        mixprec.underflow(np.ones(4, np.float32), scales=(1, -2))
    with pytest.raises(MixprecError, match="no_such_dir"):
        mixprec.explore(np.ones(4, np.float32), tmp_path / "no_such_dir" / "x.html")
    assert not os.path.exists(tmp_path / "no_such_dir")
    with pytest.raises(TypeError, match="path is a file name .*not NoneType"):
        mixprec.explore(np.ones(4, np.float32), None)
    with pytest.raises(ValueError, match="NUL"):
        mixprec.explore(np.ones(4, np.float32), str(tmp_path / "a\0b.html"))
    with pytest.raises(MixprecError, match="/dev/null is a device, not a regular file"):
        mixprec.explore(np.ones(4, np.float32), "/dev/null")
    assert not os.path.exists("None")
    with pytest.raises(TypeError, match="x is an array of real numbers, not of dtype <U1"):
        mixprec.convert(np.array(["a"]), "fp16")
    assert math.isfinite(mixprec.underflow(np.array([1e-8, 1.0]))["median"])  # float64 input: converted


def test_argument_types_are_checked():
    g = np.ones(8, np.float32)
    for bad in ("12", b"12", 12):
        with pytest.raises(TypeError, match="scales is a sequence of numbers"):
            mixprec.underflow(g, scales=bad)
    with pytest.raises(TypeError, match="scales: each scale is a number, not str"):
        mixprec.underflow(g, scales=[1, "2"])
    with pytest.raises(TypeError, match="formats is a name or a sequence"):
        mixprec.underflow(g, formats=b"fp16")
    with pytest.raises(TypeError, match="each of formats is a name"):
        mixprec.underflow(g, formats=["fp16", 2])
    with pytest.raises(TypeError, match="fmt is a format name"):
        mixprec.convert(g, 16)
    assert mixprec.underflow(g, scales=[np.int64(2), np.float32(4)])["scales"][1]["scale"] == 4


def test_tensors_without_values_are_refused_by_name():
    torch = pytest.importorskip("torch")
    sparse = torch.ones(4).to_sparse()
    with pytest.raises(ValueError, match="a sparse_coo tensor: give a dense one"):
        mixprec.convert(sparse, "fp16")
    with pytest.raises(ValueError, match="meta device holds no values"):
        mixprec.underflow(torch.ones(4, device="meta"))
    codes, _ = mixprec.convert(sparse.to_dense(), "fp16")
    assert codes.tolist() == [0x3c00] * 4


def test_each_mirrored_struct_is_checked_against_the_library_at_import(monkeypatch):
    from mixprec import _lib
    assert _lib.lib.mp_struct_size(b"mp_report_run") == __import__("ctypes").sizeof(_lib.ReportRun) > 0
    assert _lib.lib.mp_struct_size(b"no_such_struct") == 0
    real = _lib.lib.mp_struct_size

    def grown(name):  # a library whose mp_report_run grew a field
        return real(name) + (8 if name == b"mp_report_run" else 0)
    monkeypatch.setattr(_lib.lib, "mp_struct_size", grown)
    with pytest.raises(ImportError, match="mp_report_run is .* bytes in the library .* different versions"):
        _lib._check_mirrors()


def test_threads_that_cannot_start_are_a_mixprec_error_not_the_end_of_the_process():
    # each thread's stack is the 4 GB stack limit, against a 3 GB address space: the kernels' second thread cannot
    # start, which OpenMP's runtime would answer by ending the process with two lines of its own
    code = ("import numpy as np, mixprec\n"
            "try:\n    mixprec.underflow(np.float32([1e-3] * 1000))\n"
            "except mixprec.MixprecError as e:\n    print('refused:', e)\n")

    def limits():
        import resource
        resource.setrlimit(resource.RLIMIT_STACK, (4_000_000_000, resource.getrlimit(resource.RLIMIT_STACK)[1]))
        resource.setrlimit(resource.RLIMIT_AS, (3_000_000_000, 3_000_000_000))
    env = dict(os.environ, MIXPREC_THREADS="2", OPENBLAS_NUM_THREADS="1")  # numpy's BLAS: one thread of its own
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, preexec_fn=limits)
    assert r.returncode == 0 and r.stdout.startswith("refused: cannot start 2 threads"), (r.stdout, r.stderr)
    assert "libgomp" not in r.stderr and "Thread creation failed" not in r.stderr

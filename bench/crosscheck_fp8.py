#!/usr/bin/env python3
"""Cross-check mixprec's per-tensor fp8 scaling (mx.h: mp_fp8_quantize,
mp_fp8_dequantize, mp_fp8_scale) against PyTorch and torchao, through the
shared library and ctypes.

  quantize    torchao's tensorwise cast (torchao/float8/float8_training_tensor.py
              ToFloat8ConstrFunc): (x.to(float32) * scale), then
              float8_utils.to_fp8_saturated (clamp to +-max, then .to(float8)).
              Every code must have the same bits; NaN codes must be NaN of the
              same sign (torch writes E5M2 NaN as 0x7f, mixprec keeps the
              payload bit as format.h does: 0x7e for the default NaN).
  statistics  n, saturated, flushed, nonfinite and amax recounted with numpy.
  dequantize  TE's rule, code.to(float32) * fp32(1 / scale): the same bits;
              torchao's code / scale is reported, not required.
  scale       fp8_max / amax as torch's fp32 division (inf -> FLT_MAX), and
              torchao's amax_to_scale (fp64 division, rounded to fp32) where
              its EPS clamp does not apply and the quotient stays finite.

Exit status 1 on any mismatch.
Usage: bench/crosscheck_fp8.py [--lib build/libmixprec.so] [--n 4194304]"""
import argparse
import ctypes
import sys

import numpy as np
import torch

try:
    from torchao.float8.float8_utils import EPS as TORCHAO_EPS
    from torchao.float8.float8_utils import amax_to_scale, to_fp8_saturated
except ImportError:  # mirror torchao 0.18's float8_utils
    TORCHAO_EPS = 1e-12

    def to_fp8_saturated(x, float8_dtype):
        max_value = torch.finfo(float8_dtype).max
        return x.clamp(min=-max_value, max=max_value).to(float8_dtype)

    def amax_to_scale(amax, float8_dtype, round_scales_to_power_of_2=False):
        amax = amax.to(torch.float64)
        return (torch.finfo(float8_dtype).max / torch.clamp(amax, min=TORCHAO_EPS)).to(torch.float32)


MP_E4M3, MP_E5M2 = 3, 4
FLT_MAX = float(np.finfo(np.float32).max)
FORMATS = [(MP_E4M3, "e4m3", torch.float8_e4m3fn, 448.0, 0x7E),
           (MP_E5M2, "e5m2", torch.float8_e5m2, 57344.0, 0x7B)]


class QuantStats(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint64), ("saturated", ctypes.c_uint64), ("flushed", ctypes.c_uint64),
                ("nonfinite", ctypes.c_uint64), ("amax", ctypes.c_float)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.mp_fp8_quantize.restype = ctypes.c_int
    lib.mp_fp8_quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_float,
                                    ctypes.POINTER(QuantStats)]
    lib.mp_fp8_dequantize.restype = ctypes.c_int
    lib.mp_fp8_dequantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                      ctypes.c_float]
    lib.mp_fp8_scale.restype = ctypes.c_float
    lib.mp_fp8_scale.argtypes = [ctypes.c_float, ctypes.c_int, ctypes.c_float, ctypes.POINTER(ctypes.c_float)]
    return lib


def mp_quantize(lib, x, fmt, scale):
    codes = np.empty(x.size, np.uint8)
    st = QuantStats()
    rc = lib.mp_fp8_quantize(codes.ctypes.data, x.ctypes.data, x.size, fmt, scale, ctypes.byref(st))
    assert rc == 0, rc
    return codes, st


def mp_dequantize(lib, codes, fmt, scale):
    out = np.empty(codes.size, np.float32)
    rc = lib.mp_fp8_dequantize(out.ctypes.data, codes.ctypes.data, codes.size, fmt, scale)
    assert rc == 0, rc
    return out


def inputs(rng, n):
    """fp32 test data: gradient-like normals of many magnitudes, random bit
    patterns (subnormals, infinities, NaNs), exact ties of both formats."""
    parts = []
    for sigma in (1e-6, 1e-3, 1.0, 30.0, 1e4):
        parts.append((rng.standard_normal(n // 8) * sigma).astype(np.float32))
    parts.append(rng.integers(0, 1 << 32, n // 8, dtype=np.uint64).astype(np.uint32).view(np.float32))
    k = rng.integers(0, 1 << 12, n // 8)
    e = rng.integers(-24, 17, n // 8)
    parts.append(np.ldexp((2 * k + 1).astype(np.float64), e - 13).astype(np.float32))  # midpoints of fp8 grids
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 464.0, 465.0, 61439.0, 61440.0,
                           448.0, 57344.0, 2.0 ** -10, 2.0 ** -17, 1e-45, -1e-40, FLT_MAX], np.float32))
    return np.concatenate(parts)


def compare_codes(got, ref, fmt):
    """mismatches: equal bits, or both NaN with the same sign"""
    if fmt == MP_E4M3:
        nan_g, nan_r = (got & 0x7F) == 0x7F, (ref & 0x7F) == 0x7F
    else:
        nan_g, nan_r = (got & 0x7F) > 0x7C, (ref & 0x7F) > 0x7C
    ok = (got == ref) | (nan_g & nan_r & ((got >> 7) == (ref >> 7)))
    return int((~ok).sum()), int((nan_g & nan_r & (got != ref)).sum())


def recount(x, scale, ref_codes, max_code, fmax):
    """the statistics mx.h defines, from numpy: saturated = finite inputs whose
    fp32 product rounds past the max (the non-saturating cast overflows)"""
    fin = np.isfinite(x)
    with np.errstate(all="ignore"):
        p = (torch.from_numpy(x) * torch.tensor(scale, dtype=torch.float32)).numpy()
    tie_up = 464.0 if fmax == 448.0 else 61440.0
    past = np.abs(p) > tie_up if fmax == 448.0 else np.abs(p) >= tie_up
    sat = int((fin & past).sum())
    flushed = int((fin & (x != 0) & ((ref_codes & 0x7F) == 0)).sum())
    amax = float(np.abs(x[fin]).max()) if fin.any() else 0.0
    return x.size, sat, flushed, int((~fin).sum()), amax


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libmixprec.so")
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--scales", type=int, default=24)
    a = ap.parse_args()
    lib = load(a.lib)
    rng = np.random.default_rng(8)
    x = inputs(rng, a.n)
    bad = 0
    print(f"torch {torch.__version__}, {x.size} fp32 inputs per scale")

    for fmt, name, dt, fmax, max_code in FORMATS:
        xf = x[np.isfinite(x)]
        amaxes = [float(np.abs(xf).max()), 1.0, 3.0, 1e-3, 2.0 ** -20, 7e4]
        amaxes += [float(v) for v in np.exp(rng.uniform(-30, 30, a.scales - len(amaxes)))]
        mism = nan_bits = st_bad = deq_bad = deq_div = 0
        for amax in amaxes:
            scale_t = amax_to_scale(torch.tensor(amax, dtype=torch.float32), dt)  # torchao's tensorwise scale
            scale = float(scale_t)
            ref = to_fp8_saturated(torch.from_numpy(x).to(torch.float32) * scale_t, dt).view(torch.uint8).numpy()
            got, st = mp_quantize(lib, x, fmt, scale)
            m, nb = compare_codes(got, ref, fmt)
            mism += m
            nan_bits += nb
            want = recount(x, scale, ref, max_code, fmax)
            have = (st.n, st.saturated, st.flushed, st.nonfinite, float(np.float32(st.amax)))
            if have != want:
                st_bad += 1
                print(f"  {name} scale {scale!r}: stats {have}, want {want}")
            # dequantize: TE's code * fp32(1/scale)
            deq = mp_dequantize(lib, got, fmt, scale)
            codes_t = torch.from_numpy(got).view(dt).to(torch.float32)
            te = (codes_t * torch.reciprocal(scale_t)).numpy()
            ao = (codes_t / scale_t).numpy()
            same = (deq.view(np.uint32) == te.view(np.uint32)) | (np.isnan(deq) & np.isnan(te))
            deq_bad += int((~same).sum())
            deq_div += int(((deq != ao) & ~np.isnan(ao)).sum())
        print(f"{name}: quantize vs torchao to_fp8_saturated(x * scale): {len(amaxes)} scales x {x.size} inputs, "
              f"{mism} differ ({nan_bits} NaN codes with other payload bits, allowed)")
        print(f"{name}: stats (n, saturated, flushed, nonfinite, amax) vs numpy: {st_bad} of {len(amaxes)} differ")
        print(f"{name}: dequantize vs code * torch.reciprocal(scale) (TE): {deq_bad} differ; "
              f"vs code / scale (torchao): {deq_div} differ (expected: another rounding)")
        bad += mism + st_bad + deq_bad

    # the scale: torch's fp32 division, torchao's amax_to_scale
    amax = np.concatenate([rng.integers(1, 0x7F800000, 1 << 16, dtype=np.uint32).view(np.float32),
                           np.array([1.0, 3.0, 448.0, 1e-38, 2.0 ** -119, 2.0 ** -120, FLT_MAX], np.float32)])
    for fmt, name, dt, fmax, _ in FORMATS:
        got = np.array([lib.mp_fp8_scale(float(v), fmt, 0.0, None) for v in amax], np.float32)
        with np.errstate(all="ignore"):
            div = (torch.tensor(fmax, dtype=torch.float32) / torch.from_numpy(amax)).numpy()
        div = np.where(np.isinf(div), np.float32(FLT_MAX), div)
        d1 = int((got.view(np.uint32) != div.view(np.uint32)).sum())
        ao = amax_to_scale(torch.from_numpy(amax), dt).numpy()
        usable = (amax >= TORCHAO_EPS) & np.isfinite(ao)
        d2 = int((got[usable].view(np.uint32) != ao[usable].view(np.uint32)).sum())
        print(f"{name}: mp_fp8_scale vs torch fp32 {fmax:g} / amax: {amax.size} amaxes, {d1} differ; "
              f"vs torchao amax_to_scale: {int(usable.sum())} comparable, {d2} differ")
        bad += d1 + d2
    nan_prev = ctypes.c_float(0.5)
    specials = [(0.0, None, 1.0), (float("inf"), None, 1.0), (float("nan"), None, 1.0),
                (0.0, nan_prev, 0.5), (float("nan"), nan_prev, 0.5), (1.0, None, 448.0)]
    sp_bad = 0
    for v, prev, want in specials:
        s = lib.mp_fp8_scale(v, MP_E4M3, 0.0, ctypes.byref(prev) if prev is not None else None)
        sp_bad += s != want
    print(f"mp_fp8_scale special amaxes (0, inf, NaN: 1 or the previous scale): {sp_bad} differ")
    bad += sp_bad
    print("crosscheck_fp8:", "OK" if bad == 0 else f"{bad} MISMATCHES")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Cross-check mixprec's conversions against numpy's float16 and PyTorch's
bfloat16 on a large random sample of fp32 bit patterns (plus every fp16/bf16
code), through the shared library and ctypes. NaNs are compared as NaN with
the same sign against numpy, and as NaN alone against PyTorch, whose
.bfloat16() (1.13, Debian) turns every NaN into 0xffff, a negative NaN.
Usage: bench/crosscheck.py [--lib build/libmixprec.so] [--n 16777216]"""
import argparse
import ctypes
import sys

import numpy as np

try:
    import torch
except ImportError:
    torch = None

MP_F32, MP_F16, MP_BF16 = 0, 1, 2


def convert(lib, x, dst_type, src_type, dst_dtype):
    out = np.empty(x.size, dst_dtype)
    st = lib.mp_convert(out.ctypes.data_as(ctypes.c_void_p), dst_type, x.ctypes.data_as(ctypes.c_void_p),
                        src_type, ctypes.c_size_t(x.size), None)
    assert st == 0, st
    return out


def same_bits_or_nan(a_bits, b_bits, nan_a, nan_b, sign_a, sign_b):
    ok = (a_bits == b_bits) | (nan_a & nan_b & (sign_a == sign_b))
    return int((~ok).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libmixprec.so")
    ap.add_argument("--n", type=int, default=1 << 24)
    a = ap.parse_args()
    lib = ctypes.CDLL(a.lib)
    lib.mp_convert.restype = ctypes.c_int
    lib.mp_convert.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                               ctypes.c_void_p]
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, a.n, dtype=np.uint64).astype(np.uint32)
    bits[: 1 << 16] = np.arange(1 << 16, dtype=np.uint32) << 16  # every bf16 code as fp32
    x = bits.view(np.float32)
    bad = 0

    with np.errstate(all="ignore"):
        ref16 = x.astype(np.float16).view(np.uint16)
    got16 = convert(lib, x, MP_F16, MP_F32, np.uint16)
    d = same_bits_or_nan(got16, ref16, (got16 & 0x7FFF) > 0x7C00, (ref16 & 0x7FFF) > 0x7C00, got16 >> 15, ref16 >> 15)
    print(f"fp32 -> fp16 vs numpy astype(float16): {a.n} inputs, {d} differ")
    bad += d
    codes = np.arange(1 << 16, dtype=np.uint16)
    got = convert(lib, codes, MP_F32, MP_F16, np.float32)
    ref = codes.view(np.float16).astype(np.float32)
    d = int((~((got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref)))).sum())
    print(f"fp16 -> fp32 vs numpy: all 65536 codes, {d} differ")
    bad += d

    if torch is None:
        print("torch not installed: bf16 cross-check skipped (make bench installs python3-torch)")
    else:
        tref = torch.from_numpy(x.copy()).bfloat16().view(torch.int16).numpy().view(np.uint16)
        gotb = convert(lib, x, MP_BF16, MP_F32, np.uint16)
        nan_g, nan_t = (gotb & 0x7FFF) > 0x7F80, (tref & 0x7FFF) > 0x7F80
        d = same_bits_or_nan(gotb, tref, nan_g, nan_t, 0, 0)
        print(f"fp32 -> bf16 vs torch .bfloat16(): {a.n} inputs, {d} differ")
        bad += d
        got = convert(lib, codes, MP_F32, MP_BF16, np.float32)
        ref = torch.from_numpy(codes.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
        d = int((~((got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref)))).sum())
        print(f"bf16 -> fp32 vs torch: all 65536 codes, {d} differ")
        bad += d
    print("crosscheck:", "all equal" if bad == 0 else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

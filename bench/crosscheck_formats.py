#!/usr/bin/env python3
"""crosscheck_formats.py - mixprec's fp8/fp4 conversions against ml_dtypes, on
every fp32 bit pattern.

    bench/.venv/bin/python bench/crosscheck_formats.py --lib build/libmixprec.so

Loads libmixprec with ctypes and compares, for all 2^32 fp32 inputs (in chunks
of 2^24, numpy on both sides), mixprec's narrowing with ml_dtypes' (0.7)
astype():

  e4m3      mp_f32_to_e4m3 (through mp_convert)  vs float8_e4m3fn. Both are
            non-saturating: overflow (past 464) and +-inf give NaN (0x7f/0xff).
  e4m3_sat  mp_f32_to_e4m3_sat (the scalar function, called in a loop by a
            small C helper this script compiles, as nothing bulk reaches it)
            vs np.clip(x, -448, 448).astype(float8_e4m3fn): ml_dtypes has no
            saturating cast, and clamping first is what saturation means (a
            value in (448, 464] rounds to 448 either way; NaN passes np.clip).
  e5m2      mp_f32_to_e5m2 (mp_convert) vs float8_e5m2
  e8m0      mp_f32_to_e8m0 (mp_convert) vs float8_e8m0fnu
  e2m1      mp_f32_to_e2m1 (mp_convert) vs float4_e2m1fn (one code a byte)

Codes are compared bit for bit, NaN results included (E4M3, E8M0 and E2M1
have one way to write what a NaN becomes, and both sides agree on it), except
E5M2 from a NaN input: mixprec keeps the top payload bits (as vcvtps2ph and
numpy's float16 do) and ml_dtypes writes the canonical 0x7e/0xfe, so there the
NaN-ness and the sign are compared and the bit-identical ones counted.

Then every code's widening (mp_convert to fp32, and the scalar
mp_*_to_f32 through ctypes) against ml_dtypes' astype(float32): 256 codes of
e4m3, e5m2 and e8m0, 16 of e2m1, bit for bit; NaN codes by NaN-ness and sign
(ml_dtypes widens every NaN to the canonical 0x7fc00000 with the sign, mixprec
keeps E5M2's payload). E2M1 bytes 0x10..0xff are no codes: mixprec reads their
low 4 bits, ml_dtypes takes any high bit as a sign; counted, not compared.

Prints counts and mismatches; exits 1 on any mismatch."""
import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    sys.exit("crosscheck_formats.py: needs ml_dtypes (scripts/bench_venv.sh installs it in bench/.venv)")

MP = {"fp32": 0, "e4m3": 3, "e5m2": 4, "e8m0": 5, "e2m1": 6}  # mp_dtype, include/mixprec/format.h
ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e8m0": ml_dtypes.float8_e8m0fnu,
      "e2m1": ml_dtypes.float4_e2m1fn}
NAN_BITS_LOOSE = {"e5m2"}  # NaN results: NaN-ness and sign compared (payloads differ by design)

HELPER_C = r"""
#include <stddef.h>
#include <stdint.h>
/* y[i] = f(x[i]) for a uint8_t (float) function of libmixprec, by pointer */
void map_f32_u8(uint8_t (*f)(float), const float *x, uint8_t *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = f(x[i]);
}
"""


class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.mp_convert.restype = ctypes.c_int
        L.mp_convert.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                 ctypes.c_void_p]
        L.mp_last_error.restype = ctypes.c_char_p
        for name in ("e4m3", "e5m2", "e8m0", "e2m1"):
            f = getattr(L, "mp_%s_to_f32" % name)
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_uint8]
        L.mp_set_threads.argtypes = [ctypes.c_int]
        self.helper = None

    def convert(self, dst, dt, src, st):
        s = self.lib.mp_convert(dst.ctypes.data, MP[dt], src.ctypes.data, MP[st], src.size, None)
        if s:
            raise RuntimeError("mp_convert: %s" % self.lib.mp_last_error().decode())

    def build_helper(self, tmp):
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            return "no C compiler (set CC)"
        src, so = os.path.join(tmp, "helper.c"), os.path.join(tmp, "helper.so")
        with open(src, "w") as f:
            f.write(HELPER_C)
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", so], capture_output=True, text=True)
        if r.returncode:
            return "%s failed: %s" % (cc, r.stderr.strip())
        h = ctypes.CDLL(so)
        h.map_f32_u8.restype = None
        h.map_f32_u8.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        self.helper = h
        return None

    def map_u8(self, fname, x, out):
        fp = ctypes.cast(getattr(self.lib, fname), ctypes.c_void_p).value
        self.helper.map_f32_u8(fp, x.ctypes.data, out.ctypes.data, x.size)


class Tally:
    def __init__(self, name):
        self.name, self.n, self.bad, self.nan_loose, self.nan_same_bits, self.examples = name, 0, 0, 0, 0, []

    def add(self, u, ours, ref, nan_in=None):
        """u: the fp32 inputs' bits; ours, ref: uint8 codes."""
        self.n += u.size
        if self.name in NAN_BITS_LOOSE:
            # NaN inputs: both must be NaN codes (exponent all ones, mantissa nonzero) of the input's sign
            diff = ours != ref
            if nan_in.any():
                o, r = ours[nan_in], ref[nan_in]
                sign_ok = ((o >> 7) == (u[nan_in] >> 31)) & ((r >> 7) == (o >> 7))
                ok = ((o & 0x7f) > 0x7c) & ((r & 0x7f) > 0x7c) & sign_ok
                self.nan_loose += int(nan_in.sum())
                self.nan_same_bits += int(np.count_nonzero(o == r))
                diff[nan_in] = ~ok
        else:
            diff = ours != ref
        k = int(np.count_nonzero(diff))
        if k:
            self.bad += k
            for i in np.flatnonzero(diff)[: max(0, 5 - len(self.examples))]:
                self.examples.append((int(u[i]), int(ours[i]), int(ref[i])))

    def line(self):
        s = "%-9s %11d inputs  %s" % (self.name, self.n, "OK" if not self.bad else "%d MISMATCHES" % self.bad)
        if self.nan_loose:
            s += "  (%d NaN inputs compared by NaN-ness and sign; %d of them bit-identical)" % (
                self.nan_loose, self.nan_same_bits)
        for u, o, r in self.examples:
            s += "\n          e.g. fp32 0x%08x: mixprec 0x%02x, ml_dtypes 0x%02x" % (u, o, r)
        return s


def narrow_all(lib, chunk_bits, limit, sat_mode):
    names = ["e4m3", "e4m3_sat", "e5m2", "e8m0", "e2m1"]
    tallies = {n: Tally(n) for n in names}
    n = 1 << chunk_bits
    idx = np.arange(n, dtype=np.uint32)
    u = np.empty(n, dtype=np.uint32)
    x = u.view(np.float32)
    ours = np.empty(n, dtype=np.uint8)
    total = limit
    for lo in range(0, total, n):
        np.add(idx, np.uint32(lo), out=u)
        nan_in = np.isnan(x)
        with np.errstate(over="ignore", invalid="ignore"):
            for name in ("e4m3", "e5m2", "e8m0", "e2m1"):
                lib.convert(ours, name, x, "fp32")
                tallies[name].add(u, ours, x.astype(ML[name]).view(np.uint8), nan_in)
            ref = np.clip(x, -448.0, 448.0).astype(ML["e4m3"]).view(np.uint8)
            if sat_mode == "all":
                lib.map_u8("mp_f32_to_e4m3_sat", x, ours)
                tallies["e4m3_sat"].add(u, ours, ref)
            else:  # no compiler: the scalar function through ctypes on every 65537th input and the boundaries
                f = lib.lib.mp_f32_to_e4m3_sat
                f.restype, f.argtypes = ctypes.c_uint8, [ctypes.c_float]
                pick = np.concatenate([np.arange(0, n, 65537), np.flatnonzero(np.abs(x) >= 440)[::997]])
                got = np.array([f(float(v)) for v in x[pick]], dtype=np.uint8)
                tallies["e4m3_sat"].add(u[pick], got, ref[pick])
        done = lo + n
        if (done >> chunk_bits) % 32 == 0 or done >= total:
            print("  %5.1f%% of the inputs" % (100.0 * done / total), file=sys.stderr, flush=True)
    return [tallies[k] for k in names]


def widen_all(lib):
    lines, bad = [], 0
    for name in ("e4m3", "e5m2", "e8m0", "e2m1"):
        ncodes = 16 if name == "e2m1" else 256
        codes = np.arange(ncodes, dtype=np.uint8)
        ref = codes.view(ML[name]).astype(np.float32).view(np.uint32)
        bulk = np.empty(ncodes, dtype=np.float32)
        lib.convert(bulk, "fp32", codes, name)
        f = getattr(lib.lib, "mp_%s_to_f32" % name)
        scal = np.array([f(int(c)) for c in codes], dtype=np.float32)
        nb, nn, nsame, ex = 0, 0, 0, []
        for ours in (bulk.view(np.uint32), scal.view(np.uint32)):
            rnan = (ref & 0x7fffffff) > 0x7f800000
            onan = (ours & 0x7fffffff) > 0x7f800000
            ok = (ours == ref) | (rnan & onan & ((ours >> 31) == (ref >> 31)))
            nb += int(np.count_nonzero(~ok))
            nn, nsame = int(np.count_nonzero(rnan)), int(np.count_nonzero(rnan & (ours == ref)))
            ex += ["          e.g. %s 0x%02x: mixprec 0x%08x, ml_dtypes 0x%08x" % (name, c, ours[c], ref[c])
                   for c in np.flatnonzero(~ok)[:3]]
        bad += nb
        lines.append("%-9s %11d codes   %s (mp_convert and the scalar function; %d NaN codes by NaN-ness and sign, "
                     "%d of them bit-identical)" % (name + "->f32", ncodes, "OK" if not nb else "%d MISMATCHES" % nb,
                                                    nn, nsame))
        lines += ex
    # E2M1 bytes that are no codes: what each side reads (informational)
    b = np.arange(16, 256, dtype=np.uint8)
    ref = b.view(ML["e2m1"]).astype(np.float32)
    ours = np.empty(b.size, dtype=np.float32)
    lib.convert(ours, "fp32", b, "e2m1")
    differ = int(np.count_nonzero(ours.view(np.uint32) != ref.view(np.uint32)))
    lines.append("e2m1 bytes 0x10..0xff (not codes): mixprec reads the low 4 bits; ml_dtypes differs on %d "
                 "of 240 (not a mismatch)" % differ)
    return lines, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="path of libmixprec.so")
    ap.add_argument("--chunk-bits", type=int, default=24, help="log2 of the inputs per chunk (default 24)")
    ap.add_argument("--limit", type=lambda s: int(s, 0), default=1 << 32,
                    help="only the first LIMIT bit patterns (a multiple of the chunk; default all 2^32)")
    ap.add_argument("--threads", type=int, default=0, help="mp_set_threads (0: the library's default)")
    a = ap.parse_args()
    if not 10 <= a.chunk_bits <= 28 or a.limit % (1 << a.chunk_bits) or not 0 < a.limit <= 1 << 32:
        ap.error("--chunk-bits 10..28 and --limit a positive multiple of the chunk, at most 2^32")
    t0 = time.time()
    lib = Lib(a.lib)
    lib.lib.mp_set_threads(a.threads)
    print("crosscheck_formats: %s against ml_dtypes %s (numpy %s)" % (a.lib, ml_dtypes.__version__, np.__version__))
    with tempfile.TemporaryDirectory() as tmp:
        why = lib.build_helper(tmp)
        sat_mode = "all" if why is None else "sample"
        if why:
            print("  e4m3_sat: %s; the scalar function is called through ctypes on a sample only" % why)
        wl, wbad = widen_all(lib)
        tallies = narrow_all(lib, a.chunk_bits, a.limit, sat_mode)
    print("fp32 -> format, %s fp32 bit patterns:" % ("all 2^32" if a.limit == 1 << 32 else "%d" % a.limit))
    for t in tallies:
        print("  " + t.line())
    print("format -> fp32, every code:")
    for line in wl:
        print("  " + line)
    bad = wbad + sum(t.bad for t in tallies)
    print("%s in %.0f s" % ("no mismatch" if not bad else "%d MISMATCHES" % bad, time.time() - t0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

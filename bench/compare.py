#!/usr/bin/env python3
"""make bench: mixprec's kernels next to numpy and PyTorch, in one run.

Runs `mixprec bench convert --json`, then times the same conversions in numpy
(Debian's python3-numpy) and PyTorch (Debian's python3-torch) on arrays of the
same size and data (numpy also on N(0, 1) data, where it is faster), and
prints medians and ratios. Peers are timed both the
usual way (astype / .half(), which allocate) and into a preallocated array
(np.copyto / Tensor.copy_); the faster of the two is the one compared.
Writes bench/out/convert.json with every figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

try:
    import torch
except ImportError:  # the table says so; make bench installs it
    torch = None


def median_time(fn, reps):
    fn()  # warm-up (page faults, first-touch)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def gradient_like(n):
    """The same kind of data the C side uses: a spread of magnitudes."""
    rng = np.random.default_rng(1)
    return (rng.standard_normal(n, dtype=np.float32) * np.float32(2.0) ** rng.integers(-30, -2, n)).astype(np.float32)


def bf16_numpy(x, out):
    """numpy has no bfloat16: round-to-nearest-even on the bits, as numpy users write it."""
    u = x.view(np.uint32)
    nan = np.isnan(x)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    out[...] = r


def numpy_convert(x, reps):
    h = x.astype(np.float16)
    out16 = np.empty(x.size, np.float16)
    out32 = np.empty(x.size, np.float32)
    outu16 = np.empty(x.size, np.uint16)
    return {
        "f32->f16": min(median_time(lambda: x.astype(np.float16), reps),
                        median_time(lambda: np.copyto(out16, x, casting="unsafe"), reps)),
        "f16->f32": min(median_time(lambda: h.astype(np.float32), reps),
                        median_time(lambda: np.copyto(out32, h), reps)),
        "f32->bf16": median_time(lambda: bf16_numpy(x, outu16), reps),
        "copy": median_time(lambda: np.copyto(out32, x), reps),
    }


def peers_convert(n, reps, threads):
    x = gradient_like(n)
    res = {}
    # numpy's float16 conversion is much slower on tiny (subnormal-bound) values
    # than on N(0, 1) data: it is timed on both and the faster is compared.
    with np.errstate(all="ignore"):
        grad = numpy_convert(x, reps)
        normal = numpy_convert(np.random.default_rng(2).standard_normal(n, dtype=np.float32), reps)
    res["numpy"] = {op: min(grad[op], normal[op]) for op in grad}
    res["numpy_gradient_data"] = grad
    if torch is not None:
        torch.set_num_threads(threads)
        tx = torch.from_numpy(x)
        th = tx.half()
        tb = tx.bfloat16()
        o16 = torch.empty(n, dtype=torch.float16)
        ob16 = torch.empty(n, dtype=torch.bfloat16)
        o32 = torch.empty(n, dtype=torch.float32)
        res["torch"] = {
            "f32->f16": min(median_time(lambda: tx.half(), reps), median_time(lambda: o16.copy_(tx), reps)),
            "f16->f32": min(median_time(lambda: th.float(), reps), median_time(lambda: o32.copy_(th), reps)),
            "f32->bf16": min(median_time(lambda: tx.bfloat16(), reps), median_time(lambda: ob16.copy_(tx), reps)),
            "bf16->f32": min(median_time(lambda: tb.float(), reps), median_time(lambda: o32.copy_(tb), reps)),
        }
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixprec", default="build/mixprec")
    ap.add_argument("--n", type=int, default=1 << 24, help="elements (default: 64 MiB of fp32)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    a = ap.parse_args()

    env = dict(os.environ, MIXPREC_THREADS=str(a.threads))
    mp = json.loads(subprocess.run([a.mixprec, "bench", "convert", "--json", "--n", str(a.n), "--reps", str(a.reps)],
                                   check=True, capture_output=True, text=True, env=env).stdout)
    mpt = {r["op"]: r for r in mp["results"]}
    peers = peers_convert(a.n, a.reps, a.threads)

    print(f"bench convert: n = {a.n} ({a.n * 4 >> 20} MiB of fp32), {a.threads} threads, mixprec path {mp['isa']}, "
          f"median of {a.reps}; numpy {np.__version__}, torch {torch.__version__ if torch else 'missing'}")
    print("speed-up = peer time / mixprec time (higher is better); vs copy = mixprec time / time of a copy of as many bytes")
    print(f"{'op':<12} {'mixprec ms':>10} {'vs copy':>8} {'numpy ms':>9} {'x numpy':>8} {'torch ms':>9} {'x torch':>8}")
    rows = []
    for op in ["f32->f16", "f16->f32", "f32->bf16", "bf16->f32"]:
        m = mpt[op]["median_s"]
        npt = peers["numpy"].get(op)
        tt = peers.get("torch", {}).get(op)
        row = {"op": op, "mixprec_s": m, "vs_copy": mpt[op]["vs_copy"], "numpy_s": npt, "torch_s": tt,
               "x_numpy": npt / m if npt else None, "x_torch": tt / m if tt else None}
        rows.append(row)
        f = lambda v, s: f"{v * s:.3f}" if v else "n/a"
        print(f"{op:<12} {m * 1e3:>10.3f} {mpt[op]['vs_copy']:>8.2f} {f(npt, 1e3):>9} "
              f"{f(row['x_numpy'], 1):>8} {f(tt, 1e3):>9} {f(row['x_torch'], 1):>8}")
    print(f"{'copy':<12} {mpt['copy']['median_s'] * 1e3:>10.3f} {'1.00':>8} {peers['numpy']['copy'] * 1e3:>9.3f}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "convert.json"), "w") as fh:
        json.dump({"mixprec": mp, "peers": peers, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

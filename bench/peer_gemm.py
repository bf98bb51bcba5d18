#!/usr/bin/env python3
"""Times matrix multiplies in one peer library and prints JSON; run by
compare.py in its own process so that the peer's environment (threads,
OpenBLAS core type) is set for it alone.
Each case runs REPS times after a warm-up call, fewer when the warm-up call
took long (at least once, about 3 s in all): PyTorch's bf16 matmul on a CPU
without AVX-512 takes seconds a call.
Usage: peer_gemm.py numpy|torch SHAPES_JSON REPS THREADS"""
import json
import sys
import time

import numpy as np

from benchlib import median_time


def timed(fn, reps):
    """median_time with fewer repetitions for a slow call."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    return median_time(fn, max(1, min(reps, int(3.0 / max(first, 1e-9))))) if first > 0.2 else median_time(fn, reps)


def main():
    lib, shapes, reps, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = np.random.default_rng(0)
    out = []
    if lib == "torch":
        import torch
        torch.set_num_threads(threads)
    for s in shapes:
        m, n, k, ta, tb = s["m"], s["n"], s["k"], s["trans_a"], s["trans_b"]
        a = rng.random((k, m) if ta else (m, k), dtype=np.float32) - 0.5
        b = rng.random((n, k) if tb else (k, n), dtype=np.float32) - 0.5
        flops = 2.0 * m * n * k
        r = reps
        while 2 * r <= 20 * reps and r * flops < 2e10:
            r *= 2
        row = {"shape": s["shape"]}
        if lib == "numpy" and s.get("gpt"):
            pass  # the GPT's bf16 shapes: numpy has no bf16 matmul
        elif lib == "numpy":
            A, B = (a.T if ta else a), (b.T if tb else b)
            row["fp32"] = timed(lambda: A @ B, r)
        else:
            types = [("bf16", torch.bfloat16)] if s.get("gpt") else [("fp32", torch.float32), ("bf16", torch.bfloat16)]
            for name, dt in types:
                ta_ = torch.from_numpy(a).to(dt)
                tb_ = torch.from_numpy(b).to(dt)
                A, B = (ta_.t() if ta else ta_), (tb_.t() if tb else tb_)
                row[name] = timed(lambda: torch.matmul(A, B), r)
        out.append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

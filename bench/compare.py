#!/usr/bin/env python3
"""make bench: mixprec's kernels next to numpy and PyTorch, in one run.

Conversions: runs `mixprec bench convert --json`, then times the same in numpy
(Debian's python3-numpy) and PyTorch (Debian's python3-torch) on arrays of the
same size and data (numpy also on N(0, 1) data, where it is faster), and
prints medians and ratios. Peers are timed both the
usual way (astype / .half(), which allocate) and into a preallocated array
(np.copyto / Tensor.copy_); the faster of the two is the one compared.
Unscale: runs `mixprec bench unscale --json` and times numpy doing the same
(g *= inv; np.isfinite(g).all()) on buffers of the same size.
GEMM: runs `mixprec bench gemm --json` (which measures the machine's peak too)
and times numpy's matmul (OpenBLAS, with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE
unset for that process only, so it picks its best kernel) and PyTorch's
(fp32 and bf16) on the same shapes, each in its own process.
Writes bench/out/{convert,unscale,gemm}.json with every figure.
"""
import argparse
import math
import json
import os
import statistics
import subprocess
import sys

import numpy as np

from benchlib import median_time

try:
    import torch
except ImportError:  # the table says so; make bench installs it
    torch = None



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


def run_mixprec(exe, what, n, reps, threads):
    env = dict(os.environ, MIXPREC_THREADS=str(threads))
    args = [exe, "bench", what, "--json", "--reps", str(reps)] + (["--n", str(n)] if n else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def fmt(v, s=1.0):
    return f"{v * s:.3f}" if v else "n/a"


def section_convert(a):
    mp = run_mixprec(a.mixprec, "convert", a.n, a.reps, a.threads)
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
        print(f"{op:<12} {m * 1e3:>10.3f} {mpt[op]['vs_copy']:>8.2f} {fmt(npt, 1e3):>9} "
              f"{fmt(row['x_numpy']):>8} {fmt(tt, 1e3):>9} {fmt(row['x_torch']):>8}")
    print(f"{'copy':<12} {mpt['copy']['median_s'] * 1e3:>10.3f} {'1.00':>8} {peers['numpy']['copy'] * 1e3:>9.3f}")
    return {"mixprec": mp, "peers": peers, "rows": rows}


def peers_unscale(nbytes, reps):
    """numpy doing the same job: g *= inv; np.isfinite(g).all(), in place."""
    rng = np.random.default_rng(3)
    res = {}
    for name, dt in [("fp32", np.float32), ("fp16", np.float16)]:
        g = (rng.standard_normal(nbytes // np.dtype(dt).itemsize, dtype=np.float32) * 8).astype(dt)
        # 1/S then S, so values stay put (S = 2^8 for fp16: numpy computes in
        # fp16 here and 2^16 itself would overflow it)
        flip = [dt(2.0 ** -16), dt(2.0 ** 16)] if dt == np.float32 else [dt(2.0 ** -8), dt(2.0 ** 8)]
        state = {"k": 0}

        def step():
            g.__imul__(flip[state["k"] % 2])
            state["k"] += 1
            return bool(np.isfinite(g).all())

        res[name] = median_time(step, reps)
    return res


def section_unscale(a):
    mp = run_mixprec(a.mixprec, "unscale", a.n, a.reps, a.threads)
    mpt = {r["op"]: r for r in mp["results"]}
    peers = peers_unscale(a.n * 4, a.reps)
    print(f"\nbench unscale: {a.n * 4 >> 20} MiB gradient buffers, in place, fused multiply by 1/S + inf/NaN check; "
          f"mixprec {a.threads} threads; numpy: g *= inv; np.isfinite(g).all()")
    print("vs copy = mixprec time / time of a copy of the buffer (one pass of memory traffic)")
    print(f"{'buffer':<8} {'mixprec ms':>10} {'vs copy':>8} {'numpy ms':>9} {'x numpy':>8}")
    rows = []
    for name in ["fp32", "fp16"]:
        m = mpt[f"unscale {name}"]
        row = {"buffer": name, "mixprec_s": m["median_s"], "vs_copy": m["vs_copy"], "numpy_s": peers[name],
               "x_numpy": peers[name] / m["median_s"]}
        rows.append(row)
        print(f"{name:<8} {m['median_s'] * 1e3:>10.3f} {m['vs_copy']:>8.2f} {peers[name] * 1e3:>9.3f} {row['x_numpy']:>8.2f}")
    bf = mpt["unscale bf16"]
    print(f"{'bf16':<8} {bf['median_s'] * 1e3:>10.3f} {bf['vs_copy']:>8.2f} {'n/a':>9} {'n/a':>8}")
    return {"mixprec": mp, "peers": peers, "rows": rows}


def section_gemm(a):
    """mp_gemm next to numpy's matmul (OpenBLAS, best kernel for this CPU) and
    PyTorch's (oneDNN), each in its own process, same shapes, same threads.
    The three run in turn for --rounds rounds and each figure is the median
    over rounds of per-round medians, so a burst of noise hits all alike."""
    here = os.path.dirname(os.path.abspath(__file__))
    # This machine may set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE to keep old
    # OpenBLAS builds safe; they force a slower kernel. Unset for the peer only.
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads), OPENBLAS_VERBOSE="2")
    tenv = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    mps, nps, tts, core = [], [], [], "?"
    for _ in range(a.rounds):
        mp = run_mixprec(a.mixprec, "gemm", 0, 7, a.threads)
        mps.append(mp)
        shapes, seen = [], set()
        for r in mp["results"]:
            if r["shape"] not in seen:
                seen.add(r["shape"])
                shapes.append({k: r.get(k, 0) for k in ("shape", "m", "n", "k", "trans_a", "trans_b", "gpt")})
        np_run = subprocess.run([sys.executable, os.path.join(here, "peer_gemm.py"), "numpy", json.dumps(shapes), "7",
                                 str(a.threads)], check=True, capture_output=True, text=True, env=env)
        core = next((l.split(":", 1)[1].strip() for l in np_run.stderr.splitlines() if l.startswith("Core")), "?")
        nps.append({r["shape"]: r for r in json.loads(np_run.stdout)})
        # the fastest torch installed, shape by shape: Debian's 1.13 and bench/.venv's 2.x
        fastest = {}
        for py in torch_pythons(a):
            t_run = subprocess.run([py, os.path.join(here, "peer_gemm.py"), "torch", json.dumps(shapes), "7",
                                    str(a.threads)], capture_output=True, text=True, env=tenv)
            if t_run.returncode != 0:
                continue
            for r in json.loads(t_run.stdout):
                best = fastest.setdefault(r["shape"], {"shape": r["shape"]})
                for k, v in r.items():
                    if k != "shape" and (k not in best or v < best[k]):
                        best[k] = v
        if fastest:
            tts.append(fastest)
    med = statistics.median
    pk_fma = med(m["peak_fma_gflops"] for m in mps)
    pk_dp = med(m["peak_dpbf16_gflops"] for m in mps)
    pk_tdp = med(m.get("peak_tdpbf16_gflops", 0) for m in mps)
    pk_bf16, pk_bf16_name = ((pk_tdp, "TDPBF16PS") if pk_tdp else (pk_dp, "vdpbf16ps") if pk_dp else
                             (pk_fma, "FMA"))
    print(f"\nbench gemm: {a.threads} threads, C fp32, median of {a.rounds} rounds (mixprec, numpy, torch in turn); "
          f"peak measured: fp32 FMA {pk_fma:.1f} GFLOP/s, bf16 vdpbf16ps {pk_dp:.1f} GFLOP/s, "
          f"TDPBF16PS {pk_tdp:.1f} GFLOP/s; numpy's OpenBLAS core: {core}")
    print(f"x peer = peer time / mixprec time (higher is better); of peak: of the FMA peak (fp32, fp16) or "
          f"the {pk_bf16_name} peak (bf16); gpt rows: C bf16 (fp32 for dW) in mixprec, bf16 in torch")
    print(f"{'shape':<24} {'type':<5} {'mixprec GF/s':>12} {'of peak':>8} {'numpy GF/s':>10} {'x numpy':>8} "
          f"{'torch GF/s':>10} {'x torch':>8}")
    rows = []
    for i, r in enumerate(mps[0]["results"]):
        flops = 2.0 * r["m"] * r["n"] * r["k"]
        t = med(m["results"][i]["median_s"] for m in mps)
        npv = med(n[r["shape"]][r["type"]] for n in nps) if r["type"] == "fp32" and r["type"] in nps[0][r["shape"]] else None
        tv = med(x[r["shape"]][r["type"]] for x in tts) if tts and r["type"] in tts[0][r["shape"]] else None
        peak = pk_bf16 if r["type"] == "bf16" else pk_fma
        row = dict(r, median_s=t, gflops=flops / t * 1e-9, of_peak=flops / t * 1e-9 / peak, numpy_s=npv, torch_s=tv,
                   x_numpy=npv / t if npv else None, x_torch=tv / t if tv else None)
        rows.append(row)
        print(f"{r['shape']:<24} {r['type']:<5} {row['gflops']:>12.1f} {100 * row['of_peak']:>7.0f}% "
              f"{fmt(flops / npv * 1e-9 if npv else None):>10} {fmt(row['x_numpy']):>8} "
              f"{fmt(flops / tv * 1e-9 if tv else None):>10} {fmt(row['x_torch']):>8}")
    gpt = [r for r in rows if r.get("gpt") and r["x_torch"]]
    summary = {}
    if gpt:
        summary["gpt_geomean_x_torch"] = math.exp(sum(math.log(r["x_torch"]) for r in gpt) / len(gpt))
        summary["gpt_min_x_torch"] = min(r["x_torch"] for r in gpt)
        sq = [r for r in gpt if r["m"] == r["n"] == r["k"] == 2048]
        if sq:
            summary["square2048_of_bf16_peak"] = sq[0]["of_peak"]
        print(f"gpt shapes, bf16: geometric mean {summary['gpt_geomean_x_torch']:.2f}x torch.matmul, lowest "
              f"{summary['gpt_min_x_torch']:.2f}x" + (f"; 2048^3 at {100 * summary['square2048_of_bf16_peak']:.0f}% "
                                                       f"of the {pk_bf16_name} peak" if sq else ""))
    return {"rounds": mps, "numpy": nps, "numpy_core": core, "torch": tts, "peak_fma": pk_fma, "peak_dpbf16": pk_dp,
            "peak_tdpbf16": pk_tdp, "rows": rows, "summary": summary}


def section_train(a):
    """A training step of the MLP 784-1024-1024-10 (batch 256, AdamW): mixprec
    (`mixprec train`, real Fashion-MNIST batches, ms per step from its log) and
    PyTorch (fp32, bf16 autocast), each the median over many steps."""
    import csv
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    steps, warmup = 150, 30
    env = dict(os.environ, MIXPREC_THREADS=str(a.threads))
    # mixprec's modes and PyTorch run in turn for --rounds rounds; each figure is
    # the median over rounds of per-run medians (this machine's speed drifts)
    rounds_mine, rounds_torch = {}, {}
    with tempfile.TemporaryDirectory() as td:
        for _ in range(a.rounds):
            for prec in ["fp32", "bf16", "fp16-dynamic", "bf16-pure"]:
                log = os.path.join(td, prec + ".csv")
                subprocess.run([a.mixprec, "train", "--precision", prec, "--steps", str(steps + warmup), "--log", log,
                                "--threads", str(a.threads)], check=True, capture_output=True, text=True, env=env)
                with open(log) as fh:
                    ms = [float(r["ms"]) for r in csv.DictReader(fh)][warmup:]
                rounds_mine.setdefault(prec, []).append(statistics.median(ms) / 1e3)
            # every installed torch (Debian's 1.13, bench/.venv's 2.x); the fastest of each mode is compared
            fastest = {}
            for py in torch_pythons(a):
                t_run = subprocess.run([py, os.path.join(here, "peer_train.py"), "784-1024-1024-10", str(steps),
                                        str(warmup), str(a.threads)], capture_output=True, text=True,
                                       env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
                if t_run.returncode != 0:
                    continue
                res = json.loads(t_run.stdout)
                for k, v in res["steps"].items():
                    if k not in fastest or statistics.median(v) < fastest[k]:
                        fastest[k] = statistics.median(v)
            for k, v in fastest.items():
                rounds_torch.setdefault(k, []).append(v)
    mine = {k: statistics.median(v) for k, v in rounds_mine.items()}
    tt = {k: statistics.median(v) for k, v in rounds_torch.items()}
    peak = run_mixprec(a.mixprec, "gemm", 0, 1, a.threads)  # only for the peaks
    pk_dp = peak["peak_dpbf16_gflops"] or peak["peak_fma_gflops"]  # no AVX512_BF16: the FMA peak
    params = 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10
    flops = 6.0 * 256 * params
    print(f"\nbench train: MLP 784-1024-1024-10, batch 256, AdamW, {a.threads} threads, median of {steps} steps "
          f"after {warmup}, median of {a.rounds} rounds; {flops / 1e9:.2f} GFLOP per step (6 x batch x parameters)")
    print(f"{'':<22} {'ms/step':>8} {'GFLOP/s':>8} {'of bf16 peak':>12}")
    for k, v in mine.items():
        print(f"{'mixprec ' + k:<22} {v * 1e3:>8.2f} {flops / v * 1e-9:>8.1f} {100 * flops / v * 1e-9 / pk_dp:>11.0f}%")
    for k, v in tt.items():
        print(f"{'torch ' + k:<22} {v * 1e3:>8.2f} {flops / v * 1e-9:>8.1f} {100 * flops / v * 1e-9 / pk_dp:>11.0f}%")
    if tt:
        print(f"mixprec bf16 vs torch bf16 autocast: {tt['bf16-autocast'] / mine['bf16']:.2f}x; "
              f"vs the fastest torch step (any mode): {min(tt.values()) / mine['bf16']:.2f}x; "
              f"mixprec bf16 vs mixprec fp32: {mine['fp32'] / mine['bf16']:.2f}x; "
              f"bf16 peak {pk_dp:.1f} GFLOP/s")
    return {"mixprec_s": mine, "torch_s": tt, "rounds_mixprec_s": rounds_mine, "rounds_torch_s": rounds_torch,
            "flops_per_step": flops, "peak_dpbf16": pk_dp}


def torch_pythons(a):
    """The Pythons whose torch is measured: Debian's (1.13) and, when
    scripts/bench_venv.sh has made it, the virtual environment's (PyPI, 2.x)."""
    here = os.path.dirname(os.path.abspath(__file__))
    pys = ["/usr/bin/python3"]
    venv = os.path.join(here, ".venv", "bin", "python")
    if os.path.exists(venv):
        pys.append(venv)
    return pys


def section_gpt(a):
    """A training step of the GPT gpt:6-6-384-256 (nanoGPT's shakespeare-char
    size, byte-level), 16 sequences, AdamW: mixprec (`mixprec train --model`, ms
    per step from its log, real text batches) in fp32, bf16 and the fp8/fp4
    recipes (--gpt-precisions), and every
    PyTorch variant the installed torches offer (bench/peer_gpt.py), in turn for
    --rounds rounds; tokens/s, ratios, and the fraction of the peak counted as
    nanoGPT's estimate_mfu (6 N + 12 L C T FLOPs per token)."""
    import csv
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    spec, B = a.gpt_model, 16
    L, H, C, T = (int(v) for v in spec[4:].split("-"))
    steps, warmup = a.gpt_steps, 2
    env = dict(os.environ, MIXPREC_THREADS=str(a.threads))
    rounds_mine, rounds_torch, versions, nparams, slow = {}, {}, {}, None, {}
    with tempfile.TemporaryDirectory() as td:
        for _ in range(a.rounds):
            for prec in a.gpt_precisions.split(","):
                log = os.path.join(td, prec + ".csv")
                subprocess.run([a.mixprec, "train", "--model", spec, "--batch", str(B), "--precision", prec,
                                "--steps", str(steps + warmup), "--eval-windows", "1", "--log", log,
                                "--threads", str(a.threads)], check=True, capture_output=True, text=True, env=env)
                with open(log) as fh:
                    ms = [float(r["ms"]) for r in csv.DictReader(fh)][warmup:]
                rounds_mine.setdefault(prec, []).append(statistics.median(ms) / 1e3)
            for py in ([] if a.no_peers else torch_pythons(a)):
                # a variant slower than 30 s a step (bf16 without AVX-512) is timed in the first round only
                r = subprocess.run([py, os.path.join(here, "peer_gpt.py"), spec, str(B), str(steps), str(warmup),
                                    str(a.threads), "60", ",".join(slow.get(py, [])) or ","], capture_output=True,
                                   text=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
                if r.returncode != 0:
                    print(f"bench gpt: {py}: peer failed: {r.stderr.strip().splitlines()[-1:]}")
                    continue
                res = json.loads(r.stdout)
                nparams = res["params"]
                for k, v in res["steps"].items():
                    key = f"torch {res['torch']} {k}"
                    versions[key] = res["torch"]
                    rounds_torch.setdefault(key, []).append(statistics.median(v))
                    if statistics.median(v) > 30.0:
                        slow.setdefault(py, []).append(k)
                for k, e in res["errors"].items():
                    print(f"bench gpt: torch {res['torch']} {k}: {e}")
    mine = {k: statistics.median(v) for k, v in rounds_mine.items()}
    tt = {k: statistics.median(v) for k, v in rounds_torch.items()}
    peak = json.loads(subprocess.run([a.mixprec, "bench", "peak", "--json"], check=True, capture_output=True,
                                     text=True, env=env).stdout)
    if nparams is None:  # no peer ran: nanoGPT's get_num_params (tied head once, wpe left out), byte-level
        nparams = 256 * C + L * (12 * C * C + 13 * C) + 2 * C
    pk = peak.get("tdpbf16_gflops") or peak["dpbf16_gflops"] or peak["fma_gflops"]
    pk_name = ("TDPBF16PS" if peak.get("tdpbf16_gflops") else "vdpbf16ps" if peak["dpbf16_gflops"] else
               "fp32 FMA (no AVX512_BF16 here)")
    tokens = B * T
    flops_tok = 6.0 * (nparams or 0) + 12.0 * L * C * T
    print(f"\nbench gpt: {spec}, {B} sequences of {T}, AdamW, {a.threads} threads, median of {steps} steps after "
          f"{warmup}, median of {a.rounds} rounds; {flops_tok / 1e6:.1f} MFLOP per token (nanoGPT's estimate_mfu, "
          f"N = {nparams})")
    print(f"{'':<40} {'ms/step':>9} {'tokens/s':>9} {'of peak':>8}")
    rows = list((f"mixprec {k}", v) for k, v in mine.items()) + list(tt.items())
    for k, v in rows:
        tps = tokens / v
        print(f"{k:<40} {v * 1e3:>9.1f} {tps:>9.0f} {100 * tps * flops_tok / 1e9 / pk if pk else 0:>7.0f}%")
    ratios = {}
    if "bf16" not in mine:
        return {"mixprec_s": mine, "torch_s": tt}
    if tt:
        bf = [v for k, v in tt.items() if "bf16" in k and "compile" not in k]
        comp = [v for k, v in tt.items() if "compile" in k]
        if bf:
            ratios["vs_torch_eager_bf16"] = min(bf) / mine["bf16"]
        if comp:
            ratios["vs_torch_compile_bf16"] = min(comp) / mine["bf16"]
        # the fastest torch step of any kind (fp32 included: faster than its bf16 where the CPU has no bf16 units)
        ratios["vs_torch_fastest"] = min(tt.values()) / mine["bf16"]
    if "fp32" in mine:
        ratios["bf16_vs_fp32"] = mine["fp32"] / mine["bf16"]
    for k, v in mine.items():  # the fp8/fp4 recipes: their step against the bf16 step (issue 15: at most 1.3x)
        if k not in ("fp32", "bf16"):
            ratios[f"{k}_step_vs_bf16"] = v / mine["bf16"]
    print("ratios (fastest peer of each kind / mixprec bf16): " +
          ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()) + f"; peak: {pk_name} {pk:.1f} GFLOP/s")
    return {"mixprec_s": mine, "torch_s": tt, "rounds_mixprec_s": rounds_mine, "rounds_torch_s": rounds_torch,
            "flops_per_token": flops_tok, "peak_gflops": pk, "peak": pk_name, "ratios": ratios}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixprec", default="build/mixprec")
    ap.add_argument("--n", type=int, default=1 << 24, help="elements of fp32 (default: 64 MiB)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=["convert", "unscale", "gemm", "train", "gpt"])
    ap.add_argument("--gpt-model", default="gpt:6-6-384-256")
    ap.add_argument("--gpt-steps", type=int, default=8)
    ap.add_argument("--no-peers", action="store_true", help="gpt: mixprec's modes only (no PyTorch runs)")
    ap.add_argument("--gpt-precisions", default="fp32,bf16,fp8-delayed,fp8-current,mxfp8,nvfp4",
                    help="gpt: the mixprec modes to time (bf16 is needed: the ratios are against it)")
    ap.add_argument("--rounds", type=int, default=3, help="gemm, train: rounds of mixprec and the peers in turn")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, fn in [("convert", section_convert), ("unscale", section_unscale), ("gemm", section_gemm),
                     ("train", section_train), ("gpt", section_gpt)]:
        if a.only in (None, name):
            res = fn(a)
            with open(os.path.join(a.out, f"{name}.json"), "w") as fh:
                json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

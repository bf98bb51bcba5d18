"""Data-parallel speed and its cost model (docs/DISTRIBUTED.md).

Measured here, in interleaved rounds (medians of the rounds' medians):
  - the GPT benchmark step (gpt:6-6-384-256, 16 sequences) and the MLP step
    (mlp:784-1024-1024-10, batch 256): 1 process x 2 threads against 2 ranks x
    1 thread with each --allreduce format, the time in MPI per step (the
    summary's allreduce.mpi_ms_per_step) and the bytes per step;
  - one process x 1 thread on half the batch: the compute of one of 2 ranks;
  - `mpirun -np 2 mixprec bench allreduce`: the trainer's all-reduce alone on
    256 .. 16M values, which gives the model's constants on this machine;
  - the optimizer state sharded (--shard-optimizer): the MLP in fp32 with AdamW,
    200 steps, 1 process x 1 thread against 2 ranks x 1 thread without and
    with sharding, each round's ratio to its own one-process run (the median
    and range over rounds), and the optimizer state rank 0 holds (`--only
    shard` runs this part alone).

Modelled: a ring all-reduce of M bytes (V values) over N ranks takes
    T_ar(N) = 2 (N-1) alpha + 2 (N-1)/N M / beta + (N-1)/N V gamma
(alpha: latency per message, beta: bandwidth, gamma: one combine per value),
plus the packing of the gradients into the wire format and back (P per value,
outside MPI). A step of N ranks, each a machine like this one training B/N of
the global batch B, takes C/N + P V + T_ar(N), C being one process's step on
this machine's 2 cores. Communication dominates from the N where
P V + T_ar(N) >= C/N. The constants alpha, beta of the 2-rank shared-memory
measurement check the model against the measured 2-rank step; for a network,
beta is the parameter (--gbits) and alpha --alpha-us.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile

GPT = ("gpt", "gpt:6-6-384-256", 16, 8, ["--eval-windows", "8"])
MLP = ("mlp", "mlp:784-1024-1024-10", 256, 30, [])


def mpirun(np):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["mpirun", *root, "--oversubscribe", "--bind-to", "none", "-np", str(np)]


def train(exe, d, model, ranks, threads, batch, prec, wire):
    kind, spec, _, steps, extra = model
    out = os.path.join(d, "s.json")
    cmd = [exe, "train", "--model", spec, "--batch", str(batch), "--precision", prec, "--steps", str(steps),
           "--threads", str(threads), "--summary", out, *extra]
    if ranks > 1:
        cmd = mpirun(ranks) + cmd + ["--allreduce", wire]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    s = json.load(open(out))
    a = s.get("allreduce", {})
    return {"ms": s["ms_per_step"], "mpi_ms": a.get("mpi_ms_per_step", 0.0), "bytes": a.get("buffer_bytes", 0),
            "values": a.get("values", 0)}


SHARD = ["train", "--model", "mlp:784-1024-1024-10", "--batch", "256", "--precision", "fp32", "--optimizer", "adamw",
         "--steps", "200", "--threads", "1"]


def bench_shard(exe, rounds):
    """1 process x 1 thread, 2 ranks x 1 thread, 2 ranks sharded: interleaved rounds, the medians of the runs'
    median step times; rank 0's optimizer state in bytes per parameter."""
    runs = {"one": [], "two": [], "shard": []}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        for rnd in range(rounds):
            for name, cmd in (("one", [exe, *SHARD]), ("two", mpirun(2) + [exe, *SHARD]),
                              ("shard", mpirun(2) + [exe, *SHARD, "--shard-optimizer"])):
                subprocess.run(cmd + ["--summary", out], check=True, stdout=subprocess.DEVNULL)
                s = json.load(open(out))
                runs[name].append({"ms": s["ms_per_step"], "state": s["bytes_per_param_parts"]["optimizer_state"],
                                   "mpi_ms": s.get("allreduce", {}).get("mpi_ms_per_step", 0.0)})
                print("round %d %-6s %8.2f ms/step" % (rnd + 1, name, s["ms_per_step"]), flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in runs.items()}
    for k in runs:  # each round's ratio to that round's one process: the rounds' drift cancels
        r = [x["ms"] / o["ms"] for x, o in zip(runs[k], runs["one"])]
        med[k]["ratio"], med[k]["ratio_lo"], med[k]["ratio_hi"] = statistics.median(r), min(r), max(r)
    print("\n## The optimizer state sharded: %s, 1 thread a process (medians of %d rounds)\n" %
          (" ".join(SHARD[1:9]), rounds))
    print("| run | ms/step | vs one process (rounds' range) | in MPI | optimizer state on rank 0 |")
    print("|---|---|---|---|---|")
    for name, label in (("one", "1 process x 1 thread"), ("two", "2 ranks x 1 thread"),
                        ("shard", "2 ranks x 1 thread, `--shard-optimizer`")):
        m = med[name]
        print("| %s | %.2f | %.2f (%.2f-%.2f) | %.2f ms | %.2f B/param |" % (
            label, m["ms"], m["ratio"], m["ratio_lo"], m["ratio_hi"], m["mpi_ms"], m["state"]))
    return med


def configs(model):
    kind, spec, batch, _, _ = model
    yield "one-bf16", 1, 2, batch, "bf16", "fp32"
    yield "half-bf16", 1, 1, batch // 2, "bf16", "fp32"
    for w in ("fp32", "bf16", "fp16"):
        yield "two-bf16-" + w, 2, 1, batch, "bf16", w
    yield "one-fp32", 1, 2, batch, "fp32", "fp32"
    yield "two-fp32-fp32", 2, 1, batch, "fp32", "fp32"


def bench_allreduce(exe, reps):
    """The all-reduce's constants on 2 ranks of this machine, per wire format and size: alpha from the
    smallest message, taken as a ring's 2 (N-1) = 2 messages (OpenMPI may send one exchange there, which
    makes this alpha half a latency at most: it matters only for the smallest buffers), gamma (one combine
    per value, timed on one rank: mixprec's combine, and for fp32 a plain add loop), the packing per value
    (outside MPI), and beta from the rest of the time in MPI: the ranks share memory here, whose speed
    depends on whether the buffers fit in the caches, so beta is kept per size. With 2 ranks only, these
    fit the 2-rank step by construction: the check below tests that compute, packing and all-reduce add up
    to the step, not the (N-1)/N scaling of the ring."""
    out = subprocess.run(mpirun(2) + [exe, "bench", "allreduce", "--json", "--reps", str(reps)], check=True,
                         capture_output=True, text=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    consts = {}
    for w in ("fp32", "bf16", "fp16"):
        r = sorted((x for x in rows if x["wire"] == w), key=lambda x: x["values"])
        alpha = r[0]["mpi_us"] / 2 * 1e-6
        for x in r:
            x["gamma"] = x["combine_us"] / x["values"] * 1e-6
            x["pack"] = (x["us"] - x["mpi_us"]) / x["values"] * 1e-6
            x["beta"] = x["bytes"] / max(x["mpi_us"] * 1e-6 - 2 * alpha - x["values"] * x["gamma"] / 2, 1e-9)
        consts[w] = {"alpha": alpha, "bytes_per_value": r[-1]["bytes"] / r[-1]["values"], "rows": r}
    return consts


def at(c, values, key):
    """A per-size constant at `values`, interpolated linearly in log2(values) between the sizes measured."""
    r = c["rows"]
    if values <= r[0]["values"]:
        return r[0][key]
    for lo, hi in zip(r, r[1:]):
        if values <= hi["values"]:
            f = math.log2(values / lo["values"]) / math.log2(hi["values"] / lo["values"])
            return lo[key] + f * (hi[key] - lo[key])
    return r[-1][key]


def t_allreduce(n, values, c, alpha, beta):
    m = values * c["bytes_per_value"]
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / beta + (n - 1) / n * values * at(c, values, "gamma")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixprec", default="build/mixprec")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15, help="bench allreduce repetitions")
    ap.add_argument("--gbits", default="10,25,100", help="network bandwidths for the model, Gbit/s")
    ap.add_argument("--alpha-us", type=float, default=10.0, help="network latency per message for the model")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--only", choices=("shard",), help="run only this part")
    ap.add_argument("--shard-rounds", type=int, default=5)
    a = ap.parse_args()
    if a.only == "shard":
        bench_shard(a.mixprec, a.shard_rounds)
        return
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for rnd in range(a.rounds):
            for model in (GPT, MLP):
                for name, ranks, threads, batch, prec, wire in configs(model):
                    r = train(a.mixprec, d, model, ranks, threads, batch, prec, wire)
                    res.setdefault((model[0], name), []).append(r)
                    print("round %d %s %-14s %8.2f ms/step, %6.2f ms in MPI" % (rnd + 1, model[0], name, r["ms"],
                                                                             r["mpi_ms"]), flush=True)
    consts = bench_allreduce(a.mixprec, a.reps)
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in res.items()}

    print("\n## Measured: 2 ranks x 1 thread against 1 process x 2 threads (medians of %d rounds)\n" % a.rounds)
    print("| model | precision | all-reduce | bytes/step | 1 process | 2 ranks | MPI/step | throughput ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("gpt", "mlp"):
        for prec, wires in (("bf16", ("fp32", "bf16", "fp16")), ("fp32", ("fp32",))):
            one = med[(kind, "one-" + prec)]["ms"]
            for w in wires:
                t = med[(kind, "two-%s-%s" % (prec, w))]
                print("| %s | %s | %s | %.1f MB | %.1f ms | %.1f ms | %.2f ms | %.2fx |" % (
                    kind, prec, w, t["bytes"] / 1e6, one, t["ms"], t["mpi_ms"], one / t["ms"]))

    print("\n## The all-reduce alone, 2 ranks on this machine (mixprec bench allreduce)\n")
    print("| all-reduce | alpha | values | beta (shared memory) | gamma (combine) | packing |")
    print("|---|---|---|---|---|---|")
    for w, c in consts.items():
        for x in c["rows"]:
            if x["values"] in (1 << 16, 1 << 20, 1 << 22, 1 << 23, 1 << 24):
                print("| %s | %.2f us | %d | %.2f GB/s | %.3f ns/value | %.3f ns/value |" % (
                    w, c["alpha"] * 1e6, x["values"], x["beta"] / 1e9, x["gamma"] * 1e9, x["pack"] * 1e9))

    print("\n## The model against the 2-rank measurement (bf16 training)\n")
    print("| model | all-reduce | compute (1 thread, B/2) | modelled all-reduce | measured in MPI | modelled step | measured step |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("gpt", "mlp"):
        half = med[(kind, "half-bf16")]["ms"] * 1e-3
        for w in ("fp32", "bf16", "fp16"):
            t = med[(kind, "two-bf16-" + w)]
            c = consts[w]
            ar = t_allreduce(2, t["values"], c, c["alpha"], at(c, t["values"], "beta"))
            step = half + t["values"] * at(c, t["values"], "pack") + ar
            print("| %s | %s | %.1f ms | %.2f ms | %.2f ms | %.1f ms | %.1f ms |" % (
                kind, w, half * 1e3, ar * 1e3, t["mpi_ms"], step * 1e3, t["ms"]))

    alpha = a.alpha_us * 1e-6
    print("\n## N ranks on a network (alpha %g us; each rank a machine like this one, 2 threads; bf16 training;"
          " global batch fixed)\n" % a.alpha_us)
    print("| model | all-reduce | network | C (one process) | step at N = 2, 4, 8, 16 (speedup) | communication dominates from |")
    print("|---|---|---|---|---|---|")
    out_model = []
    for kind, bmax in (("gpt", GPT[2]), ("mlp", MLP[2])):
        C = med[(kind, "one-bf16")]["ms"] * 1e-3
        V = med[(kind, "two-bf16-fp32")]["values"]
        for w in ("fp32", "bf16"):
            c = consts[w]
            for g in (float(x) for x in a.gbits.split(",")):
                beta = g * 1e9 / 8
                comm = lambda n: V * at(c, V, "pack") + t_allreduce(n, V, c, alpha, beta)
                steps = ["%.0f ms (%.1fx)" % ((C / n + comm(n)) * 1e3, C / (C / n + comm(n))) for n in (2, 4, 8, 16)]
                nstar = next((n for n in range(2, 4097) if comm(n) >= C / n), None)
                runnable = next((n for n in range(nstar or 4097, bmax + 1) if bmax % n == 0), None)
                where = "N = %d" % nstar if nstar else "beyond 4096"
                where += ("; of the N that divide the batch of %d: %d" % (bmax, runnable) if runnable and runnable != nstar
                          else "" if runnable else "; the batch of %d allows at most %d" % (bmax, bmax))
                print("| %s | %s | %g Gb/s | %.1f ms | %s | %s |" % (kind, w, g, C * 1e3, ", ".join(steps), where))
                out_model.append({"model": kind, "wire": w, "gbits": g, "C": C, "nstar": nstar})
    shard = bench_shard(a.mixprec, a.shard_rounds)
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        json.dump({"measured": {"%s/%s" % k: v for k, v in med.items()},
                   "constants": {w: {k: v for k, v in c.items() if k != "rows"} for w, c in consts.items()},
                   "bench_allreduce": {w: c["rows"] for w, c in consts.items()}, "model": out_model,
                   "shard": shard},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What mixprec.torch.Monitor costs a PyTorch training loop: nanoGPT's GPT
(bench/gpt_torch.py, AdamW) or an MLP (SGD) trained without the monitor and
with Monitor(formats=("fp16", "bf16"), every=N) for each N of --every (and,
with --shadow, Monitor(every=10, shadow=True)), eager or torch.compile'd,
in one process, with a second loop without it as the measure's noise. The
loops take turns block by block (a block is 10 steps; the loops in a new random order in each block),
every step timed. Per loop: the median step and the median of its
unrecorded steps against the plain loop's median step, the mean step against
the plain loop's mean, and the median of its recorded steps. Prints one JSON object.

Usage: monitor_overhead.py SPEC BATCH BLOCKS THREADS DTYPE [--every 1,10,100] [--shadow] [--compile]
  SPEC gpt:L-H-C-T or mlp:IN-H1-...-OUT, e.g. gpt:6-6-384-256 16 5 2 bf16
  DTYPE fp32: no autocast; bf16: autocast; fp16: autocast and torch.amp.GradScaler (torch >= 2.3)
  --compile: torch.compile each model (default inductor backend); the monitor gets the compiled module
Needs the mixprec package importable (PYTHONPATH=python MIXPREC_LIB=build/libmixprec.so)."""
import argparse
import json
import random
import statistics
import time

import torch

import gpt_torch
from mixprec.torch import Monitor

BLOCK = 10


def mlp(spec):
    sizes = [int(v) for v in spec[4:].split("-")]
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(sizes) - 2 else [])
    return torch.nn.Sequential(*layers), sizes


def main():
    ap = argparse.ArgumentParser()
    for a in ("spec", "batch", "blocks", "threads", "dtype"):
        ap.add_argument(a)
    ap.add_argument("--every", default="10")
    ap.add_argument("--shadow", action="store_true")
    ap.add_argument("--compile", action="store_true")
    o = ap.parse_args()
    B, blocks, threads = int(o.batch), int(o.blocks), int(o.threads)
    torch.set_num_threads(threads)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[o.dtype]
    # "plain, again": a second loop without the monitor, whose figures are the noise of the measure
    loops = [("plain", None, False), ("plain, again", None, False)] + [("every=%s" % n, int(n), False)
                                                                      for n in o.every.split(",")]
    if o.shadow:
        loops.append(("every=10+shadow", 10, True))
    if o.spec.startswith("gpt:"):
        cfg = gpt_torch.parse_spec(o.spec)
        x = torch.randint(0, 256, (B, cfg.block_size))
        y = torch.randint(0, 256, (B, cfg.block_size))
    else:
        sizes = mlp(o.spec)[1]
        x, y = torch.randn(B, sizes[0]), torch.randint(0, sizes[-1], (B,))
    runs = {}
    for name, every, shadow in loops:
        torch.manual_seed(1)
        if o.spec.startswith("gpt:"):
            model = gpt_torch.GPT(cfg)
            opt = gpt_torch.configure_adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
            loss_of = (lambda m: m(x, y)[1])
        else:
            model = mlp(o.spec)[0]
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            loss_of = (lambda m: torch.nn.functional.cross_entropy(m(x).float(), y))
        run = torch.compile(model) if o.compile else model
        scaler = torch.amp.GradScaler("cpu") if o.dtype == "fp16" else None
        mon = None if every is None else Monitor(run, formats=("fp16", "bf16"), every=every, shadow=shadow)
        runs[name] = {"run": run, "opt": opt, "scaler": scaler, "mon": mon, "loss_of": loss_of, "steps": []}

    def step(r):
        run, opt, scaler, mon = r["run"], r["opt"], r["scaler"], r["mon"]
        recorded = mon is not None and mon.step % mon.every == 0
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = r["loss_of"](run)
        if scaler:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if mon:
            mon.after_backward(scaler if scaler else 1.0, loss=loss)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if mon:
            mon.after_step(scaler if scaler else 1.0)
        return time.perf_counter() - t0, recorded

    t_warm = time.perf_counter()
    for r in runs.values():  # warm-up (and compilation): two blocks each, a recorded step among them
        for _ in range(2 * BLOCK):
            step(r)
    t_warm = time.perf_counter() - t_warm
    # the loops in a new random order in each block, so that none always follows the same one (a recording
    # loop leaves caches cold for whichever runs next: with a fixed order, one loop would always pay for it)
    rng = random.Random(1)
    for _ in range(blocks):
        for r in rng.sample(list(runs.values()), len(runs)):
            for _ in range(BLOCK):
                r["steps"].append(step(r))
    base = statistics.median(t for t, _ in runs["plain"]["steps"])
    base_mean = statistics.mean(t for t, _ in runs["plain"]["steps"])
    out = {}
    for name, r in runs.items():
        ts = [t for t, _ in r["steps"]]
        un = [t for t, rec in r["steps"] if not rec]
        rec = [t for t, rec in r["steps"] if rec]
        out[name] = {"median_ms": 1000 * statistics.median(ts), "mean_ms": 1000 * statistics.mean(ts),
                     "unrecorded_median_ms": 1000 * statistics.median(un) if un else None,
                     "recorded_median_ms": 1000 * statistics.median(rec) if rec else None,
                     "recorded_steps": len(rec),
                     "unrecorded_vs_plain": statistics.median(un) / base - 1 if un else None,
                     "median_vs_plain": statistics.median(ts) / base - 1,
                     "mean_vs_plain": statistics.mean(ts) / base_mean - 1}
    dynamo = {}
    if o.compile:  # what Dynamo did over the whole run: graphs compiled, graph breaks (none expected)
        from torch._dynamo.utils import counters
        dynamo = {"unique_graphs": counters["stats"]["unique_graphs"],
                  "graph_breaks": sum(counters["graph_break"].values())}
    print(json.dumps({"torch": torch.__version__, "spec": o.spec, "batch": B, "threads": threads, "dtype": o.dtype,
                      "compile": o.compile, "blocks": blocks, "block_steps": BLOCK, "warmup_s": t_warm,
                      "dynamo": dynamo, "loops": out}))


if __name__ == "__main__":
    main()

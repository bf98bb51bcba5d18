#!/usr/bin/env python3
"""What mixprec.torch.Monitor costs a PyTorch training loop: nanoGPT's GPT
(bench/gpt_torch.py) trained with autocast and AdamW, three ways in one run,
interleaved block by block: no monitor, Monitor(every=10), and
Monitor(every=10, shadow=True). A block is 10 steps, so each monitored block
holds one recorded step; the figure is the median block time and its ratio to
the plain loop's. Prints one JSON object.

Usage: monitor_overhead.py SPEC BATCH BLOCKS THREADS DTYPE   e.g. gpt:6-6-384-256 16 5 2 bf16
(DTYPE fp32: no autocast; bf16: autocast; fp16: autocast and torch.amp.GradScaler,
torch >= 2.3). Needs the
mixprec package importable (PYTHONPATH=python MIXPREC_LIB=build/libmixprec.so)."""
import json
import statistics
import sys
import time

import torch

import gpt_torch
from mixprec.torch import Monitor

EVERY = 10


def main():
    spec, B, blocks, threads, dt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.set_num_threads(threads)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    cfg = gpt_torch.parse_spec(spec)
    x = torch.randint(0, 256, (B, cfg.block_size))
    y = torch.randint(0, 256, (B, cfg.block_size))
    runs = {}
    for name in ("plain", "monitor", "monitor+shadow"):
        torch.manual_seed(1)
        model = gpt_torch.GPT(cfg)
        opt = gpt_torch.configure_adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
        scaler = torch.amp.GradScaler("cpu") if dt == "fp16" else None
        mon = None if name == "plain" else Monitor(model, formats=("fp16", "bf16"), every=EVERY,
                                                   shadow=name.endswith("shadow"))
        runs[name] = (model, opt, scaler, mon, [])

    def step(model, opt, scaler, mon):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = model(x, y)[1]
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
        if mon:
            mon.after_step(scaler if scaler else 1.0)

    for name, r in runs.items():  # warm-up: one block each
        for _ in range(EVERY):
            step(*r[:4])
    for _ in range(blocks):
        for name, (model, opt, scaler, mon, times) in runs.items():
            t0 = time.perf_counter()
            for _ in range(EVERY):
                step(model, opt, scaler, mon)
            times.append(time.perf_counter() - t0)
    med = {n: statistics.median(r[4]) for n, r in runs.items()}
    print(json.dumps({"torch": torch.__version__, "spec": spec, "batch": B, "threads": threads, "dtype": dt,
                      "every": EVERY, "blocks": blocks,
                      "ms_per_step": {n: 1000 * m / EVERY for n, m in med.items()},
                      "overhead": {n: med[n] / med["plain"] - 1 for n in med if n != "plain"},
                      "block_seconds": {n: r[4] for n, r in runs.items()}}))


if __name__ == "__main__":
    main()

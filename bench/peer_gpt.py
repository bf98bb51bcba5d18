#!/usr/bin/env python3
"""PyTorch's training step on the GPT that `mixprec train --model gpt:L-H-C-T`
trains (bench/gpt_torch.py: nanoGPT's architecture and AdamW groups), timed per
step, in every variant this torch offers: fp32 eager; bf16 autocast eager with
the plain attention and, on torch >= 2, with fused scaled_dot_product_attention;
and, on torch >= 2, the faster of those under torch.compile. Prints JSON with
the per-step times. Data: random bytes (the step's cost does not depend on them).
A variant whose step is slow (PyTorch's bf16 on a CPU without AVX-512 runs
its matmuls in a plain loop: over a minute a step on a Zen 3) stops warming up
after one step that took over 10 s, and stops timing once its timed steps add
up to BUDGET seconds (default 60), after at least one.
SKIP names variants not to run (compare.py times a variant slower than 30 s
a step in its first round only).
Usage: peer_gpt.py SPEC BATCH STEPS WARMUP THREADS [BUDGET [SKIP,...]]   e.g. gpt:6-6-384-256 16 10 3 2"""
import json
import sys
import time

import torch

import gpt_torch


def variants():
    v = [("fp32", None, False, False), ("bf16-autocast", torch.bfloat16, False, False)]
    if gpt_torch.has_sdpa():
        v.append(("bf16-autocast-sdpa", torch.bfloat16, True, False))
    if hasattr(torch, "compile"):
        v.append(("bf16-autocast-compile", torch.bfloat16, gpt_torch.has_sdpa(), True))
    return v


def main():
    spec, B, steps, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    budget = float(sys.argv[6]) if len(sys.argv) > 6 else 60.0
    skip = set(sys.argv[7].split(",")) if len(sys.argv) > 7 else set()
    torch.set_num_threads(threads)
    cfg = gpt_torch.parse_spec(spec)
    out, errors = {}, {}
    params = gpt_torch.GPT(cfg).num_params()  # also when every variant is skipped
    for name, dtype, sdpa, compiled in variants():
        if name in skip:
            continue
        torch.manual_seed(1)
        model = gpt_torch.GPT(cfg, use_sdpa=sdpa)
        opt = gpt_torch.configure_adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
        x = torch.randint(0, 256, (B, cfg.block_size))
        y = torch.randint(0, 256, (B, cfg.block_size))

        def loss_of(m):
            if dtype is None:
                return m(x, y)[1]
            with torch.autocast("cpu", dtype=dtype):
                return m(x, y)[1]

        step_model = model
        if compiled:
            try:
                step_model = torch.compile(model)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                errors[name] = repr(e)
                continue
        ts = []
        try:
            warm = warmup + (2 if compiled else 0)
            s = 0
            while s < warm + steps:
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss_of(step_model).backward()
                opt.step()
                dt = time.perf_counter() - t0
                if s >= warm:
                    ts.append(dt)
                    if sum(ts) >= budget:
                        break
                elif dt > 10.0 and s >= (1 if compiled else 0):  # slow: one warm step (two compiled) is enough
                    s = warm - 1
                s += 1
        except Exception as e:  # noqa: BLE001
            errors[name] = repr(e)
            continue
        out[name] = ts
    print(json.dumps({"torch": torch.__version__, "threads": threads, "params": params,
                      "steps": out, "errors": errors}))


if __name__ == "__main__":
    main()

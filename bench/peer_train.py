#!/usr/bin/env python3
"""PyTorch's training step on the same MLP as `mixprec train` (Linear/ReLU,
AdamW, batch 256, cross-entropy), in fp32 and with bf16 autocast, timed per
step; prints JSON with the per-step times. Data: random inputs of Fashion-MNIST's
shape (the step's cost does not depend on the values). A mode whose steps are
slow (bf16 on a CPU without AVX-512: seconds a step) warms up for at most 10 s
and stops timing once its timed steps add up to BUDGET seconds (default 30),
after at least 3.
Usage: peer_train.py MODEL_WIDTHS STEPS WARMUP THREADS [BUDGET]   e.g. 784-1024-1024-10 120 20 2"""
import json
import sys
import time

import torch

from benchlib import torch_mlp


def main():
    widths = [int(w) for w in sys.argv[1].split("-")]
    steps, warmup, threads = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    budget = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    out = {}
    for mode in ["fp32", "bf16-autocast"]:
        model = torch_mlp(torch, widths)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.rand(256, widths[0])
        y = torch.randint(0, widths[-1], (256,))
        ts, warm_s, s = [], 0.0, 0
        while s < steps + warmup:
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            if mode == "fp32":
                loss = torch.nn.functional.cross_entropy(model(x), y)
            else:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            if s >= warmup:
                ts.append(dt)
                if sum(ts) >= budget and len(ts) >= 3:
                    break
            else:
                warm_s += dt
                if warm_s > 10.0:
                    s = warmup - 1
            s += 1
        out[mode] = ts
    print(json.dumps({"torch": torch.__version__, "threads": threads, "steps": out}))


if __name__ == "__main__":
    main()

"""A small PyTorch model trained with autocast and loss scaling, watched by
mixprec's monitor: which layers' gradients fp16 would lose, the activation
headroom, the skipped steps, and the HTML report.

    python3 examples/torch_monitor.py [--steps N] [--out DIR]

Trains in fp16 with torch.amp.GradScaler where torch allows it on the CPU
(torch >= 2.3), else in bf16 with a fixed loss scale of 1 (torch 1.13 has no
CPU GradScaler; bf16 has fp32's range and needs none). The task: classify
sums of random sinusoids by their dominant frequency."""
import argparse
import math
import os

import torch

from mixprec.torch import Monitor


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, 64)
    y = torch.randint(0, 8, (n,), generator=g)
    x = torch.sin(2 * math.pi * (y[:, None] + 1) * t) + 0.5 * torch.randn(n, 64, generator=g)
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default="torch-monitor")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                                torch.nn.GELU(), torch.nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fp16 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 3)
    dtype = torch.float16 if fp16 else torch.bfloat16
    # fp16: an initial scale far too large, so the first steps overflow and are skipped, as in real runs
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40) if fp16 else None
    mon = Monitor(model, formats=("fp16", "bf16"), every=10, shadow=True)
    for step in range(a.steps):
        x, y = data(128, step)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            mon.after_backward(scaler, loss=loss)
            scaler.step(opt)
            scaler.update()
            mon.after_step(scaler)
        else:
            loss.backward()
            mon.after_backward(1.0, loss=loss)
            opt.step()
            mon.after_step(1.0)
    print("trained %d steps in %s autocast (torch %s); final loss %.4f" % (a.steps, "fp16" if fp16 else "bf16",
                                                                           torch.__version__, loss.item()))
    skips = mon.skips()
    print("skipped steps: %d%s" % (len(skips), "" if not skips else ", the first at step %d (scale %g): %s" % (
        skips[0]["step"], skips[0]["scale"], ", ".join(skips[0]["params"]) or "-")))
    print("\nlast recorded step, per parameter: gradient values that would underflow to 0 if stored in each "
          "format, and (shadow) values nonzero in fp32 that are 0 in this run:")
    lost = mon.lost()
    for name, c in mon.stats().items():
        print("  %-10s %8d values   fp16 %6.2f%%   bf16 %6.2f%%   lost in this run %6.2f%%" % (
            name, c["fp16"]["total"], 100 * c["fp16"]["underflow"] / c["fp16"]["total"],
            100 * c["bf16"]["underflow"] / c["bf16"]["total"], 100 * lost[name]["lost"] / lost[name]["total"]))
    print("\nactivation headroom (doublings below fp16's largest value):")
    for name, act in mon.activations().items():
        print("  %-8s %s, largest |x| %.4g: %.2f" % (name, act["dtype"], act["amax"], act["headroom"]["fp16"]))
    os.makedirs(a.out, exist_ok=True)
    path = mon.report(os.path.join(a.out, "report.html"))
    print("\nwrote %s" % path)


if __name__ == "__main__":
    main()

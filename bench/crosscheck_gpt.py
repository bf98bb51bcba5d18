#!/usr/bin/env python3
"""Cross-check `mixprec train --model gpt:L-H-C-T` against PyTorch (the same
nanoGPT architecture, bench/gpt_torch.py) on the same bytes, weights, windows
and optimizer: PyTorch initialises the GPT (torch.manual_seed), the weights
are written as safetensors, then
  fp32: `mixprec train --precision fp32 --init W --no-shuffle` and PyTorch in
        fp32 take the same AdamW steps (nanoGPT's two groups) on the same
        windows; the per-step losses must agree within 1e-4 (relative); then
        mixprec's saved weights are loaded into PyTorch, whose validation
        loss must equal mixprec's val_loss within 1e-5 (relative);
  bf16: `--precision bf16` against PyTorch under torch.autocast("cpu",
        dtype=torch.bfloat16) (fp32 master weights): within 2% at every step.
        The reference is the noisier side: Debian's torch 1.13 (generic BLAS)
        multiplies bf16 matrices in the layouts of a Linear's backward (dY W,
        dY^T X) accumulating in bf16 (error ~ sqrt(K) 2^-9: 2.7% at K = 512),
        so its weight gradients lie ~3.5% from fp32's, mixprec's (fp32
        accumulation) ~0.4%; the script prints each side's bf16 curve against
        its own fp32 curve.
On a failure (or with --diagnose) one step of each is compared tensor by
tensor: the fp32 weight gradients (--dump-grads) and the weights after the
step (--save).
Corpus: Debian's fortunes (include/mixprec/text.h MP_TEXT_DEFAULT_CORPUS)
copied into one file, or, without them, 200 kB of generated English-like text.
Usage: bench/crosscheck_gpt.py [--mixprec build/mixprec] [--model gpt:2-4-64-64] [--steps 20] [--batch 8]
       bench/crosscheck_gpt.py --self-test   (PyTorch fp32 against PyTorch fp64; no mixprec)"""
import argparse
import copy
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import gpt_torch as gt

DEFAULT_CORPUS = ("/usr/share/games/fortunes/literature,/usr/share/games/fortunes/science,"
                  "/usr/share/games/fortunes/songs-poems,/usr/share/games/fortunes/wisdom,"
                  "/usr/share/games/fortunes/people,/usr/share/games/fortunes/work")

TOL_FP32, TOL_VAL, TOL_BF16 = 1e-4, 1e-5, 0.02


def make_corpus(td):
    """One corpus file in td: the fortunes texts concatenated, else generated text."""
    files = DEFAULT_CORPUS.split(",")
    path = os.path.join(td, "corpus.txt")
    if all(os.path.isfile(f) for f in files):
        data, what = b"".join(open(f, "rb").read() for f in files), "the fortunes corpus"
    else:
        data, what = gt.deterministic_text(200_000), "generated English-like text (fortunes not installed)"
    with open(path, "wb") as f:
        f.write(data)
    return path, what


def run_mixprec(a, td, tag, precision, steps, init, corpus, dump_grads=False):
    """One `mixprec train`: (losses per step, summary dict, saved tensors, dumped gradients or None)."""
    log, summ, saved, grads = (os.path.join(td, f"{tag}.{e}") for e in ("csv", "json", "safetensors", "grads.safetensors"))
    cmd = [a.mixprec, "train", "--model", a.model, "--data", "text:" + corpus, "--precision", precision,
           "--init", init, "--no-shuffle", "--steps", str(steps), "--batch", str(a.batch), "--lr", repr(a.lr),
           "--weight-decay", repr(a.wd), "--betas", f"{a.betas[0]!r},{a.betas[1]!r}", "--log", log,
           "--summary", summ, "--save", saved]
    if dump_grads:
        cmd += ["--dump-grads", grads]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"crosscheck_gpt: `{' '.join(cmd)}` failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    losses = [float(r["loss"]) for r in csv.DictReader(open(log))]
    return losses, json.load(open(summ)), gt.read_safetensors(saved), gt.read_safetensors(grads) if dump_grads else None


def torch_train(model, text, a, steps, autocast=None):
    """steps AdamW steps on the --no-shuffle windows; the losses (fp32 mean)."""
    opt = gt.configure_adamw(model, a.lr, a.wd, a.betas)
    T = model.cfg.block_size
    losses = []
    for s in range(steps):
        x, y = text.train_batch(s, a.batch, T)
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast("cpu", dtype=autocast):
                _, loss = model(x, y)
        else:
            _, loss = model(x.to(model.transformer.wte.weight.device), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def curves(name_a, la, name_b, lb):
    """Prints the two loss curves side by side; returns the max relative difference."""
    print(f"  {'step':>4}  {name_a:>12}  {name_b:>12}  {'rel. diff':>9}")
    worst = 0.0
    for k, (x, y) in enumerate(zip(la, lb)):
        r = rel(x, y)
        worst = max(worst, r)
        print(f"  {k + 1:>4}  {x:>12.6f}  {y:>12.6f}  {r:>9.2e}")
    return worst


def verdict(ok, what):
    print(("PASS" if ok else "FAIL") + ": " + what)
    return ok


def tensor_diffs(title, mine, theirs, names):
    """Per tensor: ||mine - theirs|| / ||theirs|| and max |mine - theirs| / max |theirs|, worst first."""
    rows = []
    for n in names:
        if n not in mine:
            print(f"  {n}: missing from mixprec's file")
            continue
        m, t = mine[n].reshape(-1).double(), theirs[n].reshape(-1).double()
        if m.numel() != t.numel():
            print(f"  {n}: {m.numel()} values in mixprec's, {t.numel()} in PyTorch's")
            continue
        d = (m - t).abs()
        scale = t.abs().max().item()
        i = int(d.argmax())
        rows.append(((m - t).norm().item() / max(t.norm().item(), 1e-30), n, d.max().item() / max(scale, 1e-30),
                     d.max().item(), scale, i, m[i].item(), t[i].item()))
    rows.sort(reverse=True)
    print(f"  {title}: per tensor, worst first: ||mixprec - torch|| / ||torch||, max |mixprec - torch| / max |torch|")
    for r2, n, r, dm, sc, i, mv, tv in rows:
        print(f"    {n:<40} {r2:9.2e} {r:9.2e}  (max diff {dm:.3e} at [{i}]: {mv:.8g} vs {tv:.8g}; "
              f"max |torch| {sc:.3e})")
    return rows


def diagnose(a, td, text, init_model, init, corpus, precision):
    """One step of each side: the weight gradients and the weights after the step, tensor by tensor.
    Step 1 of Adam moves every weight by about lr sign(g), so elements whose gradient is rounding noise
    (the key bias's, exactly 0 in exact arithmetic) may move in opposite directions: judge the
    updates by the norm column."""
    print(f"diagnosis ({precision}): one step of both, tensor by tensor")
    _, _, saved, grads = run_mixprec(a, td, f"diag-{precision}", precision, 1, init, corpus, dump_grads=True)
    x, y = text.train_batch(0, a.batch, init_model.cfg.block_size)
    ref = copy.deepcopy(init_model)
    _, loss = ref(x, y)
    loss.backward()
    g32 = {n + ".grad": p.grad.detach().clone() for n, p in ref.named_parameters()}
    model = copy.deepcopy(init_model)
    if precision == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = model(x, y)
    else:
        _, loss = model(x, y)
    loss.backward()
    tg = {n + ".grad": p.grad.detach().clone() for n, p in model.named_parameters()}
    names = [n for n in tg if n in grads]  # mixprec dumps the weights' gradients (not biases, not layer norms)
    tensor_diffs("gradients of step 1", grads, tg, names)
    if precision != "fp32":
        print(f"  each side's {precision} gradients against PyTorch's fp32 ones: ||g - g_fp32|| / ||g_fp32||")
        for n in names:
            d = lambda g: ((g[n].reshape(-1).double() - g32[n].reshape(-1).double()).norm().item()
                           / g32[n].double().norm().item())
            print(f"    {n:<40} mixprec {d(grads):9.2e}   torch autocast {d(tg):9.2e}")
    opt = gt.configure_adamw(model, a.lr, a.wd, a.betas)
    opt.step()
    after = gt.model_tensors(model)
    before = gt.model_tensors(init_model)
    tensor_diffs("weights after step 1", saved, after, list(after))
    upd_m = {n: saved[n] - before[n] for n in after if n in saved}
    upd_t = {n: after[n] - before[n] for n in after}
    tensor_diffs("updates of step 1", upd_m, upd_t, list(upd_m))


def self_test(a, text):
    """No mixprec: PyTorch fp32 against the same model in fp64 (the harness's own noise floor)."""
    torch.manual_seed(a.seed)
    m32 = gt.GPT(gt.parse_spec(a.model, a.gelu))
    m64 = copy.deepcopy(m32).double()
    l32 = torch_train(m32, text, a, a.steps)
    l64 = torch_train(m64, text, a, a.steps)
    worst = curves("torch fp32", l32, "torch fp64", l64)
    ok = verdict(worst < TOL_FP32, f"self-test fp32 vs fp64 loss curves: max relative difference {worst:.2e} "
                 f"(tolerance {TOL_FP32:g})")
    t0 = time.perf_counter()
    v32 = gt.val_loss(m32, text, m32.cfg.block_size)
    v64 = gt.val_loss(m64, text, m64.cfg.block_size)
    ok &= verdict(rel(v32, v64) < TOL_VAL, f"self-test validation loss fp32 {v32:.8f} vs fp64 {v64:.8f}: relative "
                  f"{rel(v32, v64):.2e} ({time.perf_counter() - t0:.1f} s)")
    torch.manual_seed(a.seed)
    m = gt.GPT(gt.parse_spec(a.model, a.gelu))
    lbf = torch_train(m, text, a, a.steps, autocast=torch.bfloat16)
    worst = curves("torch bf16", lbf, "torch fp64", l64)
    ok &= verdict(worst < TOL_BF16, f"self-test bf16 autocast vs fp64: max relative difference {worst:.2e}")
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "w.safetensors")
        gt.write_safetensors(p, gt.model_tensors(m32), {"format": "pt"})
        back = gt.read_safetensors(p)
        m2 = gt.GPT(gt.parse_spec(a.model, a.gelu))
        gt.load_tensors(m2, back)
        same = all(torch.equal(m2.state_dict()[k], v) for k, v in m32.state_dict().items())
        ok &= verdict(same and m2.lm_head.weight is m2.transformer.wte.weight,
                      "self-test safetensors write/read round trip, lm_head tied")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixprec", default="build/mixprec")
    ap.add_argument("--model", default="gpt:2-4-64-64")
    ap.add_argument("--gelu", default="tanh", choices=("tanh", "erf"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--betas", default="0.9,0.95")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--diagnose", action="store_true", help="compare one step tensor by tensor even if all pass")
    ap.add_argument("--self-test", action="store_true", help="PyTorch fp32 against fp64 only (no mixprec)")
    a = ap.parse_args()
    a.betas = tuple(float(v) for v in a.betas.split(","))
    torch.set_num_threads(2)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as td:
        corpus, what = make_corpus(td)
        text = gt.Text(open(corpus, "rb").read())
        cfg = gt.parse_spec(a.model, a.gelu)
        T = cfg.block_size
        print(f"crosscheck_gpt: {a.model} (gelu {a.gelu}), {what}: {text.n} bytes ({text.n_train} train, "
              f"{text.val_windows(T)} validation windows); AdamW lr {a.lr:g}, weight decay {a.wd:g} (2-D tensors), "
              f"betas {a.betas[0]:g},{a.betas[1]:g}; {a.steps} steps of {a.batch} x {T} bytes, --no-shuffle")
        if a.self_test:
            ok = self_test(a, text)
            print(f"crosscheck_gpt: {'PASS' if ok else 'FAIL'} ({time.perf_counter() - t_start:.1f} s)")
            return 0 if ok else 1
        if a.gelu != "tanh":
            sys.exit("crosscheck_gpt: mixprec's --gelu erf is not passed through here; use --gelu tanh")
        torch.manual_seed(a.seed)
        init_model = gt.GPT(cfg)
        init = os.path.join(td, "init.safetensors")
        gt.write_safetensors(init, gt.model_tensors(init_model), {"format": "pt"})
        results = []

        # fp32: loss curves
        t0 = time.perf_counter()
        mine, summary, saved, _ = run_mixprec(a, td, "fp32", "fp32", a.steps, init, corpus)
        t_mp = time.perf_counter() - t0
        model = copy.deepcopy(init_model)
        t0 = time.perf_counter()
        theirs = torch_train(model, text, a, a.steps)
        print(f"fp32 loss curves (mixprec {t_mp:.1f} s with its evaluation, PyTorch {time.perf_counter() - t0:.1f} s):")
        worst = curves("mixprec", mine, "torch", theirs)
        ok32 = len(mine) == a.steps and worst < TOL_FP32
        results.append(verdict(ok32, f"fp32 loss curve, {a.steps} steps: max relative difference {worst:.2e} "
                                     f"(tolerance {TOL_FP32:g}; last {mine[-1]:.6f} vs {theirs[-1]:.6f})"))

        # fp32: validation loss of mixprec's trained weights, in PyTorch
        check = copy.deepcopy(init_model)
        gt.load_tensors(check, saved)
        t0 = time.perf_counter()
        v_torch = gt.val_loss(check, text, T)
        v_mine = float(summary["val_loss"])
        r = rel(v_mine, v_torch)
        results.append(verdict(r < TOL_VAL, f"fp32 validation loss ({text.val_windows(T)} windows) of mixprec's "
                                            f"saved weights: mixprec {v_mine:.8f}, PyTorch {v_torch:.8f}, relative "
                                            f"difference {r:.2e} (tolerance {TOL_VAL:g}; {time.perf_counter() - t0:.1f} s)"))

        # bf16 against autocast
        t0 = time.perf_counter()
        mine16, summary16, _, _ = run_mixprec(a, td, "bf16", "bf16", a.steps, init, corpus)
        t_mp = time.perf_counter() - t0
        model16 = copy.deepcopy(init_model)
        t0 = time.perf_counter()
        theirs16 = torch_train(model16, text, a, a.steps, autocast=torch.bfloat16)
        print(f"bf16 loss curves (mixprec --precision bf16 {t_mp:.1f} s, PyTorch autocast bf16 "
              f"{time.perf_counter() - t0:.1f} s):")
        worst16 = curves("mixprec", mine16, "torch", theirs16)
        d_mine = max(rel(x, y) for x, y in zip(mine16, mine))
        d_theirs = max(rel(x, y) for x, y in zip(theirs16, theirs))
        print(f"  each side's bf16 curve against its own fp32 curve: mixprec max relative {d_mine:.2e}, "
              f"PyTorch autocast {d_theirs:.2e}")
        ok16 = len(mine16) == a.steps and worst16 < TOL_BF16
        results.append(verdict(ok16, f"bf16 loss curve, {a.steps} steps: max relative difference {worst16:.2e} "
                                     f"(tolerance {TOL_BF16:g}; last {mine16[-1]:.6f} vs {theirs16[-1]:.6f}; "
                                     f"validation loss mixprec {float(summary16['val_loss']):.6f})"))

        if not ok32 or a.diagnose:
            diagnose(a, td, text, init_model, init, corpus, "fp32")
        if not ok16 or a.diagnose:
            diagnose(a, td, text, init_model, init, corpus, "bf16")
    ok = all(results)
    print(f"crosscheck_gpt: {'PASS' if ok else 'FAIL'} ({sum(results)}/{len(results)} checks, "
          f"{time.perf_counter() - t_start:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

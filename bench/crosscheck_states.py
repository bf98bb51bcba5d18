"""crosscheck_states.py - mixprec's quantized optimizer states against torchao's.

    bench/.venv/bin/python bench/crosscheck_states.py [--lib build/libmixprec.so] [--steps 100]

For each of torchao 0.18's AdamW8bit, AdamW4bit and AdamWFp8 (on the CPU, as
its step runs there: compiled by Inductor) and mixprec's AdamW with
--optim-state 8bit, 4bit and fp8 (libmixprec through ctypes), on one fp32
parameter of 65536 values, for each of STEPS steps on the same gradients:
both start the step from torchao's state (weights, codes, scales: copied
into mixprec's buffers), take one step, and the results are compared:
  - scales and codes bit for bit; a code that differs is explained when each
    side's code is the code of the quotient (moment / scale) its own
    arithmetic gives: mixprec's moments are PyTorch's AdamW (a fused
    multiply-add in the lerp), torchao's compiled step rounds the product and
    the sum apart, and where the lerp's sum cancels the two are more than an
    ulp apart; a block whose scale differs (its largest moment differs, for
    the same reason) is counted apart; mixprec's exp_avg_sq never takes the
    code of 0 for a positive quotient (8-bit and fp8: the map's least
    positive entry instead, docs/TRAINING.md), so there its code is the
    floored one;
  - a scale that differs is explained when each side's scale is the one its
    own arithmetic of the moments (the two above) gives for the block;
  - weights to 1 ulp; a weight further apart is explained when the
    difference is within 2 ulps plus what torchao's fp32 bias corrections
    move the update: torchao computes 1 - beta^t as 1 - powf(f32(beta), t)
    in fp32, where mixprec computes it in double as torch.optim.AdamW does
    (f32(0.999) alone is 1.3e-8 off, which moves 1 - beta2^t by 1.3e-5 of
    itself while t is small); its step then differs by that fraction, which
    is more than an ulp of the weight where the update is a large part of it.
Prints, per format, the codes compared, equal, explained and unexplained,
the scales that differ (their blocks' codes not compared), and the weights
within 1 ulp, explained and unexplained; exits 1 when a code or a weight is
unexplained.
"""
import argparse
import ctypes
import os
import sys

import numpy as np
import torch
import torchao.optim as O

HERE = os.path.dirname(os.path.abspath(__file__))


class AdamwConfig(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double)]


class Param(ctypes.Structure):  # the leading fields of mp_param (mixprec/optim.h)
    _fields_ = [("name", ctypes.c_char * 64), ("n", ctypes.c_size_t), ("master", ctypes.POINTER(ctypes.c_float)),
                ("grad", ctypes.POINTER(ctypes.c_float))]


class Tensor(ctypes.Structure):  # mp_tensor (mixprec/io.h)
    _fields_ = [("name", ctypes.c_char * 128), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_size_t * 4), ("nbytes", ctypes.c_size_t), ("data", ctypes.c_void_p)]


STATE = {"8bit": 5, "4bit": 6, "fp8": 4}  # mp_state_format
MP_F32 = 0


def load(path):
    lib = ctypes.CDLL(path)
    P = ctypes.c_void_p
    for name, res, args in [("mp_optim_adamw", ctypes.c_int, [ctypes.POINTER(P), ctypes.POINTER(AdamwConfig)]),
                            ("mp_optim_set_state_format", ctypes.c_int, [P, ctypes.c_int]),
                            ("mp_optim_set_flush_denormal", ctypes.c_int, [P, ctypes.c_int]),
                            ("mp_optim_add", ctypes.c_int, [P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_float),
                                                            ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(P)]),
                            ("mp_optim_step", ctypes.c_int, [P]), ("mp_optim_free", None, [P]),
                            ("mp_optim_restore", ctypes.c_int, [P, ctypes.c_uint64]),
                            ("mp_optim_state_tensors", ctypes.c_size_t, [P, ctypes.POINTER(Tensor)]),
                            ("mp_last_error", ctypes.c_char_p, [])]:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def e4m3_values():
    return torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()


def codes_of(state, kind, n):
    c = state.codes
    if kind == "fp8":
        return c.view(torch.uint8).numpy().reshape(-1).copy()
    c = c.view(torch.uint8).numpy().reshape(-1).copy()
    if kind == "4bit":  # two a byte, the first in the high nibble
        c = np.stack([c >> 4, c & 15], -1).reshape(-1)
    return c[:n]


def moments(m0, g, si, b1, b2):
    """A moment after the step as each side computes it: torchao's compiled lerp (the product and the sum
    rounded apart; exp_avg_sq as the lerp towards g^2) and mixprec's, torch.optim.AdamW's (the lerp with a
    fused multiply-add; exp_avg_sq as fma((1-b2) g, g, v b2))."""
    w = np.float32(1 - b1) if si == 0 else np.float32(1 - b2)
    x = g if si == 0 else (g * g).astype(np.float32)
    unfused = (m0 + (x - m0) * w).astype(np.float32)
    if si == 0:
        fused = (m0.astype(np.float64) + (x - m0).astype(np.float32).astype(np.float64) * np.float64(w)).astype(np.float32)
    else:
        fused = ((np.float32(1 - b2) * g).astype(np.float64) * g.astype(np.float64) +
                 (m0 * np.float32(b2)).astype(np.float64)).astype(np.float32)
    return unfused, fused


def code_of(y, kind, values):
    """torchao's code of a quotient y: e4m3 by round to nearest even; the maps' nearest entry by fp32
    |y - value| (torch's argmin: the first of equal distances)."""
    if kind == "fp8":
        return int(torch.tensor([y], dtype=torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)[0])
    return int(np.argmin(np.abs(np.float32(y) - values.astype(np.float32))))


def run(lib, kind, n, steps, seed):
    torch.manual_seed(seed)
    init = (torch.randn(n) * 0.02).float()
    cls = {"8bit": O.AdamW8bit, "4bit": O.AdamW4bit, "fp8": O.AdamWFp8}[kind]
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 1e-2
    p = torch.nn.Parameter(init.clone())
    ref = cls([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    o = ctypes.c_void_p()
    cfg = AdamwConfig(lr, b1, b2, eps, wd)
    assert lib.mp_optim_adamw(ctypes.byref(o), ctypes.byref(cfg)) == 0
    assert lib.mp_optim_set_state_format(o, STATE[kind]) == 0
    lib.mp_optim_set_flush_denormal(o, 0)  # PyTorch keeps subnormals
    pp = ctypes.c_void_p()
    buf = init.numpy().copy()
    assert lib.mp_optim_add(o, b"w", buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n, MP_F32, ctypes.byref(pp)) == 0
    param = ctypes.cast(pp, ctypes.POINTER(Param)).contents
    master = np.ctypeslib.as_array(param.master, shape=(n,))
    grad = np.ctypeslib.as_array(param.grad, shape=(n,))
    block = 128 if kind == "4bit" else 256
    totals = dict(codes=0, equal=0, explained=0, unexplained=0, scales=0, scales_differ=0, scales_far=0, w=0, w1ulp=0,
                  wexpl=0, wbad=0)
    gen = torch.Generator().manual_seed(seed + 1)
    for step in range(1, steps + 1):
        g = (torch.randn(n, generator=gen) * torch.logspace(-4, -1, n)[torch.randperm(n, generator=gen)]).float()
        st = ref.state.get(p)
        if step > 1:  # mixprec starts the step from torchao's state
            master[:] = p.detach().numpy()
            lib.mp_optim_restore(o, step - 1)
            ts = (Tensor * 5)()
            k = lib.mp_optim_state_tensors(pp, ts)
            srcs = []
            for key in ("exp_avg", "exp_avg_sq"):
                s = st[key]
                raw = s.codes.view(torch.uint8).numpy().reshape(-1)
                srcs += [raw, s.scale.numpy().reshape(-1)]
            for t, src in zip(ts[:k], srcs):
                src = np.ascontiguousarray(src)
                assert src.nbytes == t.nbytes, (t.name, src.nbytes, t.nbytes)
                ctypes.memmove(t.data, src.ctypes.data, t.nbytes)
            prev = {key: (st[key].dequantize().float().numpy().reshape(-1).copy()) for key in ("exp_avg", "exp_avg_sq")}
        else:
            prev = {"exp_avg": np.zeros(n, np.float32), "exp_avg_sq": np.zeros(n, np.float32)}
        grad[:] = g.numpy()
        assert lib.mp_optim_step(o) == 0, lib.mp_last_error()
        w_before = p.detach().numpy().copy()
        p.grad = g.clone()
        ref.step()
        st = ref.state[p]
        w_ref = p.detach().numpy().copy()
        mw = master.copy()
        gn = g.numpy()
        models = {key: moments(prev[key], gn, si, b1, b2) for si, key in enumerate(("exp_avg", "exp_avg_sq"))}
        rel_m = {key: np.abs(u - f).astype(np.float64) / np.maximum(np.abs(f), 1e-30) for key, (u, f) in models.items()}
        big = np.maximum(np.abs(mw), np.abs(w_ref))
        within = np.abs(mw - w_ref) <= np.spacing(big)
        # how far torchao's fp32 bias corrections (1 - powf(f32(beta), t)) are from the exact ones this step:
        # the update moves by about rel(bc1) + rel(bc2) / 2; the band allows twice rel(bc1) + rel(bc2), plus a
        # few roundings of its own
        rel = [abs(float(np.float32(1) - np.float32(np.float32(b) ** np.float32(step))) - (1 - b ** step)) /
               (1 - b ** step) for b in (b1, b2)]
        # and how far the two sides' moments are apart (one rounding of the terms, more of the result where
        # the lerp's sum cancels): the update moves by rel(m) + rel(v) / 2
        bound = 2 * (rel[0] + rel[1]) + 2 * (rel_m["exp_avg"] + rel_m["exp_avg_sq"] / 2) + 1e-6
        step_t = np.abs(w_ref - w_before * np.float32(1 - lr * wd))
        expl = ~within & (np.abs(mw - w_ref) <= bound * step_t + 2 * np.spacing(big))
        totals["w"] += n
        totals["w1ulp"] += int(within.sum())
        totals["wexpl"] += int(expl.sum())
        totals["wbad"] += int((~within & ~expl).sum())
        if os.environ.get("XDEBUG") and (~within & ~expl).any():
            i = int(np.nonzero(~within & ~expl)[0][0])
            print("step", step, "i", i, "w0", w_before[i], "ref", w_ref[i], "mine", mw[i], "step_t", step_t[i],
                  "bound", bound[i], "ulps", abs(mw[i] - w_ref[i]) / np.spacing(big[i]))
        ts = (Tensor * 5)()
        k = lib.mp_optim_state_tensors(pp, ts)
        mine = []
        for t in ts[:k]:
            mine.append(np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_uint8)), shape=(t.nbytes,)).copy())
        for si, key in enumerate(("exp_avg", "exp_avg_sq")):
            s = st[key]
            values = e4m3_values() if kind == "fp8" else s.qmap.numpy()
            tc = codes_of(s, kind, n)
            mc = mine[2 * si]
            if kind == "4bit":
                mc = np.stack([mc >> 4, mc & 15], -1).reshape(-1)
            tscale = s.scale.numpy().reshape(-1)
            mscale = mine[2 * si + 1].view(np.float32)
            same_scale = tscale.view(np.uint32) == mscale.view(np.uint32)
            totals["scales"] += len(tscale)
            totals["scales_differ"] += int((~same_scale).sum())
            m0 = prev[key]
            floor = si == 1 and kind != "4bit"  # exp_avg_sq's maps that hold a 0
            unfused, fused = models[key]
            # a scale is its block's largest moment (fp8: over 448): a differing scale is explained when
            # each side's scale is the one its own arithmetic of the moments gives
            def scales_of(mom):
                a = np.maximum(np.abs(mom[:(n // block) * block]).reshape(-1, block).max(1), np.float32(1e-12))
                return (a / np.float32(448)).astype(np.float32) if kind == "fp8" else a.astype(np.float32)
            explained_scale = (tscale == scales_of(unfused)) & (mscale == scales_of(fused))
            totals["scales_far"] += int((~same_scale & ~explained_scale).sum())
            for b in range(n // block):
                sl = slice(b * block, (b + 1) * block)
                totals["codes"] += block
                if not same_scale[b]:
                    continue
                eq = tc[sl] == mc[sl]
                totals["equal"] += int(eq.sum())
                for i in np.nonzero(~eq)[0] + b * block:
                    ys = [np.float32(unfused[i] / tscale[b]), np.float32(fused[i] / tscale[b])]
                    mine_code = code_of(ys[1], kind, values)
                    if floor and ys[1] > 0 and mine_code == 0:  # mixprec's second-moment floor
                        mine_code = 1
                    if code_of(ys[0], kind, values) == tc[i] and mine_code == mc[i]:
                        totals["explained"] += 1
                    else:
                        totals["unexplained"] += 1
                        if os.environ.get("XDEBUG"):
                            print("step", step, key, "i", i, "codes", tc[i], mc[i], "values", values[tc[i]],
                                  values[mc[i]], "y", ys, "m0", m0[i], "g", gn[i], "scale", tscale[b])
    lib.mp_optim_free(o)
    return totals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "libmixprec.so"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--n", type=int, default=65536)
    a = ap.parse_args()
    lib = load(a.lib)
    bad = 0
    print("torch %s, torchao %s; %d values, %d steps, AdamW lr 1e-3 (torchao's defaults)" %
          (torch.__version__, O.__name__ and __import__("torchao").__version__, a.n, a.steps))
    print("%-6s %9s %9s %9s %11s %15s %9s   %9s %9s %9s %11s" % (
        "state", "codes", "equal", "explained", "unexplained", "scales differ", "unexpl.", "weights", "1 ulp",
        "explained", "unexplained"))
    for kind in ("8bit", "4bit", "fp8"):
        t = run(lib, kind, a.n, a.steps, 1)
        print("%-6s %9d %9d %9d %11d %7d of %-6d %9d   %9d %9d %9d %11d" % (
            kind, t["codes"], t["equal"], t["explained"], t["unexplained"], t["scales_differ"], t["scales"],
            t["scales_far"], t["w"], t["w1ulp"], t["wexpl"], t["wbad"]))
        bad |= t["unexplained"] > 0 or t["wbad"] > 0 or t["scales_far"] > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

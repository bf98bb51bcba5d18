#!/usr/bin/env python3
"""Cross-check mixprec's optimizers and loss scaler against PyTorch, through the
shared library and ctypes.

- torch.optim.SGD (momentum, dampening, nesterov, weight decay) and
  torch.optim.AdamW run side by side with mp_optim for 20 steps on the same
  random gradients; prints the largest difference in units in the last place.
  mixprec follows current PyTorch (exp_avg.lerp_); Debian's torch 1.13 still
  updates exp_avg with mul_ + add_, so AdamW may differ by a few ulp there.
- mp_scaler_update against GradScaler's update rule evaluated with torch
  float32 tensors (torch 1.13 has no CPU kernel for _amp_update_scale_), on
  random overflow flags.
Usage: bench/crosscheck_optim.py [--lib build/libmixprec.so]"""
import argparse
import ctypes as C
import sys

import numpy as np
import torch


class Param(C.Structure):
    _fields_ = [("name", C.c_char * 64), ("n", C.c_size_t), ("master", C.POINTER(C.c_float)),
                ("grad", C.POINTER(C.c_float)), ("half", C.c_void_p), ("half_type", C.c_int),
                ("state1", C.POINTER(C.c_float)), ("state2", C.POINTER(C.c_float)), ("has_state", C.c_int)]


class SGD(C.Structure):
    _fields_ = [("lr", C.c_double), ("momentum", C.c_double), ("dampening", C.c_double),
                ("weight_decay", C.c_double), ("nesterov", C.c_int)]


class AdamW(C.Structure):
    _fields_ = [("lr", C.c_double), ("beta1", C.c_double), ("beta2", C.c_double), ("eps", C.c_double),
                ("weight_decay", C.c_double)]


class ScalerConfig(C.Structure):
    _fields_ = [("init_scale", C.c_float), ("growth_factor", C.c_float), ("backoff_factor", C.c_float),
                ("growth_interval", C.c_int), ("hysteresis", C.c_int), ("min_scale", C.c_float),
                ("max_scale", C.c_float), ("dynamic", C.c_int)]


class Scaler(C.Structure):
    _fields_ = [("cfg", ScalerConfig), ("scale", C.c_float), ("growth_tracker", C.c_int32),
                ("hysteresis_left", C.c_int32), ("steps", C.c_uint64), ("skipped", C.c_uint64),
                ("growths", C.c_uint64), ("backoffs", C.c_uint64), ("last_overflow_step", C.c_int64)]


def ulps(a, b):
    ai = a.view(np.int32).astype(np.int64)
    bi = b.view(np.int32).astype(np.int64)
    ai = np.where(ai < 0, -(ai & 0x7FFFFFFF), ai)
    bi = np.where(bi < 0, -(bi & 0x7FFFFFFF), bi)
    return int(np.abs(ai - bi).max())


def run_optim(lib, kind, cfg, torch_opt, n=4099, steps=20):
    rng = np.random.default_rng(11)
    w0 = rng.standard_normal(n).astype(np.float32)
    o = C.c_void_p()
    create = lib.mp_optim_sgd if kind == "sgd" else lib.mp_optim_adamw
    assert create(C.byref(o), C.byref(cfg)) == 0
    p = C.POINTER(Param)()
    assert lib.mp_optim_add(o, b"w", w0.ctypes.data_as(C.POINTER(C.c_float)), C.c_size_t(n), 0, C.byref(p)) == 0
    tw = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch_opt([tw])
    for _ in range(steps):
        g = (rng.standard_normal(n) * 0.05).astype(np.float32)
        np.ctypeslib.as_array(p.contents.grad, (n,))[:] = g
        assert lib.mp_optim_step(o) == 0
        tw.grad = torch.from_numpy(g.copy())
        opt.step()
    mine = np.ctypeslib.as_array(p.contents.master, (n,)).copy()
    lib.mp_optim_free(o)
    return ulps(mine, tw.detach().numpy())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libmixprec.so")
    a = ap.parse_args()
    lib = C.CDLL(a.lib)
    lib.mp_optim_add.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(C.c_float), C.c_size_t, C.c_int, C.c_void_p]
    lib.mp_optim_step.argtypes = [C.c_void_p]
    lib.mp_optim_free.argtypes = [C.c_void_p]
    lib.mp_scaler_update.argtypes = [C.POINTER(Scaler), C.c_int]
    torch.set_num_threads(1)
    bad = 0
    sgd_cases = [(0.1, 0, 0, 0, 0), (0.05, 0.9, 0, 0, 0), (0.05, 0.9, 0.1, 1e-4, 0), (0.01, 0.9, 0, 5e-4, 1)]
    for lr, mom, damp, wd, nest in sgd_cases:
        d = ulps_sgd = run_optim(lib, "sgd", SGD(lr, mom, damp, wd, nest),
                                 lambda ps: torch.optim.SGD(ps, lr=lr, momentum=mom, dampening=damp,
                                                            weight_decay=wd, nesterov=bool(nest)))
        print(f"SGD lr={lr} momentum={mom} dampening={damp} wd={wd} nesterov={nest}: max {d} ulp after 20 steps")
        bad += ulps_sgd != 0
    for lr, b1, b2, eps, wd in [(1e-3, 0.9, 0.999, 1e-8, 1e-2), (3e-4, 0.8, 0.95, 1e-6, 0.1)]:
        d = run_optim(lib, "adamw", AdamW(lr, b1, b2, eps, wd),
                      lambda ps: torch.optim.AdamW(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd))
        print(f"AdamW lr={lr} betas=({b1}, {b2}) eps={eps} wd={wd}: max {d} ulp after 20 steps "
              f"(torch {torch.__version__})")
        bad += d > 64

    # current PyTorch's _single_tensor_adamw, written with torch's own tensor ops
    class AdamW2:
        def __init__(self, ps, lr, betas, eps, weight_decay):
            self.p, self.lr, (self.b1, self.b2), self.eps, self.wd = ps[0], lr, betas, eps, weight_decay
            self.m = torch.zeros_like(self.p)
            self.v = torch.zeros_like(self.p)
            self.t = 0

        @torch.no_grad()
        def step(self):
            self.t += 1
            g = self.p.grad
            self.p.mul_(1 - self.lr * self.wd)
            self.m.lerp_(g, 1 - self.b1)
            self.v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
            denom = (self.v.sqrt() / (bc2 ** 0.5)).add_(self.eps)
            self.p.addcdiv_(self.m, denom, value=-(self.lr / bc1))

    for lr, b1, b2, eps, wd in [(1e-3, 0.9, 0.999, 1e-8, 1e-2), (3e-4, 0.8, 0.95, 1e-6, 0.1)]:
        d = run_optim(lib, "adamw", AdamW(lr, b1, b2, eps, wd),
                      lambda ps: AdamW2(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd))
        print(f"AdamW as torch >= 2.0 computes it (lerp_), torch's kernels: max {d} ulp after 20 steps")
        bad += d != 0

    # scaler: GradScaler's rule with torch float32 tensors
    rng = np.random.default_rng(5)
    for interval, p_inf, start in [(2000, 0.001, 65536.0), (2, 0.3, 2.0 ** 126), (1, 0.6, 1e-38)]:
        s = Scaler()
        cfg = ScalerConfig(start, 2.0, 0.5, interval, 1, 0.0, 0.0, 1)
        assert lib.mp_scaler_init(C.byref(s), C.byref(cfg)) == 0
        scale = torch.tensor(start, dtype=torch.float32)
        tracker = 0
        diff = 0
        for f in rng.random(100000) < p_inf:
            if f:
                scale = scale * 0.5
                tracker = 0
            else:
                tracker += 1
                if tracker == interval:
                    grown = scale * 2.0
                    if torch.isfinite(grown):
                        scale = grown
                    tracker = 0
            lib.mp_scaler_update(C.byref(s), int(f))
            diff += (np.float32(s.scale).view(np.int32) != scale.numpy().view(np.int32)) or s.growth_tracker != tracker
        print(f"scaler interval={interval} p(inf)={p_inf} start={start:g}: {diff} of 100000 steps differ")
        bad += diff
    print("crosscheck_optim:", "all within bounds" if bad == 0 else f"{bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""crosscheck_weights.py - weights kept without an fp32 master copy, against their references.

    bench/.venv/bin/python bench/crosscheck_weights.py [--lib build/libmixprec.so] [--steps 100] [--reps 400]

mixprec (libmixprec through ctypes) against torch-optimi and torchao on the CPU, one bf16 parameter of N
values:

1. kahan, SGD: mixprec's SGD (no momentum, no decay) with --master-weights kahan (mp_optim_add_kahan)
   against optimi's SGD(kahan_sum=True) for STEPS steps on the same gradients (bf16 values, as optimi's
   bf16 parameter holds its gradient in bf16), from the same start: the weights and the compensation
   compared bit for bit after every step. The update is one product here, so the two follow the same
   arithmetic: compensation += update, weight += compensation, compensation += what the weight lost,
   each rounded to bf16.
2. kahan, AdamW: optimi's AdamW computes the update u in another way than torch.optim.AdamW, whose
   arithmetic mixprec follows: its moments are held in the parameter's dtype (bf16) and updated with
   "debiased" betas (beta_hat = beta (1 - beta^(t-1)) / (1 - beta^t), no bias correction in the step),
   and the denominator is sqrt(v) + eps rounded to bf16 twice. So the comparison is in two parts, each
   step started from optimi's weights, compensation and moments (copied into mixprec, which keeps its
   moments in bf16 too: --optim-state bf16):
   a. mixprec's Kahan sequence, written out here (kahan_store in src/optim_kernels.h) and fed optimi's
      own update, gives optimi's weights and compensation bit for bit;
   b. mixprec's step against optimi's: how many weights are equal, and how far the others are, with the
      two updates' relative difference (what the different formulas give).
3. sr: torchao's _AdamW(bf16_stochastic_round=True) draws its rounding bits from torch's generator,
   mixprec from a counter-based stream (seed, step, parameter, element): equal bits are not expected.
   Both are checked in distribution: REPS repetitions of one AdamW step from the same bf16 weights and
   gradients, each with another seed; every result must be one of the two bf16 neighbours of the exact
   fp32 update x (each implementation's own: the same step on fp32 weights, since torchao's bias
   corrections are computed in fp32 and differ in the last bits), and the share rounded away from zero must
   be |x|'s fraction between them (the fp32 bits below bf16's, / 65536: the chance that 16 random bits
   added to them carry). Per value the count is binomial: the script reports the largest |z| over the
   values (about 4.5 expected for 4096 values), the mean of (share - fraction) over all values against
   its standard error, and the mean rounded weight's distance to x against round to nearest's.
Exits 1 when a check fails.
"""
import argparse
import ctypes
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MP_BF16, MP_STATE_BF16, MP_ROUND_STOCHASTIC = 2, 2, 1


class Sgd(ctypes.Structure):  # mp_sgd_config
    _fields_ = [("lr", ctypes.c_double), ("momentum", ctypes.c_double), ("dampening", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("nesterov", ctypes.c_int)]


class Adamw(ctypes.Structure):  # mp_adamw_config
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double)]


PF, PU16 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_uint16)


class Param(ctypes.Structure):  # mp_param (mixprec/optim.h)
    _fields_ = [("name", ctypes.c_char * 64), ("n", ctypes.c_size_t), ("master", PF), ("grad", PF),
                ("half", PU16), ("half_type", ctypes.c_int), ("comp", PU16), ("weights", ctypes.c_int),
                ("state_format", ctypes.c_int), ("state1", PF), ("state2", PF), ("hstate1", PU16),
                ("hstate2", PU16)]


def load(path):
    lib = ctypes.CDLL(path)
    P = ctypes.c_void_p
    for name, res, args in [
            ("mp_optim_sgd", ctypes.c_int, [ctypes.POINTER(P), ctypes.POINTER(Sgd)]),
            ("mp_optim_adamw", ctypes.c_int, [ctypes.POINTER(P), ctypes.POINTER(Adamw)]),
            ("mp_optim_set_state_format", ctypes.c_int, [P, ctypes.c_int]),
            ("mp_optim_set_flush_denormal", ctypes.c_int, [P, ctypes.c_int]),
            ("mp_optim_set_rounding", ctypes.c_int, [P, ctypes.c_int, ctypes.c_uint64]),
            ("mp_optim_add_kahan", ctypes.c_int, [P, ctypes.c_char_p, PF, ctypes.c_size_t, ctypes.c_int,
                                                  ctypes.POINTER(P)]),
            ("mp_optim_add", ctypes.c_int, [P, ctypes.c_char_p, PF, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(P)]),
            ("mp_optim_add_pure_bf16", ctypes.c_int, [P, ctypes.c_char_p, PF, ctypes.c_size_t, ctypes.POINTER(P)]),
            ("mp_optim_restore", ctypes.c_int, [P, ctypes.c_uint64]),
            ("mp_optim_step", ctypes.c_int, [P]), ("mp_optim_free", None, [P]),
            ("mp_last_error", ctypes.c_char_p, [])]:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def ok(lib, rc):
    if rc != 0:
        raise RuntimeError(lib.mp_last_error().decode())


def bits(t):  # a bf16 tensor's bits as uint16
    return t.detach().view(torch.int16).numpy().view(np.uint16).copy()


def arr(ptr, n):
    return np.ctypeslib.as_array(ptr, shape=(n,))


class Mixprec:
    """One bf16 parameter in a mixprec optimizer."""

    def __init__(self, lib, opt, kind, init, state_bf16=False, seed=None):
        self.lib, self.o = lib, ctypes.c_void_p()
        ok(lib, lib.mp_optim_sgd(ctypes.byref(self.o), ctypes.byref(opt)) if isinstance(opt, Sgd)
           else lib.mp_optim_adamw(ctypes.byref(self.o), ctypes.byref(opt)))
        ok(lib, lib.mp_optim_set_flush_denormal(self.o, 0))  # PyTorch keeps subnormals
        if state_bf16:
            ok(lib, lib.mp_optim_set_state_format(self.o, MP_STATE_BF16))
        if seed is not None:
            ok(lib, lib.mp_optim_set_rounding(self.o, MP_ROUND_STOCHASTIC, seed))
        pp, n = ctypes.c_void_p(), len(init)
        x = np.ascontiguousarray(init, np.float32)
        if kind == "fp32":
            ok(lib, lib.mp_optim_add(self.o, b"w", x.ctypes.data_as(PF), n, 0, ctypes.byref(pp)))
        elif kind == "kahan":
            ok(lib, lib.mp_optim_add_kahan(self.o, b"w", x.ctypes.data_as(PF), n, MP_BF16, ctypes.byref(pp)))
        else:
            ok(lib, lib.mp_optim_add_pure_bf16(self.o, b"w", x.ctypes.data_as(PF), n, ctypes.byref(pp)))
        self.p = ctypes.cast(pp, ctypes.POINTER(Param)).contents
        self.n = n

    def w(self):
        return arr(self.p.half, self.n)

    def comp(self):
        return arr(self.p.comp, self.n)

    def step(self, g):
        arr(self.p.grad, self.n)[:] = g
        ok(self.lib, self.lib.mp_optim_step(self.o))

    def free(self):
        self.lib.mp_optim_free(self.o)


def bf16_param(x):
    return torch.nn.Parameter(torch.from_numpy(np.asarray(x, np.float32)).bfloat16())


def f32_of(b):  # bf16 bits -> fp32 values
    return (b.astype(np.uint32) << 16).view(np.float32)


def rnd(x):  # fp32 values -> bf16 bits, nearest even
    return bits(torch.from_numpy(np.asarray(x, np.float32)).bfloat16())


def kahan_sgd(lib, n, steps, rng, lr, mix_lr):
    import optimi
    init = (rng.standard_normal(n) * 0.05).astype(np.float32)
    p = bf16_param(init)
    ref = optimi.SGD([p], lr=lr, kahan_sum=True, foreach=False)
    m = Mixprec(lib, Sgd(mix_lr, 0, 0, 0, 0), "kahan", f32_of(bits(p.data)))
    equal_w = equal_k = total = 0
    for _ in range(steps):
        g = torch.from_numpy((rng.standard_normal(n) * 10.0 ** rng.uniform(-5, -1, n)).astype(np.float32)).bfloat16()
        p.grad = g.clone()
        ref.step()
        m.step(g.float().numpy())
        equal_w += int((m.w() == bits(p.data)).sum())
        equal_k += int((m.comp() == bits(ref.state[p]["kahan_comp"])).sum())
        total += n
    m.free()
    return equal_w, equal_k, total


def kahan_adamw(lib, n, steps, rng):
    import optimi
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.99, 1e-6, 1e-2  # optimi's defaults but lr
    init = (rng.standard_normal(n) * 0.05).astype(np.float32)
    p = bf16_param(init)
    ref = optimi.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, kahan_sum=True, foreach=False)
    m = Mixprec(lib, Adamw(lr, b1, b2, eps, wd), "kahan", f32_of(bits(p.data)), state_bf16=True)
    out = dict(model_w=0, model_k=0, equal=0, total=0, ulps=[], urel=[])
    decay = np.float32(1 - lr * wd)
    for t in range(1, steps + 1):
        g = torch.from_numpy((rng.standard_normal(n) * 10.0 ** rng.uniform(-5, -1, n)).astype(np.float32)).bfloat16()
        st = ref.state.get(p)
        w0 = bits(p.data)
        m0, v0 = np.zeros(n, np.uint16), np.zeros(n, np.uint16)
        if t > 1:  # mixprec starts the step from optimi's state, its debiased moments made raw again
            m0 = rnd(f32_of(bits(st["exp_avg"])) * np.float32(1 - b1 ** (t - 1)))
            v0 = rnd(f32_of(bits(st["exp_avg_sq"])) * np.float32(1 - b2 ** (t - 1)))
            m.w()[:] = w0
            m.comp()[:] = bits(st["kahan_comp"])
            ok(lib, lib.mp_optim_restore(m.o, t - 1))
            arr(m.p.hstate1, n)[:] = m0
            arr(m.p.hstate2, n)[:] = v0
        k0 = bits(st["kahan_comp"]) if st else np.zeros(n, np.uint16)
        m0, v0 = f32_of(m0).astype(np.float64), f32_of(v0).astype(np.float64)
        p.grad = g.clone()
        ref.step()
        st = ref.state[p]
        m.step(g.float().numpy())
        # a. the Kahan sequence fed optimi's own update: u = (-lr m) / d, d = bf16(bf16(sqrt(v)) + eps)
        mo, vo = torch.from_numpy(f32_of(bits(st["exp_avg"]))), st["exp_avg_sq"]
        d = vo.sqrt().add(eps).float()
        u = ((-lr * mo) / d).numpy()
        wdec = rnd(f32_of(w0) * decay)
        k1 = rnd(f32_of(k0) + u)
        w1 = rnd(f32_of(wdec) + f32_of(k1))
        k2 = rnd(f32_of(k1) + f32_of(rnd(f32_of(wdec) - f32_of(w1))))
        out["model_w"] += int((w1 == bits(p.data)).sum())
        out["model_k"] += int((k2 == bits(st["kahan_comp"])).sum())
        # b. mixprec's step against optimi's
        mw, ow = f32_of(m.w()), f32_of(bits(p.data))
        out["equal"] += int((m.w() == bits(p.data)).sum())
        out["total"] += n
        ulp = np.spacing(np.maximum(np.abs(mw), np.abs(ow)).astype(np.float32)) * 65536
        out["ulps"].append(np.abs(mw - ow) / np.where(ulp > 0, ulp, 1))
        # the updates' relative difference: torch.optim.AdamW's update (mixprec's arithmetic, here in
        # float64) from the same moments before the step, against optimi's
        gd = g.double().numpy()
        m1, v1 = m0 + (gd - m0) * (1 - b1), b2 * v0 + (1 - b2) * gd * gd
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        mine = -lr * (m1 / bc1) / (np.sqrt(v1) / math.sqrt(bc2) + eps)
        nz = np.abs(u) > 0
        out["urel"].append(np.abs(mine[nz] - u[nz]) / np.abs(u[nz]))
    m.free()
    out["ulps"] = np.concatenate(out["ulps"])
    out["urel"] = np.concatenate(out["urel"])
    return out


def sr(lib, n, reps, rng):
    import torchao.optim as O
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 0.0
    init = f32_of(rnd((rng.standard_normal(n) * 0.05).astype(np.float32)))
    # bf16 values: torchao's step reads the gradient in the parameter's dtype
    g = f32_of(rnd((rng.standard_normal(n) * 10.0 ** rng.uniform(-4, -1, n)).astype(np.float32)))
    res = {}
    for who in ("mixprec", "torchao"):
        # the exact update, each its own: the same step on fp32 weights (torchao computes its bias corrections
        # in fp32, mixprec in double as torch.optim.AdamW: the two differ in the last bits)
        if who == "mixprec":
            m = Mixprec(lib, Adamw(lr, b1, b2, eps, wd), "fp32", init)
            m.step(g)
            x = arr(m.p.master, n).copy()
            m.free()
        else:
            q = torch.nn.Parameter(torch.from_numpy(init.copy()))
            q.grad = torch.from_numpy(g.copy())
            O._AdamW([q], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd).step()
            x = q.detach().numpy().astype(np.float32)
        lo = f32_of((x.view(np.uint32) >> 16).astype(np.uint16))  # toward zero
        hi = f32_of(((x.view(np.uint32) >> 16) + 1).astype(np.uint16))  # away from zero
        frac = (x.view(np.uint32) & 0xFFFF).astype(np.float64) / 65536
        up = np.zeros(n)
        mean = np.zeros(n)
        outside = 0
        for r in range(reps):
            if who == "mixprec":
                m = Mixprec(lib, Adamw(lr, b1, b2, eps, wd), "sr", init, seed=1000 + r)
                m.step(g)
                w = f32_of(m.w().copy())
                m.free()
            else:
                torch.manual_seed(1000 + r)
                p = torch.nn.Parameter(torch.from_numpy(init.copy()).bfloat16())
                p.grad = torch.from_numpy(g.copy()).bfloat16()
                O._AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, bf16_stochastic_round=True).step()
                w = p.detach().float().numpy()
            up += w == hi
            outside += int(((w != hi) & (w != lo)).sum())
            mean += w
        res[who] = (up / reps, mean / reps, outside, x, frac)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "libmixprec.so"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--n", type=int, default=4096)
    a = ap.parse_args()
    lib = load(a.lib)
    import optimi
    import torchao
    print("torch %s, torch-optimi %s, torchao %s; %d values" % (torch.__version__, optimi.__version__,
                                                                torchao.__version__, a.n))
    bad = 0
    # PyTorch's add_(grad, alpha=-lr) on bf16 tensors multiplies by alpha rounded to bf16: optimi's SGD
    # with lr 1e-2 steps with 0.010009765625; mixprec given that lr follows it bit for bit
    lr16 = float(torch.tensor(1e-2).bfloat16())
    for mix_lr in (1e-2, lr16):
        ew, ek, tot = kahan_sgd(lib, a.n, a.steps, np.random.default_rng(1), 1e-2, mix_lr)
        print("kahan, SGD: optimi lr 1e-2, mixprec lr %.12g, %d steps: weights equal %d of %d, compensation %d of %d"
              % (mix_lr, a.steps, ew, tot, ek, tot))
    bad |= ew != tot or ek != tot
    r = kahan_adamw(lib, a.n, a.steps, np.random.default_rng(2))
    print("kahan, AdamW, %d steps, each from optimi's state:" % a.steps)
    print("  a. the Kahan sequence fed optimi's update: weights equal %d of %d, compensation %d of %d" %
          (r["model_w"], r["total"], r["model_k"], r["total"]))
    u = r["ulps"]
    print("  b. mixprec's weights equal to optimi's: %d of %d (%.2f%%); the others %s bf16 ulps apart "
          "(largest %.0f); updates' relative difference: median %.1e, 99th percentile %.1e" % (
              r["equal"], r["total"], 100 * r["equal"] / r["total"],
              "1" if u.max() <= 1 else "1 to %.0f" % u.max(), u.max(), np.median(r["urel"]),
              np.percentile(r["urel"], 99)))
    bad |= r["model_w"] != r["total"] or r["model_k"] != r["total"]
    res = sr(lib, a.n, a.reps, np.random.default_rng(3))
    print("\nsr, one AdamW step, %d repetitions with other seeds, %d values:" % (a.reps, a.n))
    print("%-8s %9s %10s %22s %30s" % ("", "outside", "largest z", "mean(share - fraction)",
                                       "|mean - x| / |nearest - x|"))
    for who, (share, mean, outside, x, frac) in res.items():
        nearest = f32_of(rnd(x))
        var = frac * (1 - frac) / a.reps
        live = var > 0
        z = np.abs(share - frac)[live] / np.sqrt(var[live])
        d = share - frac
        se = math.sqrt(var.sum()) / a.n
        far = np.abs(nearest - x)
        closer = np.median(np.abs(mean - x)[far > 0] / far[far > 0])
        print("%-8s %9d %10.2f %12.2e (se %.1e) %30.3f" % (who, outside, z.max(), d.mean(), se, closer))
        bad |= outside > 0 or z.max() > 6 or abs(d.mean()) > 5 * se
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

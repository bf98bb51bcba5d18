"""mixprec.torch.Monitor on real training steps: its counts against torch's own
recount, skipped steps naming the right parameters, the shadow pass, the report
(rendered in headless Chromium where it is installed)."""
import math
import shutil
import subprocess
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from mixprec import MixprecError  # noqa: E402
from mixprec.torch import MixprecOverflow, Monitor  # noqa: E402

TORCH2_3 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 3)


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def batch(seed=0, n=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)


def recount(g, dtype):
    """What storing g in dtype does, counted by torch."""
    h = g.to(dtype)
    return {"total": g.numel(), "underflow": int(((h == 0) & (g != 0) & torch.isfinite(g)).sum()),
            "subnormal": int(((h != 0) & (h.abs() < torch.finfo(dtype).tiny) & torch.isfinite(h)).sum()),
            "overflow": int((torch.isinf(h) & ~torch.isnan(g)).sum()), "nan": int(torch.isnan(g).sum())}


def values(t):
    t = t.detach()
    fin = torch.isfinite(t)
    return {"elements": t.numel(), "zero": int((t == 0).sum()),
            "subnormal": int(((t != 0) & (t.abs() < torch.finfo(t.dtype).tiny) & fin).sum()),
            "inf": int(torch.isinf(t).sum()), "nan": int(torch.isnan(t).sum()),
            "amax": float(t[fin].abs().max()) if fin.any() else 0.0}


@pytest.mark.parametrize("scale", [2.0**-20, 1.0, 2.0**24])
def test_gradient_counts_equal_torch_recount(scale):
    model, (x, y) = mlp(), batch()
    mon = Monitor(model, formats=("fp16", "bf16"), every=1)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    (loss * scale).backward()
    mon.after_backward(scale, loss=loss)
    mon.after_step(scale)
    st = mon.stats()
    assert set(st) == {n for n, _ in model.named_parameters()}
    for n, p in model.named_parameters():
        assert st[n]["fp16"] == recount(p.grad, torch.float16), n
        assert st[n]["bf16"] == recount(p.grad, torch.bfloat16), n
    total = {k: sum(st[n]["fp16"][k] for n in st) for k in ("underflow", "overflow")}
    if scale < 1:
        assert total["underflow"] > 0     # the small scale makes fp16 lose values
    if scale > 1:
        assert total["overflow"] > 0      # and the large one overflow it, where bf16 does not
        assert sum(st[n]["bf16"]["overflow"] for n in st) == 0


HALF = [torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.skipif(
    not TORCH2_3, reason="fp16 autocast on the CPU needs torch >= 2.3 (this is %s)" % torch.__version__))]


@pytest.mark.parametrize("dtype", HALF)
def test_activations_and_their_gradients_equal_torch_recount(dtype):
    model, (x, y) = mlp(1), batch(1)
    mon = Monitor(model, formats=("fp16", "bf16"), every=1)
    outs, grads = {}, {}
    for name, m in model.named_modules():
        def keep(mod, inp, out, name=name or "(model)"):
            outs[name] = out.detach().clone()
            out.register_hook(lambda g: grads.__setitem__(name, g.clone()))
        m.register_forward_hook(keep)
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
    loss = torch.nn.functional.cross_entropy(out.float(), y) * 2.0**-12  # small enough for fp16 subnormals
    loss.backward()
    mon.after_backward(1.0)
    mon.after_step(1.0)
    acts = mon.activations()
    assert set(acts) == set(outs) == {"(model)", "0", "1", "2", "3", "4"}
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    assert acts["0"]["dtype"] == name and acts["(model)"]["dtype"] == name and acts["0"]["grad"]["dtype"] == name
    for name in outs:
        a = acts[name]
        want = values(outs[name])
        assert {k: a[k] for k in want} == want, name
        assert a["headroom"]["fp16"] == pytest.approx(math.log2(65504 / want["amax"]))
        assert {k: a["grad"][k] for k in want} == values(grads[name]), name
    assert acts["3"]["zero"] > 0 and acts["2"]["grad"]["zero"] > 0  # ReLU zeros its output and its input's gradient
    if dtype == torch.float16:
        assert sum(a["grad"]["subnormal"] for a in acts.values()) > 0


def test_an_in_place_module_gets_its_own_outputs_gradient():
    """ReLU(inplace=True) overwrites the Linear's output: each module's gradient is still the one of its own
    output (torch 1.13 gives a tensor hook registered after an in-place change the earlier gradient)."""
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(inplace=True), torch.nn.Linear(32, 4))
    x, y = batch(11)
    h = model[0](x)
    h.retain_grad()
    r = torch.relu(h)
    r.retain_grad()
    torch.nn.functional.cross_entropy(model[2](r), y).backward()
    want = {"0": values(h.grad), "1": values(r.grad)}
    assert want["0"]["zero"] > want["1"]["zero"]  # ReLU zeros its input's gradient where it zeroed the value
    model.zero_grad()
    mon = Monitor(model, formats="fp16", every=1)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    mon.after_backward()
    mon.after_step()
    acts = mon.activations()
    for name in want:
        assert {k: acts[name]["grad"][k] for k in want[name]} == want[name], name


def test_a_leaf_passed_through_has_no_gradient_count():
    model = torch.nn.Sequential(torch.nn.Identity())
    mon = Monitor(model, formats="fp16", every=1)
    x = torch.ones(3, requires_grad=True)
    for _ in range(3):
        model(x).sum().backward()
        mon.after_backward()
        mon.after_step()
    acts = mon.activations()
    assert acts["0"]["elements"] == 3 and acts["0"]["grad"] is None and acts["(model)"]["grad"] is None


def test_every_records_only_every_nth_step():
    model = mlp(2)
    mon = Monitor(model, formats="fp16", every=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = {}
    for i in range(7):
        x, y = batch(i)
        opt.zero_grad()
        (torch.nn.functional.cross_entropy(model(x), y) * 2.0**-(6 * i)).backward()  # underflow grows
        grads[i] = {n: p.grad.clone() for n, p in model.named_parameters()}
        mon.after_backward(2.0**-(6 * i))
        opt.step()
        mon.after_step()
    h = mon.history()
    assert sorted(h) == [0, 3, 6]
    for s in h:
        assert h[s] == {n: {"fp16": recount(g, torch.float16)} for n, g in grads[s].items()}, s
    under = [sum(c["fp16"]["underflow"] for c in h[s].values()) for s in (0, 3, 6)]
    assert under[0] < under[1] < under[2]
    assert mon.stats() == h[6]
    assert mon.step == 7 and mon.skips() == []


def overflow_step(model, mon, scale, scaler=None):
    """One step whose gradients overflow in 0.weight only: input feature 0 is huge and its weight column 0,
    so the forward pass is finite and only d loss / d W0[:, 0] = dY * x0 overflows."""
    x, y = batch(5)
    x[:, 0] = 3e38
    with torch.no_grad():
        model[0].weight[:, 0] = 0
    loss = torch.nn.functional.cross_entropy(model(x), y)
    assert torch.isfinite(loss)
    if scaler is None:
        (loss * scale).backward()
        mon.after_backward(scale, loss=loss)
        mon.after_step(scale / 2)  # what a dynamic scaler does when it finds inf
    else:
        scaler.scale(loss).backward()
        mon.after_backward(scaler, loss=loss)
        scaler.step(opt := torch.optim.SGD(model.parameters(), lr=0.1))
        scaler.update()
        mon.after_step(scaler)


def test_forced_overflow_names_the_right_parameter():
    model = mlp(3)
    mon = Monitor(model, formats=("fp16", "bf16"), every=1)
    overflow_step(model, mon, 65536.0)
    sk = mon.skips()
    assert len(sk) == 1 and sk[0]["step"] == 0 and sk[0]["scale"] == 65536.0
    assert sk[0]["params"] == ["0.weight"]
    st = mon.stats()
    assert st["0.weight"]["fp16"]["overflow"] + st["0.weight"]["fp16"]["nan"] > 0  # inf, or inf - inf in a sum
    assert all(st[n]["fp16"]["overflow"] == st[n]["fp16"]["nan"] == 0 for n in st if n != "0.weight")


@pytest.mark.skipif(not TORCH2_3, reason="torch.amp.GradScaler on the CPU needs torch >= 2.3 (this is %s)"
                    % torch.__version__)
def test_forced_overflow_with_a_grad_scaler():
    model = mlp(3)
    scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
    mon = Monitor(model, formats="fp16", every=1)
    overflow_step(model, mon, None, scaler)
    assert scaler.get_scale() == 32768.0
    sk = mon.skips()
    assert len(sk) == 1 and sk[0]["scale"] == 65536.0 and sk[0]["params"] == ["0.weight"]


def shadow_reference(model, x, y, dtype, scale):
    """The shadow pass by hand: the mixed run's gradient of the model's output, pushed back through the model
    in fp32."""
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
    out.retain_grad()
    (torch.nn.functional.cross_entropy(out.float(), y) * scale).backward()
    mixed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    out32 = model(x)
    g32 = torch.autograd.grad(out32, list(model.parameters()), out.grad.float())
    model.zero_grad()
    return mixed, {n: g for (n, _), g in zip(model.named_parameters(), g32)}


def shadow_case(dtype, scale):
    model, (x, y) = mlp(4), batch(4)
    mixed, g32 = shadow_reference(model, x, y, dtype, scale)
    mon = Monitor(model, formats=("fp16",), every=1, shadow=True)
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
    (torch.nn.functional.cross_entropy(out.float(), y) * scale).backward()
    for n, p in model.named_parameters():
        assert torch.equal(p.grad, mixed[n])  # the same run, and the hooks change nothing
    mon.after_backward(scale)
    mon.after_step(scale)
    lost = mon.lost()
    total_lost = 0
    for n, p in model.named_parameters():
        want = {"total": p.numel(), "lost": int(((g32[n] != 0) & (p.grad == 0)).sum()), "dead": int((g32[n] == 0).sum())}
        assert {k: lost[n][k] for k in want} == want, n
        ok = (g32[n] != 0) & torch.isfinite(g32[n]) & torch.isfinite(p.grad.float())
        d = (p.grad.float() - g32[n].float())[ok]
        assert math.isclose(lost[n]["mse"], (d / scale).pow(2).mean().item(), rel_tol=1e-4, abs_tol=1e-30), n
        assert math.isclose(lost[n]["max_relative"], (d.abs() / g32[n].float()[ok].abs()).max().item(),
                            rel_tol=1e-4), n
        total_lost += want["lost"]
    return total_lost


def test_shadow_bf16_counts_values_lost_in_the_mixed_run():
    # a tiny loss scale: the bf16 products flush where fp32 keeps subnormal gradients
    assert shadow_case(torch.bfloat16, 2.0**-126) > 0


@pytest.mark.skipif(not TORCH2_3, reason="fp16 autocast on the CPU needs torch >= 2.3 (this is %s)" % torch.__version__)
def test_shadow_fp16_counts_values_lost_in_the_mixed_run():
    assert shadow_case(torch.float16, 2.0**-14) > 0


def shadow_check(model, run, scale=2.0**-126):
    """run(model) -> the loss, under bf16 autocast, the same inputs each call. The monitor's lost() against the
    shadow pass by hand: the mixed step, then the fp32 step from the same RNG state; and the monitor leaves the
    run's RNG and buffers as they were without it."""
    twin = __import__("copy").deepcopy(model)
    rng = torch.get_rng_state()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = run(twin)
    (loss * scale).backward()
    mixed = {n: p.grad.clone() for n, p in twin.named_parameters()}
    rng_after, buffers = torch.get_rng_state(), {n: b.clone() for n, b in twin.named_buffers()}
    torch.set_rng_state(rng)
    g32 = torch.autograd.grad(run(twin) * scale, list(twin.parameters()))

    torch.set_rng_state(rng)
    mon = Monitor(model, formats="fp16", every=1, shadow=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = run(model)
    (loss * scale).backward()
    mon.after_backward(scale)
    mon.after_step(scale)
    assert torch.equal(torch.get_rng_state(), rng_after)
    for n, b in model.named_buffers():
        assert torch.equal(b, buffers[n]), n
    lost = mon.lost()
    for (n, p), g in zip(model.named_parameters(), g32):
        assert torch.equal(p.grad, mixed[n]), n
        assert {k: lost[n][k] for k in ("total", "lost", "dead")} == {
            "total": p.numel(), "lost": int(((g != 0) & (mixed[n] == 0)).sum()), "dead": int((g == 0).sum())}, n
    return sum(v["lost"] for v in lost.values())


def test_shadow_with_dropout_and_batch_norm_replays_the_step():
    torch.manual_seed(12)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.GELU(),
                                torch.nn.Dropout(0.5), torch.nn.Linear(32, 4))
    x, y = batch(12)
    assert shadow_check(model, lambda m: torch.nn.functional.cross_entropy(m(x).float(), y)) > 0


class Keywords(torch.nn.Module):
    """Keyword arguments, and two outputs made by one autograd node (torch.chunk)."""

    def __init__(self):
        super().__init__()
        self.net = mlp(13)

    def forward(self, x, *, shift=None):
        return (self.net(x) + shift).chunk(2, dim=1)


def test_shadow_takes_keyword_arguments_and_outputs_of_one_node():
    model, (x, y) = Keywords(), batch(13)
    shift = torch.randn(4)

    def run(m):
        a, b = m(x, shift=shift)
        return torch.nn.functional.cross_entropy(torch.cat([a, b * 3], dim=1).float(), y)
    assert shadow_check(model, run) > 0


class Pair(__import__("collections").namedtuple("Pair", "x shift")):
    pass


class TakesPair(torch.nn.Module):
    """A namedtuple argument (as a batch object or a PackedSequence arrives)."""

    def __init__(self):
        super().__init__()
        self.net = mlp(16)

    def forward(self, p):
        return self.net(p.x) + p.shift


def test_shadow_takes_a_namedtuple_and_ignores_a_no_grad_forward():
    model, (x, y) = TakesPair(), batch(16)
    shift = torch.randn(4)

    def run(m):
        loss = torch.nn.functional.cross_entropy(m(Pair(x, shift)).float(), y)
        with torch.no_grad():
            m(Pair(x, shift))  # an evaluation between the forward and after_backward: not the step's
        return loss
    assert shadow_check(model, run) > 0


def test_a_copy_of_a_monitored_model_computes_with_its_own_weights():
    model, (x, _) = mlp(17), batch(17)
    mon = Monitor(model, formats="fp16", every=1, shadow=True)
    twin = __import__("copy").deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.zero_()
    assert torch.equal(twin(x), torch.zeros(64, 4)) and not torch.equal(model(x), torch.zeros(64, 4))
    mon.close()
    assert "forward" not in model.__dict__


def test_monitor_as_a_context_manager_removes_its_hooks_however_the_block_ends():
    model, (x, y) = mlp(18), batch(18)
    with pytest.raises(RuntimeError, match="the loop failed"):
        with Monitor(model, formats="fp16", every=1, shadow=True) as mon:
            assert any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()) or "forward" in model.__dict__
            torch.nn.functional.cross_entropy(model(x), y).backward()
            raise RuntimeError("the loop failed")
    assert "forward" not in model.__dict__
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(not p._backward_hooks for p in model.parameters() if p._backward_hooks is not None)
    mon.close()  # a second close does nothing


def test_shadow_refuses_gradient_accumulation():
    model = mlp(14)
    mon = Monitor(model, formats="fp16", every=1, shadow=True)
    for i in range(2):
        x, y = batch(i)
        torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(MixprecError, match="2 forward passes with gradients.*accumulation"):
        mon.after_backward()
    mon.after_step()
    assert mon.stats()["0.weight"]["fp16"]["total"] == 16 * 32  # the counts before the shadow pass stand


def test_bad_use_is_a_clear_error():
    with pytest.raises(TypeError, match=r"watches a torch.nn.Module \(model\), not NoneType"):
        Monitor(None)
    with pytest.raises(ValueError, match="formats: unknown .*fp7"):
        Monitor(mlp(), formats=("fp7",))
    with pytest.raises(ValueError, match="every must be an integer >= 1, not 0"):
        Monitor(mlp(), every=0)
    mon = Monitor(mlp())
    with pytest.raises(ValueError, match="loss scale"):
        mon.after_backward(float("nan"))
    with pytest.raises(MixprecError, match="before after_backward"):
        mon.after_step()
    with pytest.raises(MixprecError, match="no step recorded"):
        mon.stats()


def train(model, mon, steps, dtype=torch.bfloat16):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i in range(steps):
        x, y = batch(i)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        scale = 2.0**-100 if i % 4 == 2 else 1.0
        (loss * scale).backward()
        mon.after_backward(scale, loss=loss)
        opt.step()
        mon.after_step(scale)


def test_report_holds_the_monitors_figures(tmp_path):
    model = mlp(6)
    mon = Monitor(model, formats=("fp16", "bf16"), every=2)
    train(model, mon, 12)
    overflow_step(model, mon, 65536.0)
    path = tmp_path / "report.html"
    assert mon.report(path) == path
    html = path.read_text()
    for name in ("0", "2", "4"):
        assert 'data-tensor="%s"' % name in html
    assert "inf/NaN in the gradients of 0.weight; first overflowing activation" not in html  # no activation overflowed
    assert "<td>12</td><td>65536</td><td>inf/NaN in the gradients of 0.weight</td>" in html
    # the summary row: 13 steps, 1 skipped; weight gradients lost = fp16 underflow over the recorded steps
    h = mon.history()
    lost = sum(c["fp16"]["underflow"] for s in h.values() for n, c in s.items() if n.endswith(("weight", "bias")))
    total = sum(c["fp16"]["total"] for s in h.values() for c in s.values())
    assert lost > 0
    assert "<td class=\"under\">%.4f%%</td>" % (100 * lost / total) in html
    assert 'id="heatmap-pytorch-bf16"' in html and 'id="headroom"' in html and 'id="histogram"' in html
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.skip("chromium is not installed (scripts/deps.sh installs it): the report was not rendered")
    shot = tmp_path / "shot.png"
    run = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--enable-logging=stderr", "--v=0", "--window-size=1100,2600", "--screenshot=%s" % shot,
                          path.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20000, run.stderr[-500:]  # as tests/test_report.sh
    for bad in ("CONSOLE", "Uncaught", "SyntaxError"):
        assert bad not in run.stderr


def test_report_escapes_module_names(tmp_path):
    model = torch.nn.Sequential()
    model.add_module("<script>alert('x')</script>", torch.nn.Linear(16, 4))
    mon = Monitor(model, formats="fp16", every=1)
    train(model, mon, 2, dtype=torch.bfloat16)
    html = mon.report(tmp_path / "r.html").read_text()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html and "<script>alert" not in html


def test_report_after_a_failed_shadow_pass(tmp_path):
    model = mlp(15)
    mon = Monitor(model, formats="fp16", every=1, shadow=True)
    x, y = batch(15)
    for _ in range(2):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(MixprecError, match="accumulation"):
        mon.after_backward()
    mon.after_step()
    html = mon.report(tmp_path / "r.html").read_text()
    assert 'id="histogram"' in html  # of the run's gradients, the shadow's being lost


def test_report_files_are_never_half_written(tmp_path):
    model = mlp(7)
    mon = Monitor(model, every=1)
    with pytest.raises(MixprecError, match="no step recorded"):
        mon.report(tmp_path / "r.html")
    train(model, mon, 2)
    with pytest.raises(MixprecError, match="cannot create"):
        mon.report(tmp_path / "missing" / "r.html")
    with pytest.raises(TypeError, match="path is a file name .*not NoneType"):
        mon.report(None)
    with pytest.raises(MixprecError, match="is a directory, not a regular file"):
        mon.report(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_close_removes_the_hooks():
    model = mlp(8)
    mon = Monitor(model, every=1)
    mon.close()
    train(model, mon, 1)
    assert mon.activations() == {}


class WithLoss(torch.nn.Module):
    """A model that returns its loss too (as nanoGPT's does): the logits get their gradient through it."""

    def __init__(self):
        super().__init__()
        self.net = mlp(9)

    def forward(self, x, y):
        logits = self.net(x)
        return logits, torch.nn.functional.cross_entropy(logits.float(), y)


def test_shadow_of_a_model_that_returns_its_loss_is_the_fp32_step():
    model, (x, y) = WithLoss(), batch(9)
    scale = 2.0**-126
    mon = Monitor(model, formats="fp16", every=1, shadow=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(x, y)
    (loss * scale).backward()
    mixed = {n: p.grad.clone() for n, p in model.named_parameters()}
    mon.after_backward(scale)
    mon.after_step(scale)
    _, loss32 = model(x, y)
    g32 = torch.autograd.grad(loss32 * scale, list(model.parameters()))
    lost = mon.lost()
    assert sum(v["lost"] for v in lost.values()) > 0
    for (n, p), g in zip(model.named_parameters(), g32):
        assert {k: lost[n][k] for k in ("total", "lost", "dead")} == {
            "total": p.numel(), "lost": int(((g != 0) & (mixed[n] == 0)).sum()), "dead": int((g == 0).sum())}, n


def bf16_after_backward(seed):
    """A bf16 MLP, its monitor and SGD after one backward; the weights before the step."""
    model, (x, y) = mlp(seed).to(torch.bfloat16), batch(seed)
    mon = Monitor(model, formats="fp16", every=1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.nn.functional.cross_entropy(model(x.to(torch.bfloat16)).float(), y).backward()
    return model, mon, opt, {n: p.detach().clone() for n, p in model.named_parameters()}


def test_updates_lost_in_a_bf16_model_equal_a_recount():
    model, mon, opt, before = bf16_after_backward(10)
    mon.after_backward()
    opt.step()
    mon.after_step()
    ups = mon.updates()
    for n, p in model.named_parameters():
        moved = (p.grad != 0) & torch.isfinite(p.grad)
        assert ups[n] == {"updated": int(moved.sum()), "lost": int((moved & (p == before[n])).sum())}, n
    assert sum(u["lost"] for u in ups.values()) > 0  # lr * g is below half a bf16 ulp of many weights


# ---- the loops people write ----

GRADSCALER = pytest.mark.skipif(not TORCH2_3, reason="torch.amp.GradScaler on the CPU needs torch >= 2.3 (this is %s)"
                                % torch.__version__)


def scaled_step(model, scaler, opt, mon, unscale_first, seed=20):
    """One GradScaler step whose fp16 counts are not all zero (a small loss: fp16 underflows and subnormals at
    scale 2^16), with after_backward before or after scaler.unscale_ and clipping."""
    x, y = batch(seed)
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y) * 2.0**-24
    scaler.scale(loss).backward()
    if unscale_first:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e30)  # clips nothing: the gradients times 1.0
        mon.after_backward(scaler, loss=loss)
    else:
        mon.after_backward(scaler, loss=loss)
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e30)
    scaler.step(opt)
    scaler.update()
    mon.after_step(scaler)


@GRADSCALER
def test_after_backward_before_or_after_unscale_gives_the_same_counts():
    runs = []
    for unscale_first in (False, True):
        model = mlp(20)
        scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mon = Monitor(model, formats=("fp16", "bf16"), every=1)
        for i in range(2):
            scaled_step(model, scaler, opt, mon, unscale_first, seed=20 + i)
        runs.append((mon, model))
    (a, _), (b, model) = runs
    h = a.history()
    assert h == b.history() and sorted(h) == [0, 1]
    assert sum(c["fp16"]["underflow"] for c in h[1].values()) > 0
    assert sum(c["fp16"]["subnormal"] for c in h[1].values()) > 0
    assert a._history[1]["hist"] == b._history[1]["hist"] and b._history[1]["carried"] == 1.0
    assert a.updates() == b.updates() and sum(u["updated"] for u in a.updates().values()) > 0


@GRADSCALER
def test_after_backward_names_the_call_order_it_cannot_count():
    model = mlp(21)
    scaler = torch.amp.GradScaler("cpu")
    opt, other = torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.SGD(model[2].parameters(), lr=0.1)
    mon = Monitor(model, formats="fp16", every=1)
    x, y = batch(21)
    scaler.scale(torch.nn.functional.cross_entropy(model(x), y)).backward()
    scaler.unscale_(opt)
    scaler._per_optimizer_states[id(other)]  # a second optimizer the scaler serves, not unscaled
    with pytest.raises(MixprecError, match="some of this scaler's optimizers.*optimizer=opt"):
        mon.after_backward(scaler)
    mon.after_backward(scaler, optimizer=opt)
    assert mon._rec["carried"] == 1.0
    scaler.step(opt)
    with pytest.raises(MixprecError, match="after scaler.step.*before scaler.step"):
        mon.after_backward(scaler)


def overflow_at_step_1(model, i):
    """The loss of step i of mlp(3) on batch(5); at step 1 an input of 3e38 whose weights are zeroed (the
    forward stays finite), so that the gradient of 0.weight overflows."""
    x, y = batch(5)
    if i == 1:
        x[:, 0] = 3e38
        with torch.no_grad():
            model[0].weight[:, 0] = 0
    return torch.nn.functional.cross_entropy(model(x), y)


def skip_with_zeroed_grads(every, set_to_none):
    """Steps of a loop that zeroes the gradients before after_step (nanoGPT: zero_grad(set_to_none=True) right
    after scaler.update()); step 1 overflows in 0.weight."""
    model = mlp(3)
    mon = Monitor(model, formats="fp16", every=every)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        loss = overflow_at_step_1(model, i)
        (loss * 1024.0).backward()
        mon.after_backward(1024.0, loss=loss)
        opt.zero_grad(set_to_none=set_to_none)
        mon.after_step(512.0 if i == 1 else 1024.0)
    return mon


@pytest.mark.parametrize("every", [1, 2])
def test_a_skipped_step_is_named_after_the_gradients_were_set_to_none(every, tmp_path):
    mon = skip_with_zeroed_grads(every, set_to_none=True)
    assert [(s["step"], s["params"]) for s in mon.skips()] == [(1, ["0.weight"])]
    assert "inf/NaN in the gradients of 0.weight" in mon.report(tmp_path / "r.html").read_text()


def test_a_skip_the_monitor_could_not_see_is_not_called_clean(tmp_path):
    mon = skip_with_zeroed_grads(2, set_to_none=False)  # step 1 unrecorded, its gradients zeroed in place
    assert [(s["step"], s["params"]) for s in mon.skips()] == [(1, None)]
    html = mon.report(tmp_path / "r.html").read_text()
    assert "no inf/NaN" not in html and "were not seen" in html


def test_updates_after_the_gradients_were_set_to_none():
    model, mon, opt, before = bf16_after_backward(22)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    mon.after_backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    mon.after_step()
    ups = mon.updates()
    assert set(ups) == set(grads)
    for n, p in model.named_parameters():
        moved = (grads[n] != 0) & torch.isfinite(grads[n])
        assert ups[n] == {"updated": int(moved.sum()), "lost": int((moved & (p == before[n])).sum())}, n
    assert sum(u["lost"] for u in ups.values()) > 0


def test_evaluation_forwards_are_not_the_steps_activations():
    x, y = batch(23)
    runs = []
    for evaluate in (False, True):
        model = mlp(23)
        mon = Monitor(model, formats="fp16", every=1)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if evaluate:
            with torch.no_grad():
                model(x)
            with torch.inference_mode():
                model(x)
            model.eval()
            model(x[:7]).sum()  # gradients on, but in eval mode
            model.train()
        loss.backward()
        mon.after_backward()
        mon.after_step()
        runs.append(mon.activations())
    assert runs[0] == runs[1]
    assert runs[1]["0"]["elements"] == 64 * 32 and runs[1]["(model)"]["elements"] == 64 * 4


def test_a_nonfinite_loss_without_a_scaler_is_reported(tmp_path):
    model = mlp(24)
    mon = Monitor(model, formats="fp16", every=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    with pytest.warns(RuntimeWarning, match="step 3 was not skipped and its loss is nan"):
        for i in range(5):
            x, y = batch(i)
            if i == 3:
                x[0, 0] = math.nan
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            loss.backward()
            mon.after_backward(loss=loss)
            opt.step()
            mon.after_step()
            losses.append(float(loss.detach()))
    assert [s["step"] for s in mon.nonfinite()] == [3, 4]  # NaN weights after step 3
    assert mon.nonfinite()[1]["params"] == [n for n, _ in model.named_parameters()]  # step 4 was recorded
    assert mon.skips() == []
    html = mon.report(tmp_path / "r.html").read_text()
    assert "2 steps were not skipped with inf/NaN in their loss or gradients" in html
    assert "NaN/inf" in html  # the final train loss is step 4's, not the last finite one


def test_inf_gradients_without_a_scaler_name_the_parameter():
    model = mlp(3)
    mon = Monitor(model, formats="fp16", every=1)
    with pytest.warns(RuntimeWarning, match="step 1 was not skipped and inf/NaN in the gradients of 0.weight"):
        overflow_step(model, mon, 65536.0)  # ends with after_step(32768): a skip
        assert mon.nonfinite() == []
        x, y = batch(5)
        x[:, 0] = 3e38
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss * 65536.0).backward()  # a static loss scale: nothing skips the step
        mon.after_backward(65536.0, loss=loss)
        mon.after_step(65536.0)
    assert mon.nonfinite() == [{"step": 1, "loss": float(loss.detach()), "params": ["0.weight"]}]


# ---- nothing on the steps it does not record ----

def hooked(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_only_for_recorded_steps():
    model = mlp(25)
    mon = Monitor(model, formats="fp16", every=3, shadow=True)
    seen = []
    for i in range(7):
        seen.append(hooked(model) > 0)
        # before a recorded step's forward, one pre-hook on the root (the step before pays for one hook only);
        # the modules' hooks come with the forward
        if seen[-1]:
            assert len(model._forward_pre_hooks) == 1 and all(not m._forward_hooks for m in model.modules())
        x, y = batch(i)
        model.zero_grad()
        out = model(x)
        assert all(len(m._forward_hooks) >= 1 for m in model.modules()) == seen[-1]
        torch.nn.functional.cross_entropy(out, y).backward()
        mon.after_backward()
        assert hooked(model) == 0
        mon.after_step()
    assert seen == [True, False, False, True, False, False, True]
    assert sorted(mon.history()) == [0, 3, 6] and set(mon.activations()) == {"(model)", "0", "1", "2", "3", "4"}
    mon.close()
    assert hooked(model) == 0


def test_losses_given_as_tensors_are_read_together_and_a_nan_one_is_still_named():
    """On unrecorded steps a loss tensor is kept (detached) and read with the others: at the next recorded or
    skipped step, after 16 steps at most, or when asked (nonfinite(), to_json(), report())."""
    model = mlp(27)
    mon = Monitor(model, formats="fp16", every=1000)  # records step 0 only
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, warned_at = [], None
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(30):
            x, y = batch(i)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss = loss * math.nan if i == 5 else loss
            loss.backward()
            mon.after_backward(1.0, loss=loss)
            opt.step()
            mon.after_step(1.0)
            if w and warned_at is None:
                warned_at = i
            losses.append(float(loss.detach()))
    assert [str(m.message)[:51] for m in w] == ["mixprec: step 5 was not skipped and its loss is nan"]
    assert w[0].filename == __file__  # the warning points at the loop's after_step
    assert 5 <= warned_at <= 5 + 16
    got = [s["loss"] for s in mon.to_json()["steps"]]
    assert got[:5] == losses[:5] and all(math.isnan(v) for v in losses[5:]) and got[5:] == [None] * 25
    assert [s["step"] for s in mon.nonfinite()] == list(range(5, 30))
    assert all(math.isnan(s["loss"]) and s["params"] == [] for s in mon.nonfinite())


def test_a_scalers_scale_is_read_again_when_it_changes():
    """A GradScaler's scale is read once per update (its tensor's version): a scale set between steps
    (scaler.update(new_scale)) is the one after_backward sees."""
    class Scaler:  # torch.amp.GradScaler's fields the monitor reads, without its CPU version (torch >= 2.3)
        _enabled, _per_optimizer_states = True, {}

        def __init__(self):
            self._scale = torch.full((), 1024.0)

        def get_scale(self):
            return self._scale.item()
    model, s = mlp(28), Scaler()
    mon = Monitor(model, formats="fp16", every=1000)
    for i in range(4):
        x, y = batch(i)
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss * s.get_scale()).backward()
        mon.after_backward(s, loss=loss)
        if i == 1:
            s._scale.fill_(512.0)  # a backoff at update(): step 1 skipped
        mon.after_step(s)
        if i == 2:
            s._scale.fill_(4096.0)  # set by hand between the steps: step 3 is scaled by it
    assert [(k["step"], k["scale"]) for k in mon.skips()] == [(1, 1024.0)]
    assert [st["scale"] for st in mon.to_json()["steps"]] == [1024.0, 1024.0, 512.0, 4096.0]

@pytest.mark.skipif(not hasattr(torch, "compile"), reason="no torch.compile in torch %s" % torch.__version__)
def test_a_compiled_model_has_no_graph_break_and_its_recorded_steps_are_counted():
    import torch._dynamo
    from torch._dynamo.testing import CompileCounterWithBackend
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = mlp(26)
    twin = __import__("copy").deepcopy(model)
    cnt = CompileCounterWithBackend("aot_eager")  # Dynamo's graphs, no C++ compiler needed
    compiled = torch.compile(model, backend=cnt)
    mon, ref = Monitor(compiled, formats="fp16", every=10), Monitor(twin, formats="fp16", every=10)
    for i in range(12):
        x, y = batch(i)
        for m, mo in ((compiled, mon), (twin, ref)):
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            mo.after_backward(loss=loss)
            mo.after_step()
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}
    assert cnt.frame_count == 1  # one graph, without hooks, for steps 1-9 and 11
    assert sorted(mon.history()) == [0, 10] and mon.activations() == ref.activations() and mon.stats() == ref.stats()
    assert set(mon.activations()) == {"(model)", "0", "1", "2", "3", "4"}  # the original's names
    mon.close()
    mon = Monitor(compiled, formats="fp16", every=5)  # step 0 recorded: compiled runs eagerly to after_backward
    torch.compile(torch.nn.Linear(16, 3), backend=cnt)(x)  # another compiled module meanwhile: compiled as ever
    assert cnt.frame_count == 2
    compiled(x)
    assert cnt.frame_count == 2 and hooked(model) > 0
    mon.close()
    compiled(x)
    assert cnt.frame_count == 2 and hooked(model) == 0  # the graph of steps 1-9 again
    with pytest.warns(RuntimeWarning, match="give Monitor the module torch.compile returned"):
        plain = Monitor(model, formats="fp16", every=1)  # the compiled module runs without its hooks
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
        plain.after_backward()
    torch._dynamo.reset()


# ---- the counts by torch's operations (the path of a GPU's tensors) equal libmixprec's ----

@np.errstate(over="ignore")
def neighbours(v):
    v = np.float32(v)
    lo, hi = np.nextafter(v, np.float32(0)), np.nextafter(v, np.float32(np.inf))
    return [np.nextafter(lo, np.float32(0)), lo, v, hi, np.nextafter(hi, np.float32(np.inf))]


@np.errstate(over="ignore")
def thresholds():
    """fp32 values at and around every limit of fp16, bf16, e4m3 and e5m2 (and fp32's own): the smallest
    subnormal, half of it (a tie to 0), the smallest normal and the tie below it, the largest finite value and
    the tie above it (overflow), both signs, zeros, infinities and NaN."""
    from mixprec._lib import lib, dtype_code
    vals = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0]
    for f in ("fp16", "bf16", "e4m3", "e5m2", "fp32"):
        fm = lib.mp_format(dtype_code(f)).contents
        sub, nrm, mx = float(fm.min_subnormal), float(fm.min_normal), float(fm.max)
        ulp = mx - float(np.nextafter(np.float32(mx), np.float32(0))) if f == "fp32" else None
        for v in (sub, sub / 2, sub * 1.5, nrm, nrm - sub / 2, mx, mx * (1 + 2.0**-12), mx * 1.0625, mx * 1.125,
                  ulp or mx):
            if np.isfinite(np.float32(v)):
                vals += neighbours(v)
    x = np.array(vals, dtype=np.float32)
    return torch.from_numpy(np.concatenate([x, -x]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_counts_equal_libmixprec_at_every_threshold(dtype):
    from mixprec.torch import _Counter, _Pending
    from mixprec._lib import dtype_code
    codes = [dtype_code(f) for f in ("fp16", "bf16", "e4m3", "e5m2", "fp32")]
    x = thresholds().to(dtype)
    lib_count, torch_count = _Counter(codes, False), _Counter(codes, True)
    for scale in (1.0, 2.0**16, 2.0**-20, 3.0):
        for shift in (0, 16):
            got = {}
            for name, c in (("lib", lib_count), ("torch", torch_count)):
                p = _Pending()
                p.add(c(x, store=True, scale=scale, hist=True, shift=shift),
                      lambda v, name=name: got.__setitem__(name, v))
                p.read()
            assert got["lib"] == got["torch"], (scale, shift)
    c = lib_count(x, store=True)  # and both equal what torch's own casts do
    assert c[5:13] == [recount(x, torch.float16)[k] for k in ("underflow", "subnormal", "overflow", "nan")] + \
        [recount(x, torch.bfloat16)[k] for k in ("underflow", "subnormal", "overflow", "nan")]
    assert min(c[5:13]) > 0 or dtype != torch.float32


def monitored_run(counts, dtype, shadow):
    model = mlp(27)
    mon = Monitor(model, formats=("fp16", "bf16", "e4m3", "e5m2"), every=2, shadow=shadow, counts=counts)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        x, y = batch(i)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        (loss * 2.0**-18).backward()
        mon.after_backward(2.0**-18, loss=loss)
        opt.step()
        mon.after_step(2.0**-18)
    return mon


@pytest.mark.parametrize("dtype", HALF)
def test_torch_counts_equal_libmixprec_on_real_gradients(dtype):
    a, b = monitored_run("auto", dtype, True), monitored_run("torch", dtype, True)
    assert a.history() == b.history() and a.activations() == b.activations() and a.lost() == b.lost()
    assert a.updates() == b.updates() and a._history[2]["hist"] == b._history[2]["hist"]
    assert sum(v["grad"]["subnormal"] + v["grad"]["zero"] for v in a.activations().values()) > 0
    assert sum(c[f]["underflow"] + c[f]["subnormal"] for c in a.stats().values() for f in ("fp16", "e4m3", "e5m2")) > 0
    with pytest.raises(ValueError, match="counts"):
        Monitor(mlp(), counts="gpu")


@GRADSCALER
def test_a_grad_scaler_skip_after_zero_grad_set_to_none_as_nanogpt():
    model = mlp(3)
    scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = Monitor(model, formats="fp16", every=2)
    for i in range(3):  # step 1, unrecorded, overflows in 0.weight
        loss = overflow_at_step_1(model, i)
        scaler.scale(loss).backward()
        mon.after_backward(scaler, loss=loss)
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        mon.after_step(scaler)
    assert [(s["step"], s["scale"], s["params"]) for s in mon.skips()] == [(1, 65536.0, ["0.weight"])]
    assert sorted(mon.history()) == [0, 2] and mon.updates() != {} and mon.nonfinite() == []


def one_step(mon, model, seed=0, n=64):
    x, y = batch(seed, n)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    mon.after_backward(1.0, loss=loss)
    mon.after_step(1.0)
    model.zero_grad()


def test_a_replaced_added_or_removed_module_is_watched_as_the_model_is_now(tmp_path):
    """The monitor reads the model's parameters and modules again on each step: a change is a warning naming
    it, and the next recorded step counts the current parameters' gradients and the current modules' outputs
    (the new Linear's own gradient, not the replaced one's, which no longer gets any)."""
    model = mlp(5)
    mon = Monitor(model, formats="fp16", every=1)
    one_step(mon, model)
    old = model[4]
    model[4] = torch.nn.Linear(32, 4)  # replaced, after the hooks of the next step were attached
    with pytest.warns(RuntimeWarning, match=r"step 1: the model changed .*parameters replaced: 4\.weight, 4\.bias; "
                                            r"module replaced: 4\)"):
        one_step(mon, model, 1)
    assert old.weight.grad is None or not old.weight.grad.any()
    st = mon.stats()
    assert set(st) == {n for n, _ in model.named_parameters()}
    assert st["4.weight"]["fp16"] == {"total": 128, "underflow": 0, "subnormal": 0, "overflow": 0, "nan": 0}
    assert mon.history()[1]["4.weight"]["fp16"]["total"] == 128

    model.add_module("5", torch.nn.Linear(4, 4))  # added: its output and its parameters' gradients
    with pytest.warns(RuntimeWarning, match=r"parameters added: 5\.weight, 5\.bias; module added: 5\)"):
        one_step(mon, model, 2)
    st, acts = mon.stats(), mon.activations()
    assert st["5.weight"]["fp16"]["total"] == 16 and st["5.bias"]["fp16"]["total"] == 4
    assert acts["5"]["elements"] == 64 * 4 and acts["5"]["grad"]["elements"] == 64 * 4

    del model[1]  # removed: Sequential renumbers, so 1..4 are replaced by the next ones and 5 is gone
    with pytest.warns(RuntimeWarning, match=r"parameters removed: 2\.weight, 2\.bias, 5\.weight, 5\.bias; "
                                            r".*module removed: 5;"):
        one_step(mon, model, 3)
    st, acts = mon.stats(), mon.activations()
    assert set(st) == {n for n, _ in model.named_parameters()} == {"0.weight", "0.bias", "1.weight", "1.bias",
                                                                   "3.weight", "3.bias", "4.weight", "4.bias"}
    assert "5" not in acts and set(acts) == {"(model)", "0", "1", "2", "3", "4"}
    assert st["4.weight"]["fp16"]["total"] == 16

    with warnings_as_errors():  # no change, no warning
        one_step(mon, model, 4)
    mon.report(tmp_path / "r.html")  # the removed layer's recorded steps stay in the report
    page = (tmp_path / "r.html").read_text()
    assert all('data-tensor="%s"' % n in page for n in ("0", "1", "3", "4", "5"))


def test_a_module_changed_between_unrecorded_steps_is_read_on_the_next_recorded_one():
    model = mlp(6)
    mon = Monitor(model, formats=("fp16",), every=2)
    one_step(mon, model)
    model.add_module("5", torch.nn.Linear(4, 4))
    # step 1 is not recorded: the model is read again as the forward of step 2, recorded, begins
    with warnings_as_errors():
        one_step(mon, model, 1)
    with pytest.warns(RuntimeWarning, match=r"step 2: .*module added: 5") as w:
        one_step(mon, model, 2)
    assert len(w) == 1
    assert mon.stats()["5.weight"]["fp16"]["total"] == 16 and mon.activations()["5"]["elements"] == 256


class warnings_as_errors:
    def __enter__(self):
        import warnings
        self.cm = warnings.catch_warnings()
        self.cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


def test_a_replaced_parameter_is_counted_and_a_frozen_one_is_left_out_without_a_warning():
    model = mlp(7)
    mon = Monitor(model, formats=("fp16",), every=1)
    one_step(mon, model)
    old = model[0].weight
    model[0].weight = torch.nn.Parameter(old.detach() * 2.0**-10)  # a new object: the old one gets no gradient
    x, y = batch(1)
    with pytest.warns(RuntimeWarning, match=r"step 1: .*\(parameter replaced: 0\.weight\)"):  # as the forward begins
        torch.nn.functional.cross_entropy(model(x), y).backward()
    mon.after_backward(2.0**-14)
    mon.after_step(2.0**-14)
    assert old.grad is None or not old.grad.any()
    assert mon.stats()["0.weight"]["fp16"] == recount(model[0].weight.grad, torch.float16)
    assert mon.stats()["0.weight"]["fp16"]["total"] == 16 * 32
    model.zero_grad()
    model[0].bias.requires_grad_(False)
    with warnings_as_errors():
        one_step(mon, model, 2)
    assert set(mon.stats()) == {n for n, p in model.named_parameters() if p.requires_grad} and "0.bias" not in \
        mon.stats()


def test_the_overflow_trap_stops_at_the_first_inf_of_a_forward(tmp_path):
    model, (x, _) = mlp(30), batch(30)
    mon = Monitor(model, formats="fp16", every=2, trap=tmp_path / "trap.html")
    one_step(mon, model, 30)  # step 0, recorded
    with torch.no_grad():
        model[2].weight.fill_(3e38)  # its outputs overflow fp32
    with pytest.raises(MixprecOverflow) as e:
        model(x)  # step 1, not recorded: trapped too
    msg = str(e.value)
    assert msg.startswith("mixprec: trap at step 1, the forward of 2 (Linear): its output 0 (")
    assert "0 (Linear): inputs [" in msg and "1 (GELU)" in msg and "2 (Linear): inputs" in msg and "inf/NaN" in msg
    assert (tmp_path / "trap.html").read_text().startswith("<!DOCTYPE html>")
    assert all(not m._forward_hooks for m in model.modules())  # closed


def test_the_overflow_trap_stops_at_the_first_inf_of_a_gradient():
    model, (x, _) = mlp(31), batch(31)
    mon = Monitor(model, formats="fp16", every=1, trap=True)
    out = model(x)
    with pytest.raises(MixprecOverflow, match=r"the backward of 4 \(Linear\): the gradient of its output 0"):
        out.backward(torch.full_like(out, float("inf")))
    mon.close()


def test_without_the_trap_an_inf_passes():
    model, (x, _) = mlp(30), batch(30)
    with torch.no_grad():
        model[2].weight.fill_(3e38)
    with Monitor(model, formats="fp16", every=10):
        assert not torch.isfinite(model(x)).all()


def test_to_json_and_the_step_log_hold_every_recorded_step(tmp_path):
    import json
    model = mlp(40)
    with Monitor(model, formats=("fp16", "bf16"), every=2, log=tmp_path / "steps.jsonl") as mon:
        for i in range(5):
            one_step(mon, model, 40 + i)
        j = mon.to_json(tmp_path / "all.json")
        assert [s["step"] for s in j["recorded"]] == [0, 2, 4] and len(j["steps"]) == 5
        assert j["recorded"][-1]["params"] == mon.stats() and j["formats"] == ["fp16", "bf16"]
        assert set(j["recorded"][-1]["activations"]) == set(mon.activations())
    lines = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [0, 2, 4] and lines == j["recorded"]
    assert json.loads((tmp_path / "all.json").read_text()) == j
    assert all(isinstance(s["loss"], float) and math.isfinite(s["loss"]) for s in j["steps"])


def test_a_layer_filter_and_a_step_window():
    model = mlp(50)
    with Monitor(model, formats="fp16", every=2, start=1, stop=6, layers=["2", r"4\.bias"]) as mon:
        for i in range(8):
            one_step(mon, model, 50 + i)
        assert sorted(mon.history()) == [1, 3, 5]
        assert set(mon.stats()) == {"2.weight", "2.bias", "4.bias"} and set(mon.activations()) == {"2"}
    with pytest.raises(ValueError, match="not a regular expression"):
        Monitor(model, layers="(")
    with pytest.raises(ValueError, match="stop"):
        Monitor(model, start=3, stop=3)


def test_tensor_stats_of_the_gradients():
    model = mlp(60)
    with pytest.raises(MixprecError, match="stats=True"):
        with Monitor(model, every=1) as plain:
            one_step(plain, model, 59)
            plain.tensor_stats()
    with Monitor(model, formats=("fp16", "bf16", "e4m3"), every=1, stats=True) as mon:
        x, y = batch(60)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss * 256.0).backward()
        grads = {n: p.grad.detach().clone() / 256.0 for n, p in model.named_parameters()}
        mon.after_backward(256.0, loss=loss)
        mon.after_step(256.0)
        st = mon.tensor_stats()
    g = grads["0.weight"] * 256.0  # the gradient as .grad held it (scaled)
    s = st["0.weight"]
    assert s["min"] == g.min().item() and s["max"] == g.max().item() and s["amax"] == g.abs().max().item()
    assert math.isclose(s["mean"], g.mean().item(), rel_tol=1e-5) and s["zero"] == int((g == 0).sum())
    assert s["amin_nonzero"] == g.abs()[g != 0].min().item()
    assert math.isclose(s["dynamic_range_log2"], math.log2(s["amax"] / s["amin_nonzero"]))
    f16 = s["formats"]["fp16"]
    nz = g[g != 0]
    assert math.isclose(f16["round_trip"]["max_relative"],
                        ((nz.half().float() - nz).abs() / nz.abs()).max().item(), rel_tol=1e-6)
    assert f16["lost"] == mon.stats()["0.weight"]["fp16"]["underflow"] / g.numel()
    assert s["formats"]["bf16"]["round_trip"]["mse"] > 0
    e4 = s["formats"]["e4m3"]["round_trip"]  # 3 mantissa bits: up to 2^-4 relative, past its 448 saturated
    assert 0 < e4["max_relative"] and e4["mse"] > s["formats"]["bf16"]["round_trip"]["mse"]


def test_the_report_opens_with_a_verdict(tmp_path):
    mon = skip_with_zeroed_grads(1, set_to_none=True)  # step 1 skipped, caused by 0.weight; scale 1024 -> 512
    html = mon.report(tmp_path / "r.html").read_text()
    reading = html[html.index("What happened"):]
    assert reading.index("Verdict: 1 step skipped") < reading.index("3 steps of Sequential")
    assert "step 1; caused by 0.weight" in reading
    model = mlp(62)
    with Monitor(model, formats="fp16", every=1) as mon:  # the scale goes down: said in time order
        for i, scale in enumerate((4096.0, 2048.0, 8192.0)):
            x, y = batch(62 + i)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            (loss * scale).backward()
            mon.after_backward(scale, loss=loss)
            mon.after_step(scale)
            model.zero_grad()
        assert ("Loss scale from 4096 at the first step to 8192 at the last (between 2048 and 8192)"
                in mon.report(tmp_path / "s.html").read_text())
    model = mlp(61)
    with Monitor(model, formats="fp16", every=1) as healthy:
        one_step(healthy, model, 61)
        assert "Verdict: healthy" in healthy.report(tmp_path / "h.html").read_text()


def test_the_report_has_no_column_without_a_value(tmp_path):
    model = mlp(63)
    with Monitor(model, formats="fp16", every=1) as mon:
        one_step(mon, model, 63)
        html = mon.report(tmp_path / "r.html").read_text()
    summary = html[html.index('<table id="summary">'):]
    summary = summary[:summary.index("</table>")]
    assert "speed-up" not in summary and "MiB" not in summary and "<td>-</td>" in summary


class _Deep(torch.nn.Module):
    """Module names as long as nanoGPT's: transformer.h.N.mlp.c_fc and c_proj."""

    def __init__(self, n=4):
        super().__init__()
        torch.manual_seed(64)
        self.transformer = torch.nn.Module()
        self.transformer.h = torch.nn.ModuleList(torch.nn.Module() for _ in range(n))
        for b in self.transformer.h:
            b.mlp = torch.nn.Module()
            b.mlp.c_fc, b.mlp.c_proj = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        for b in self.transformer.h:
            x = b.mlp.c_proj(torch.relu(b.mlp.c_fc(x)))
        return x


def test_long_layer_names_are_turned_and_shortened_with_the_whole_name_on_hover(tmp_path):
    model = _Deep()
    with Monitor(model, formats="fp16", every=1) as mon:
        x = torch.randn(32, 16)
        loss = model(x).pow(2).mean()
        loss.backward()
        mon.after_backward(1.0, loss=loss)
        mon.after_step(1.0)
        html = mon.report(tmp_path / "r.html").read_text()
    chart = html[html.index('id="layers"'):]
    chart = chart[:chart.index("</svg>")]
    assert 'transform="rotate(-40' in chart
    assert "<title>transformer.h.3.mlp.c_proj</title>\u2026rmer.h.3.mlp.c_proj</text>" in chart


def test_an_overflowed_activation_is_drawn_in_the_headroom_chart(tmp_path):
    model = mlp(65)
    with torch.no_grad():
        model[2].weight.fill_(3e38)  # its outputs: inf
    with Monitor(model, formats="fp16", every=1) as mon:
        x, y = batch(65)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        mon.after_backward(1.0, loss=loss)  # no backward needed for the activations' counts
        mon.after_step(1.0)
        html = mon.report(tmp_path / "r.html").read_text()
    chart = html[html.index('id="headroom"'):]
    chart = chart[:chart.index("</svg>")]
    assert 'class="series overflow"' in chart and "2: overflowed (" in chart


def small_loss_steps(mon, model, n=3, factor=1e-4):
    """n steps of model on small losses (factor): fp16 would make some gradient values 0 or subnormal."""
    for i in range(n):
        x, y = batch(i)
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y) * factor
        loss.backward()
        mon.after_backward(1.0, loss=loss)
        mon.after_step(1.0)


def test_without_shadow_the_layer_charts_show_each_formats_zeros_and_subnormals(tmp_path):
    model = mlp(66)
    mon = Monitor(model, formats=("fp16", "bf16"), every=1)
    small_loss_steps(mon, model)
    html = mon.report(tmp_path / "r.html").read_text()
    chart = html[html.index('id="layers"'):]
    chart = chart[:chart.index("</svg>")]
    assert "would become 0 or subnormal if stored in fp16 or bf16 at the recorded loss scale" in html
    h, seen = mon.history(), 0
    for layer in ("0", "2", "4"):
        for f in ("fp16", "bf16"):
            for k, label in (("underflow", "to 0"), ("subnormal", "subnormal")):
                per_step = [np.float32(sum(c[f][k] for p, c in s.items() if p.startswith(layer + ".")) /
                                       sum(c[f]["total"] for p, c in s.items() if p.startswith(layer + ".")))
                            for s in h.values()]
                mean = 100 * sum(float(v) for v in per_step) / len(per_step)
                assert "<title>%s: %s %s: %.4g%%</title>" % (f, label, layer, mean) in chart, (f, k, layer, mean)
                seen += mean > 0
    assert seen >= 2  # fp16's zeros and subnormals drawn, not an empty chart
    assert "<figcaption>Weight-gradient values that would become 0 or subnormal" in html  # the over-time chart
    assert html.count('class="legend">fp16: subnormal</text>') == 2


def test_a_report_with_nothing_lost_says_so_instead_of_empty_charts(tmp_path):
    model = mlp(67)
    mon = Monitor(model, formats="bf16", every=1)  # fp32's range: no gradient value becomes 0 or subnormal
    small_loss_steps(mon, model, factor=1.0)
    assert all(c["bf16"]["underflow"] == c["bf16"]["subnormal"] == 0 for c in mon.stats().values())
    html = mon.report(tmp_path / "r.html").read_text()
    assert 'id="layers"' not in html and 'id="underflow"' not in html
    assert ("Weight-gradient values that would become 0 or subnormal if stored in bf16 at the recorded loss scale "
            "(recorded steps, held between them): none, in any layer on any step.") in html
    assert 'id="headroom"' in html  # what was measured of the activations is still drawn

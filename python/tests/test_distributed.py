"""mixprec.torch.Monitor under torch.distributed: two processes in a gloo group on the CPU (dist_worker.py), their
counts against references computed here in one process: DDP's all-reduced gradients counted once, each rank's
activations summed, gradients that differ between ranks summed, the shadow's fp32 gradients averaged as DDP
averages, and group=False counting each rank alone."""
import json
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available in torch %s" % torch.__version__, allow_module_level=True)

sys.path.insert(0, os.path.dirname(__file__))
import dist_worker as W  # noqa: E402
from mixprec.torch import Monitor  # noqa: E402

WORLD = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The two ranks' findings (dist_worker.found()), run once for the module's tests."""
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, W.__file__, str(r), str(WORLD), str(out / "init"), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    res = [torch.load(out / ("rank-%d.pt" % r)) for r in range(WORLD)]
    res[0]["jsonl"] = [json.loads(line) for line in (out / "ddp.jsonl").read_text().splitlines()]
    return res


def local_steps(rank, steps, grads_of=None):
    """Rank rank's steps alone in this process, plain SGD, each step's gradients (grads_of: the gradients the step
    applies, from all the ranks' local ones; None: its own)."""
    m = W.model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out = []
    for step in range(steps):
        mine = {}
        for r in ([rank] if grads_of is None else range(WORLD)):
            m.zero_grad(set_to_none=True)
            (W.loss_of(m, r, step) * W.SCALE).backward()
            mine[r] = {n: p.grad.clone() for n, p in m.named_parameters()}
        g = mine[rank] if grads_of is None else grads_of(list(mine.values()))
        out.append(g)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.grad = g[n].clone()
        opt.step()
    return out


def counts_of(grads, formats):
    """The monitor's gradient counts of these gradients, counted alone (no process group)."""
    m = W.model()
    with Monitor(m, formats=formats, every=1, group=False) as mon, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # on torch 2.x: "gradients but no forward seen" (set here by hand)
        for n, p in m.named_parameters():
            p.grad = grads[n].clone()
        mon.after_backward(W.SCALE)
        mon.after_step(W.SCALE)
        return mon.stats()


def activations_of(rank, formats=("fp16", "bf16")):
    """Rank rank's module outputs and their gradients at step 0, counted alone."""
    m = W.model()
    with Monitor(m, formats=formats, every=1, group=False) as mon:
        (W.loss_of(m, rank, 0) * W.SCALE).backward()
        mon.after_backward(W.SCALE)
        mon.after_step(W.SCALE)
        return mon.activations()


def summed(acts):
    out = {}
    for name in acts[0]:
        a = [x[name] for x in acts]
        d = {k: sum(x[k] for x in a) for k in ("elements", "zero", "subnormal", "inf", "nan")}
        d["amax"] = max(x["amax"] for x in a)
        g = [x["grad"] for x in a]
        d["grad"] = None if g[0] is None else dict(
            {k: sum(x[k] for x in g) for k in ("elements", "zero", "subnormal", "inf", "nan")},
            amax=max(x["amax"] for x in g))
        out[name] = d
    return out


def strip(acts):
    """activations() without what is derived (headroom) or named (dtype)."""
    return {n: {k: (v if k != "grad" or v is None else {kk: vv for kk, vv in v.items() if kk != "dtype"})
                for k, v in a.items() if k not in ("headroom", "dtype")} for n, a in acts.items()}


def average(gs):
    return {n: sum(g[n] for g in gs) / WORLD for n in gs[0]}  # gloo's sum, then DDP's division by the ranks


def test_ddp_gradients_are_counted_once_and_activations_summed(ranks):
    ddp = [r["ddp"] for r in ranks]
    for r in ddp:
        assert r["ranks"] == [{"ranks": 2, "gradients": "identical"}] * 2
    want = [counts_of(g, ("fp16", "bf16")) for g in local_steps(0, 2, grads_of=average)]
    for r in ddp:  # the same on both ranks, and not twice the single gradient's counts
        assert r["history"] == {0: want[0], 1: want[1]}
    assert sum(c["fp16"]["subnormal"] for c in want[0].values()) > 0  # the counts are not all zero
    assert sum(c["fp16"]["total"] for c in want[0].values()) == sum(p.numel() for p in W.model().parameters())
    want_act = summed([activations_of(r) for r in range(WORLD)])
    # step 1's activations depend on the weights after step 0, the same on both ranks; step 0's are checked here
    assert strip(ranks[0]["jsonl"][0]["activations"]) == strip(want_act)
    assert ranks[0]["jsonl"][0]["activations"]["0"]["elements"] == WORLD * 32 * 32
    assert strip(ddp[0]["activations"]) == strip(ddp[1]["activations"])
    # updates: once, the values with a nonzero finite gradient in the applied (averaged) gradient
    g1 = local_steps(0, 2, grads_of=average)[1]
    assert {n: u["updated"] for n, u in ddp[0]["updates"].items()} == \
        {n: int(((g != 0) & torch.isfinite(g)).sum()) for n, g in g1.items()}
    assert ddp[0]["updates"] == ddp[1]["updates"]
    html = ranks[0]["ddp_report"]
    assert "Counts over 2 ranks (torch.distributed): each rank&#39;s activations and their gradients summed; the " \
           "weight gradients the same on every rank (DDP&#39;s all-reduced ones), counted once." in html or \
           "Counts over 2 ranks (torch.distributed): each rank's activations and their gradients summed; the " \
           "weight gradients the same on every rank (DDP's all-reduced ones), counted once." in html
    assert [j["step"] for j in ranks[0]["jsonl"]] == [0, 1]  # rank 0's log
    assert ranks[0]["jsonl"][1]["params"] == want[1]


def test_gradients_that_differ_between_ranks_are_summed(ranks):
    want = [counts_of(local_steps(r, 1)[0], ("fp16", "bf16")) for r in range(WORLD)]
    total = {n: {f: {k: want[0][n][f][k] + want[1][n][f][k] for k in want[0][n][f]} for f in want[0][n]}
             for n in want[0]}
    for r in ranks:
        assert r["local"]["ranks"] == [{"ranks": 2, "gradients": "summed"}]
        assert r["local"]["stats"] == total
    assert total != want[0] and total != want[1]
    assert strip(ranks[0]["local"]["activations"]) == strip(summed([activations_of(r) for r in range(WORLD)]))


def test_the_shadow_pass_averages_its_fp32_gradients_as_ddp_does(ranks):
    # fp32 training: the run's averaged gradients and the averaged fp32 recomputation are the same numbers
    for r in ranks:
        lost = r["shadow"]["lost"]
        assert set(lost) == {n for n, _ in W.model().named_parameters()}
        for n, c in lost.items():
            assert c["lost"] == 0 and c["mse"] == 0.0 and c["max_relative"] == 0.0, (n, c)
            assert c["total"] == dict(W.model().named_parameters())[n].numel()  # counted once, not per rank
    assert ranks[0]["shadow"]["lost"] == ranks[1]["shadow"]["lost"]


def test_group_false_counts_each_rank_alone(ranks):
    want = counts_of(local_steps(0, 1, grads_of=average)[0], ("fp16",))
    for r in range(WORLD):
        assert ranks[r]["alone"]["ranks"] == [None]
        assert ranks[r]["alone"]["stats"] == want
        assert strip(ranks[r]["alone"]["activations"]) == strip(activations_of(r, ("fp16",)))

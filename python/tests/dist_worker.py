"""One rank of test_distributed.py's runs: `python dist_worker.py RANK WORLD INIT_FILE OUT_DIR` joins a gloo
process group on the CPU and trains the same small model three ways with a Monitor, then saves what the monitor
found (OUT_DIR/rank-RANK.pt). test_distributed.py imports model(), batch() and SCALE for its references."""
import sys

import torch

SCALE = 1024.0  # a static loss scale: the gradients in .grad carry it


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def batch(rank, step):
    """Rank rank's batch of step step: every rank its own data, as under DDP. Small inputs and a small loss, so that
    some gradient values times SCALE fall below fp16's normal range."""
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(32, 16, generator=g) * 1e-2, torch.randint(0, 4, (32,), generator=g)


def loss_of(m, rank, step):
    x, y = batch(rank, step)
    return torch.nn.functional.cross_entropy(m(x), y) * 1e-3


def train(m, mon, rank, steps=2):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(steps):
        loss = loss_of(m, rank, step)
        (loss * SCALE).backward()
        mon.after_backward(SCALE, loss=loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
        mon.after_step(SCALE)


def found(mon):
    j = mon.to_json()
    return {"stats": mon.stats(), "activations": mon.activations(), "updates": mon.updates(),
            "history": mon.history(), "ranks": [r["ranks"] for r in j["recorded"]],
            "lost": mon.lost() if mon.shadow else None}


def main():
    rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mixprec.torch import Monitor
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    res = {}
    # DDP: the gradients all-reduced (averaged), the same on every rank
    ddp = DDP(model())
    mon = Monitor(ddp, formats=("fp16", "bf16"), every=1, log=out + "/ddp.jsonl")
    train(ddp, mon, rank)
    res["ddp"] = found(mon)
    if rank == 0:  # the report: written once, on rank 0
        with open(mon.report(out + "/ddp.html")) as f:
            res["ddp_report"] = f.read()
    # each rank its own gradients (no DDP): summed over the ranks
    m = model()
    mon = Monitor(m, formats=("fp16", "bf16"), every=1)
    train(m, mon, rank, steps=1)
    res["local"] = found(mon)
    # DDP with the fp32 shadow pass: the fp32 gradients averaged as DDP averages the run's
    ddp = DDP(model())
    mon = Monitor(ddp, formats=("fp16",), every=1, shadow=True)
    train(ddp, mon, rank, steps=1)
    res["shadow"] = found(mon)
    # group=False: no sums, each rank's own counts
    ddp = DDP(model())
    mon = Monitor(ddp, formats=("fp16",), every=1, group=False)
    train(ddp, mon, rank, steps=1)
    res["alone"] = found(mon)
    torch.save(res, "%s/rank-%d.pt" % (out, rank))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

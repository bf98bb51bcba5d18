"""What the benchmark and cross-check scripts share (imports no peer library)."""
import statistics
import time


def median_time(fn, reps):
    """Median seconds of reps calls of fn, after one warm-up call."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def torch_mlp(torch, widths):
    """The MLP `mixprec train --model mlp:W0-W1-...` builds: Linear layers with
    ReLU between them, PyTorch's default initialisation."""
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)

#!/usr/bin/env python3
"""Cross-check `mixprec train` against PyTorch on the same data, weights and
optimizer: PyTorch initialises an MLP, the weights are written as safetensors
(fc{i}.weight [out, in], fc{i}.bias), `mixprec train --precision fp32
--optimizer sgd --no-shuffle --init FILE --log LOG` runs 50 steps, PyTorch runs
the same 50 steps on the same batches (file order), and the per-step losses are
compared; then mixprec's saved weights are loaded into PyTorch and both models'
test accuracies compared.
Usage: bench/crosscheck_train.py [--mixprec build/mixprec] [--steps 50]"""
import argparse
import csv
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

from benchlib import torch_mlp
from gpt_torch import write_safetensors

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path) as f:
        b = f.read()
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        s, e = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(b[8 + n + s:8 + n + e], np.float32).reshape(v["shape"]).copy())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mixprec", default="build/mixprec")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    widths = [784, 256, 128, 10]
    model = torch_mlp(torch, widths)
    lin = [m for m in model if isinstance(m, torch.nn.Linear)]
    tensors = {}
    for i, l in enumerate(lin):
        tensors[f"fc{i}.weight"], tensors[f"fc{i}.bias"] = l.weight, l.bias
    xtr = idx(f"{DATA}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / np.float32(255)
    ytr = idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64)
    xte = idx(f"{DATA}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / np.float32(255)
    yte = idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64)
    with tempfile.TemporaryDirectory() as td:
        init, log, saved = (os.path.join(td, n) for n in ("init.safetensors", "log.csv", "out.safetensors"))
        write_safetensors(init, tensors)
        subprocess.run([a.mixprec, "train", "--model", "mlp:" + "-".join(map(str, widths)), "--precision", "fp32",
                        "--optimizer", "sgd", "--lr", str(a.lr), "--weight-decay", "0", "--batch", str(a.batch),
                        "--steps", str(a.steps), "--no-shuffle", "--init", init, "--log", log, "--save", saved],
                       check=True, capture_output=True, text=True)
        mine = [float(r["loss"]) for r in csv.DictReader(open(log))]
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
        theirs = []
        for k in range(a.steps):
            xb = torch.from_numpy(xtr[k * a.batch:(k + 1) * a.batch])
            yb = torch.from_numpy(ytr[k * a.batch:(k + 1) * a.batch])
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            theirs.append(loss.item())
        rel = max(abs(m - t) / abs(t) for m, t in zip(mine, theirs))
        print(f"loss curve, {a.steps} SGD steps (lr {a.lr}, batch {a.batch}, file order): max relative difference "
              f"{rel:.2e} (first {mine[0]:.6f} vs {theirs[0]:.6f}, last {mine[-1]:.6f} vs {theirs[-1]:.6f})")
        with torch.no_grad():
            acc_torch = (model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean()
            w = read_safetensors(saved)
            for i, l in enumerate(lin):
                l.weight.copy_(w[f"fc{i}.weight"])
                l.bias.copy_(w[f"fc{i}.bias"])
            acc_mine = (model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean()
        print(f"test accuracy: PyTorch's model {100 * acc_torch:.2f}%, mixprec's saved weights in PyTorch "
              f"{100 * acc_mine:.2f}%")
        ok = rel < 1e-4 and abs(acc_torch - acc_mine) < 0.002
        print("crosscheck_train:", "agree" if ok else "DIFFER")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""torchao_sparse.py - torchao's quantized AdamW states on sparse gradients.

    bench/.venv/bin/python bench/torchao_sparse.py

20 AdamW steps (lr 3e-3) on a 256 x 64 embedding, 16 random rows updated per
step with gradients spanning 1e-6 to 1e-1 across the columns: prints the
largest weight after them for torch.optim.AdamW and torchao's AdamWFp8 and
AdamW8bit (docs/TRAINING.md, "Block formats lose what is small"). A block's
scale is its largest value, so the small second moments of a block become 0
while their first moments survive; a row absent from the next batch then
steps by exp_avg / eps.
"""
import torch
import torchao.optim as O

for name, cls in [("AdamW", torch.optim.AdamW), ("AdamWFp8", O.AdamWFp8), ("AdamW8bit", O.AdamW8bit)]:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(256, 64) * 0.02)
    opt = cls([w], lr=3e-3)
    for step in range(20):
        g = torch.zeros(256, 64)
        rows = torch.randint(0, 256, (16,))
        g[rows] = torch.randn(16, 64) * torch.logspace(-6, -1, 64)
        w.grad = g
        opt.step()
    print("%-10s largest |w| after 20 steps: %.4g" % (name, w.abs().max().item()))

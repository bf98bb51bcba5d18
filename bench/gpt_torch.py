"""The PyTorch peer of mixprec's GPT (include/mixprec/gpt.h): nanoGPT / GPT-2
exactly, byte-level, plus what the GPT cross-checks and benchmarks share:
safetensors by hand (json + numpy), the text corpus with its splits and
windows (include/mixprec/text.h), the validation loss, and AdamW with
nanoGPT's two parameter groups.

    wte [V, C] + wpe [T, C]
    L blocks: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
      attn: c_attn Linear(C, 3C) + bias, H heads, scores / sqrt(C/H), causal
            mask, softmax, c_proj Linear(C, C) + bias
      mlp:  c_fc Linear(C, 4C) + bias, GELU (tanh form or erf),
            c_proj Linear(4C, C) + bias
    ln_f; lm_head tied to wte (no bias); LayerNorm eps 1e-5; no dropout
    loss = mean cross-entropy over all B*T next-byte targets

Imports torch and numpy (Debian's python3-torch, python3-numpy)."""
import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- the model ----


@dataclass
class GPTConfig:
    n_layer: int = 2   # L
    n_head: int = 4    # H
    n_embd: int = 64   # C
    block_size: int = 64  # T
    vocab_size: int = 256
    gelu: str = "tanh"  # "tanh" (GPT-2, mixprec's default) or "erf" (nn.GELU())


def parse_spec(spec, gelu="tanh"):
    """GPTConfig from mixprec's model spec "gpt:L-H-C-T"."""
    if not spec.startswith("gpt:"):
        raise ValueError(f"not a GPT spec: {spec!r}")
    L, H, C, T = (int(v) for v in spec[4:].split("-"))
    if C % H:
        raise ValueError(f"{spec}: C = {C} is not a multiple of H = {H}")
    return GPTConfig(n_layer=L, n_head=H, n_embd=C, block_size=T, gelu=gelu)


def has_sdpa():
    """Whether this torch has F.scaled_dot_product_attention (2.0 and later)."""
    return hasattr(F, "scaled_dot_product_attention")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg, use_sdpa=False):
        super().__init__()
        self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.use_sdpa = use_sdpa and has_sdpa()
        if not self.use_sdpa:
            mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, C/H)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg.gelu not in ("tanh", "erf"):
            raise ValueError(f"gelu is 'tanh' or 'erf', not {cfg.gelu!r}")
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.gelu = nn.GELU(approximate="tanh") if cfg.gelu == "tanh" else nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg, use_sdpa=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(cfg, use_sdpa)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT without dropout: state_dict names as mixprec's
    (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...);
    lm_head.weight is transformer.wte.weight (tied). Initialised as nanoGPT
    from the current torch RNG state (call torch.manual_seed first)."""

    def __init__(self, cfg, use_sdpa=False):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg, use_sdpa) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=1e-5),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def num_params(self, non_embedding=True):
        """Parameters (the tied head counted once); non_embedding leaves out
        wpe, as nanoGPT's get_num_params and mp_gpt_num_params."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):
        """idx (B, T) int64 -> logits (B, T, V); with targets (B, T) also the
        mean cross-entropy over all B*T positions (computed in fp32)."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence of {T} tokens, block size {self.cfg.block_size}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def configure_adamw(model, lr, weight_decay, betas, eps=1e-8, **kw):
    """nanoGPT's configure_optimizers: tensors of two or more dimensions
    (Linear and Embedding weights) decay, the rest (biases, layer norms) do
    not. The tied weight is one parameter (named_parameters deduplicates)."""
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, **kw)


# ---- safetensors (by hand: the `safetensors` package is not in Debian) ----

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> torch tensor or numpy array, written as F32 (little
    endian) in the order given; metadata: str -> str, or None."""
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor):
            t = t.detach().to("cpu", torch.float32).numpy()
        a = np.ascontiguousarray(np.asarray(t, dtype="<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path, with_metadata=False):
    """name -> fp32 torch tensor (F32, F16, BF16 and F64 converted to fp32;
    integer tensors kept as they are); with_metadata: also the
    __metadata__ dict."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    base, out = 8 + n, {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw, dt = b[base + s:base + e], v["dtype"]
        if dt == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt in _DTYPES:
            a = np.frombuffer(raw, np.dtype(_DTYPES[dt]).newbyteorder("<"))
            if a.dtype.kind == "f":
                a = a.astype(np.float32)
        else:
            raise ValueError(f"{path}: {k}: dtype {dt} not handled")
        out[k] = torch.from_numpy(a.reshape(v["shape"]).copy())
    return (out, h.get("__metadata__", {})) if with_metadata else out


def model_tensors(model):
    """The model's tensors by mixprec's names (lm_head.weight, the tied copy of
    transformer.wte.weight, left out), fp32."""
    return {k: v.detach().float() for k, v in model.state_dict().items() if k != "lm_head.weight"}


def load_tensors(model, tensors):
    """Loads the tensors named like the model's (others, such as mixprec's
    optim.*, are ignored; lm_head follows wte). Raises if a model tensor
    other than lm_head.weight is missing."""
    own = model.state_dict()
    sd = {k: v for k, v in tensors.items() if k in own}
    missing = [k for k in own if k not in sd and k != "lm_head.weight"]
    if missing:
        raise KeyError(f"tensors missing: {', '.join(missing)}")
    model.load_state_dict(sd, strict=False)


# ---- the text corpus (include/mixprec/text.h) ----


def corpus_files(paths):
    """The files a comma-separated corpus list names, as mp_text_load takes
    them: files as given, directories' regular files (not symlinks, not
    hidden, not *.dat) in strcmp (byte) order, no recursion."""
    files = []
    for p in paths.split(","):
        if os.path.isdir(p):
            names = sorted(os.listdir(p), key=os.fsencode)
            for nm in names:
                fp = os.path.join(p, nm)
                if nm.startswith(".") or nm.endswith(".dat") or os.path.islink(fp) or not os.path.isfile(fp):
                    continue
                files.append(fp)
        else:
            files.append(p)
    return files


class Text:
    """A byte corpus: data (uint8), n, n_train = floor(0.9 n); data[:n_train]
    trains, data[n_train:] validates."""

    def __init__(self, data):
        self.data = np.frombuffer(bytes(data), np.uint8)
        self.n = len(self.data)
        self.n_train = self.n // 10 * 9 + self.n % 10 * 9 // 10

    @classmethod
    def load(cls, paths):
        parts = []
        for fp in corpus_files(paths):
            with open(fp, "rb") as f:
                parts.append(f.read())
        return cls(b"".join(parts))

    def train_offsets(self, s, B, T):
        """--no-shuffle: row b of micro-batch s starts at ((s B + b) T) mod (n_train - T)."""
        m = self.n_train - T
        return [((s * B + b) * T) % m for b in range(B)]

    def train_batch(self, s, B, T):
        """Micro-batch s (no shuffle): tokens, targets (B, T) int64 tensors."""
        d = self.data
        rows = [(d[o:o + T], d[o + 1:o + T + 1]) for o in self.train_offsets(s, B, T)]
        x = np.stack([r[0] for r in rows]).astype(np.int64)
        y = np.stack([r[1] for r in rows]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)

    def val_windows(self, T):
        """Validation windows: offsets 0, T, 2T, ... while offset + T + 1 <= n_val."""
        nv = self.n - self.n_train
        return (nv - 1) // T if nv >= T + 1 else 0

    def val_batch(self, w0, B, T):
        """Validation windows w0 .. w0+B-1 (clipped to the last): tokens, targets."""
        d = self.data[self.n_train:]
        ws = range(w0, min(w0 + B, self.val_windows(T)))
        x = np.stack([d[w * T:w * T + T] for w in ws]).astype(np.int64)
        y = np.stack([d[w * T + 1:w * T + T + 1] for w in ws]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)


def deterministic_text(nbytes=200_000, seed=1):
    """English-like text (sentences of common words) of about nbytes bytes,
    the same for the same seed: for when the fortunes corpus is absent."""
    words = ("the of and to a in is it you that he was for on are with as his they be at one have this from "
             "or had by hot word but what some we can out other were all there when up use your how said an "
             "each she which do their time if will way about many then them write would like so these her long "
             "make thing see him two has look more day could go come did number sound no most people my over "
             "know water than call first who may down side been now find any new work part take get place made "
             "live where after back little only round man year came show every good me give our under name very "
             "through just form sentence great think say help low line differ turn cause much mean before move "
             "right boy old too same tell does set three want air well also play small end put home read hand "
             "port large spell add even land here must big high such follow act why ask men change went light").split()
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, len(words) + 1)
    zipf /= zipf.sum()
    out, size = [], 0
    while size < nbytes:
        n = int(rng.integers(4, 16))
        ws = [words[i] for i in rng.choice(len(words), size=n, p=zipf)]
        s = " ".join(ws)
        s = s[0].upper() + s[1:] + (". " if rng.random() < 0.8 else "?\n" if rng.random() < 0.5 else ".\n")
        out.append(s)
        size += len(s)
    return "".join(out).encode()


@torch.no_grad()
def val_loss(model, text, T, batch=64, autocast_dtype=None):
    """Mean cross-entropy (nats per byte) over all validation windows, summed
    in float64 (the logits and per-token losses in fp32)."""
    nw = text.val_windows(T)
    total, count = 0.0, 0
    for w0 in range(0, nw, batch):
        x, y = text.val_batch(w0, batch, T)
        if autocast_dtype is not None:
            with torch.autocast("cpu", dtype=autocast_dtype):
                logits, _ = model(x)
        else:
            logits, _ = model(x)
        lt = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1), reduction="none")
        total += lt.double().sum().item()
        count += lt.numel()
    return total / count

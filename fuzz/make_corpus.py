#!/usr/bin/env python3
"""make_corpus.py - writes the seed inputs of fuzz/corpus/ (docs/FUZZING.md).

    python3 fuzz/make_corpus.py BUILD/mixprec

Valid inputs come from the formats' own definitions (struct, json, gzip) and,
for checkpoints, from `mixprec train --save`; a few malformed ones are derived
from them. Regression inputs (the files named crash-*, oom-*, ...) that the
fuzzers found are not written here: they are kept as found. Deterministic.
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def put(name, fname, data):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data)


# ---- safetensors ----

def safetensors(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] -> file bytes, as the reference writer lays them out."""
    h, off, body = {}, 0, b""
    if meta is not None:
        h["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        body += raw
    js = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + body


def header_of(b):
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def rewrite(b, edit):
    """b with its JSON header changed by edit(header) (the data section kept)."""
    h, body = header_of(b)
    edit(h)
    js = json.dumps(h, separators=(",", ":")).encode()
    return struct.pack("<Q", len(js)) + js + body


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def corpus_safetensors():
    good = safetensors([("w", "F32", [2, 3], f32(1, -2, 3.5, 0, 1e-30, 65504)),
                        ("b", "F16", [4], struct.pack("<4H", 0x3c00, 0x8001, 0x7bff, 0)),
                        ("h", "BF16", [], struct.pack("<H", 0x3f80)),
                        ("q", "F8_E4M3", [2, 1], b"\x38\x7e"), ("r", "F8_E5M2", [0, 5], b"")],
                       {"format": "pt", "step": "12"})
    put("safetensors", "valid-all-dtypes", good)
    put("safetensors", "valid-empty", safetensors([]))
    put("safetensors", "valid-meta-only", safetensors([], {"a": "1", "b": ""}))
    put("safetensors", "bad-header-length", b"\xff" * 8 + good[8:])
    put("safetensors", "bad-truncated", good[:-3])
    put("safetensors", "bad-trailing-byte", good + b"\0")
    put("safetensors", "bad-dtype", rewrite(good, lambda h: h["w"].update(dtype="I32")))
    put("safetensors", "bad-overlap", rewrite(good, lambda h: h["b"].update(data_offsets=[0, 8])))
    put("safetensors", "bad-shape", rewrite(good, lambda h: h["w"].update(shape=[3, 3])))
    put("safetensors", "bad-offsets-order", rewrite(good, lambda h: h["w"].update(data_offsets=[24, 0])))
    put("safetensors", "bad-fractional-offsets",  # what the byte count allows, but not whole numbers
        rewrite(good, lambda h: (h["w"].update(data_offsets=[0.5, 24.5]),
                                 h["b"].update(data_offsets=[24.5, 32.5]))))
    put("safetensors", "bad-metadata-value", rewrite(good, lambda h: h["__metadata__"].update(step=12)))
    put("safetensors", "bad-not-object", struct.pack("<Q", 2) + b"[]")
    put("safetensors", "bad-short", b"\x02\0\0")


# ---- .npy ----

def npy(descr, shape, raw, version=1, fortran=False):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", "(%s)" % "".join("%d," % s for s in shape) if len(shape) == 1
        else "(%s)" % ", ".join(str(s) for s in shape))
    pre = 10 if version == 1 else 12
    hdr = d.encode("utf-8" if version == 3 else "latin1")
    hdr += b" " * (-(pre + len(hdr) + 1) % 64) + b"\n"
    lenf = struct.pack("<H", len(hdr)) if version == 1 else struct.pack("<I", len(hdr))
    return b"\x93NUMPY" + bytes([version, 0]) + lenf + hdr + raw


def corpus_npy():
    put("npy", "v1-f4", npy("<f4", [5], f32(1e-8, -3, float("inf"), 0.5, 2 ** -140)))
    put("npy", "v1-f2-2d", npy("<f2", [2, 2], struct.pack("<4H", 0x0001, 0x3c00, 0xfc00, 0x7e00)))
    put("npy", "v1-f8", npy("<f8", [3], struct.pack("<3d", 1e-300, 1e300, -2.5)))
    put("npy", "v1-scalar", npy("<f4", [], f32(3)))
    put("npy", "v2-f4", npy("<f4", [2, 1], f32(4, 5), version=2))
    put("npy", "v3-f4", npy("<f4", [1], f32(6), version=3))
    put("npy", "raw-f32", f32(1, 2, -3e-20, float("nan")))
    put("npy", "bad-truncated-data", npy("<f4", [5], f32(1, 2, 3)))
    put("npy", "bad-fortran", npy("<f4", [1, 2], f32(1, 2), fortran=True))
    put("npy", "bad-big-endian", npy(">f4", [1], struct.pack(">f", 1)))
    put("npy", "bad-int", npy("<i4", [1], struct.pack("<i", 1)))
    put("npy", "bad-version", b"\x93NUMPY\x04\x00" + npy("<f4", [1], f32(1), version=2)[8:])
    put("npy", "bad-short-header", b"\x93NUMPY\x02\x00\x00\x00")
    put("npy", "bad-raw-odd", b"\0\0\x80")


# ---- IDX ----

def idx(dims, data, typ=0x08):
    return bytes([0, 0, typ, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


def corpus_idx():
    images = idx([3, 2, 2], bytes(range(0, 240, 20)))
    put("idx", "images-3d", images)
    put("idx", "labels-1d", idx([5], bytes([0, 9, 3, 3, 1])))
    put("idx", "images-4d", idx([1, 1, 2, 1], b"\x07\x08"))
    put("idx", "images-3d.gz", gzip.compress(images, mtime=0))
    put("idx", "bad-magic", b"\x01" + images[1:])
    put("idx", "bad-type-float", idx([1], struct.pack(">f", 1), typ=0x0d))
    put("idx", "bad-ndim", idx([1, 1, 1, 1, 1], b"\0"))
    put("idx", "bad-zero-dim", idx([0], b""))
    put("idx", "bad-truncated", images[:-1])
    put("idx", "bad-trailing", images + b"\0")
    put("idx", "bad-gzip-truncated", gzip.compress(images, mtime=0)[:-6])


# ---- text ----

def corpus_text():
    fortune = (b"\x20\x00\x01\x00" + b"seed" * 3 +
               b"A journey of a thousand miles begins with a single step.\n\t-- Lao Tzu\n%\n"
               b"The best way to predict the future is to invent it.\r\n\t-- Alan Kay\n%\n" * 3)
    put("text", "fortunes", fortune)
    put("text", "one-byte", b"x")
    put("text", "short", b"\x04\x00\x02\x01abcdefghijklmnopqrstuvwxyz0123456789")
    put("text", "binary", bytes((i * 37 + 11) % 256 for i in range(300)))
    put("text", "empty", b"")


# ---- scaler blobs and checkpoints ----

def blob(init=65536.0, growth=2.0, backoff=0.5, interval=2000, hyst=1, lo=0.0, hi=0.0, dynamic=1,
         scale=None, tracker=0, hleft=None, steps=0, skipped=0, growths=0, backoffs=0, last=-1):
    b = b"MPSC" + struct.pack("<II", 1, 104)
    b += struct.pack("<fffIIffI", init, growth, backoff, interval, hyst, lo, hi, dynamic)
    b += struct.pack("<fiiQQQQq", init if scale is None else scale, tracker, hyst if hleft is None else hleft,
                     steps, skipped, growths, backoffs, last)
    b += b"\0" * (100 - len(b))
    return b + struct.pack("<I", zlib.crc32(b))


def corpus_scaler():
    # byte 0: bit 0 asks the harness to re-seal the checksum; bits 1-7: inf flags of the steps it then runs
    put("scaler", "default", b"\x00" + blob())
    put("scaler", "after-overflow", b"\x2a" + blob(scale=32768.0, steps=10, skipped=1, backoffs=1, last=3,
                                                      tracker=6))
    put("scaler", "hysteresis-bounds", b"\x54" + blob(init=1024.0, interval=7, hyst=3, lo=1.0, hi=1e6,
                                                         scale=4096.0, hleft=2, tracker=5, steps=40,
                                                         skipped=5, growths=3, backoffs=1, last=37))
    put("scaler", "static", b"\xfe" + blob(init=128.0, dynamic=0, steps=5, skipped=2, last=4))
    put("scaler", "at-floor", b"\xff" + blob(init=2.0, lo=2.0, interval=1, hleft=0, steps=3, skipped=3,
                                                backoffs=0, last=2))
    put("scaler", "reseal-bad-state", b"\x01" + blob(tracker=5000)[:100] + b"\0\0\0\0")
    put("scaler", "bad-crc", b"\x00" + blob()[:100] + b"\1\2\3\4")
    put("scaler", "bad-magic", b"\x01" + b"MPSD" + blob()[4:])
    put("scaler", "bad-version", b"\x01" + blob()[:4] + struct.pack("<I", 2) + blob()[8:])
    put("scaler", "bad-short", b"\x00" + blob()[:-1])


def corpus_checkpoint(mixprec):
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "t.txt")
        with open(text, "wb") as f:
            f.write(b"To be, or not to be, that is the question.\n" * 4)
        runs = {
            "mlp": ["--model", "mlp:784-2-10", "--batch", "8"],
            "gpt": ["--model", "gpt:1-1-8-4", "--data", "text:" + text, "--batch", "2"],
        }
        for kind, args in runs.items():
            out = os.path.join(tmp, kind + ".safetensors")
            subprocess.run([mixprec, "train", *args, "--precision", "fp16-dynamic", "--steps", "3", "--seed", "2",
                            "--save", out], check=True, stdout=subprocess.DEVNULL)
            with open(out, "rb") as f:
                ck = f.read()
            put("checkpoint", kind, ck)
            put("safetensors", "checkpoint-" + kind, ck)
            h, _ = header_of(ck)
            sc = bytes.fromhex(h["__metadata__"]["scaler"])
            put("scaler", "from-" + kind + "-checkpoint", b"\x00" + sc)
            put("checkpoint", kind + "-bad-step", rewrite(ck, lambda h: h["__metadata__"].update(step="x")))
            if kind == "mlp":  # what strtol took: a sign, and a count whose next step overflows a long
                put("checkpoint", "mlp-step-plus-sign", rewrite(ck, lambda h: h["__metadata__"].update(step="+3")))
                put("checkpoint", "mlp-step-long-max",
                    rewrite(ck, lambda h: h["__metadata__"].update(step="9223372036854775807")))
            put("checkpoint", kind + "-bad-scaler",
                rewrite(ck, lambda h: h["__metadata__"].update(scaler="00" + h["__metadata__"]["scaler"][2:])))
            put("checkpoint", kind + "-wrong-model",
                rewrite(ck, lambda h: h["__metadata__"].update(model="mlp:784-3-10")))
        # the GPT as PyTorch names a tied head: lm_head.weight instead of transformer.wte.weight
        gpt = open(os.path.join(HERE, "corpus", "checkpoint", "gpt"), "rb").read()
        put("checkpoint", "gpt-lm-head",
            rewrite(gpt, lambda h: h.__setitem__("lm_head.weight", h.pop("transformer.wte.weight"))))


def tensors_of(b):
    """A safetensors file's tensors as [(name, dtype, shape, bytes)] in data order, and its metadata."""
    h, body = header_of(b)
    meta = h.pop("__metadata__", None)
    ts = sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in ts], meta


def corpus_gpt_file():
    """A GPT's weights against the model its metadata names (the checkpoint of corpus_checkpoint)."""
    gpt = open(os.path.join(HERE, "corpus", "checkpoint", "gpt"), "rb").read()
    put("gpt_file", "gpt", gpt)
    put("gpt_file", "gpt-lm-head", open(os.path.join(HERE, "corpus", "checkpoint", "gpt-lm-head"), "rb").read())
    put("gpt_file", "gpt-claims-huge", rewrite(gpt, lambda h: h["__metadata__"].update(model="gpt:64-64-8192-8192")))
    put("gpt_file", "gpt-claims-two-layers", rewrite(gpt, lambda h: h["__metadata__"].update(model="gpt:2-1-8-4")))
    put("gpt_file", "gpt-claims-wider", rewrite(gpt, lambda h: h["__metadata__"].update(model="gpt:1-2-16-4")))
    put("gpt_file", "gpt-int-dtype", rewrite(gpt, lambda h: h["transformer.ln_f.bias"].update(dtype="I32")))
    ts, meta = tensors_of(gpt)
    deeper = ts + [(n.replace("transformer.h.0.", "transformer.h.1."), d, s, b) for n, d, s, b in ts
                   if n.startswith("transformer.h.0.")]
    put("gpt_file", "gpt-layer-beyond", safetensors(deeper, meta))
    nan = [(n, d, s, (f32(float("nan")) + b[4:]) if n == "transformer.ln_f.bias" else b) for n, d, s, b in ts]
    put("gpt_file", "gpt-nan", safetensors(nan, meta))


# ---- option values and command lines ----

def corpus_options():
    values = ["1e-3", "65536", "-5", "0x1p-3", "inf", "nan", "1e39", "fp16-static:1024", "fp16-dynamic",
              "fp16-dynamic+master-weights=none", "bf16+reductions=half+master-weights=fp32", "bf16-pure",
              "mlp:784-1024-1024-10", "gpt:6-6-384-256", "e4m3", "bf16"]
    for i, v in enumerate(values):
        put("options", "value-%02d" % i, v.encode())
    lines = [
        ["--lr", "3e-4", "--betas", "0.9,0.95", "--batch", "32", "--steps", "100", "--clip", "1"],
        ["--precision", "fp16-static:128", "--init-scale", "1024", "--growth-interval", "10", "--hysteresis", "2"],
        ["--model", "gpt:2-2-64-32", "--precision", "bf16-pure", "--lr-schedule", "cosine", "--warmup", "5",
         "--min-lr", "1e-5", "--threads", "2", "--seed", "7"],
        ["--precision", "fp16-dynamic", "--master-weights", "none", "--reductions", "half", "--min-scale", "1",
         "--max-scale", "1e6", "--backoff-factor", "0.25", "--growth-factor", "4"],
        ["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0", "--epochs", "2", "--accum", "4"],
        ["--steps", "1", "--epochs", "1"],
        ["--betas", "0.9"],
        ["--batch", "0"],
    ]
    for i, a in enumerate(lines):
        put("options", "argv-%02d" % i, b"\0".join(x.encode() for x in a))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py BUILD/mixprec")
    corpus_safetensors()
    corpus_npy()
    corpus_idx()
    corpus_text()
    corpus_scaler()
    corpus_checkpoint(sys.argv[1])
    corpus_gpt_file()
    corpus_options()


if __name__ == "__main__":
    main()

"""mixprec.train and mixprec.compare (the library's mp_run and mp_compare)
against the mixprec command on the same options."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

import mixprec
from mixprec import MixprecError

GPT = dict(model="gpt:1-2-16-16", batch=4, lr=3e-3, threads=1, eval_windows=4)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("".join("The cat sat on the mat, and the dog sat on the log number %d.\n" % i
                            for i in range(1, 41)))
    return "text:%s" % path


def test_train_matches_the_command(cli, corpus, tmp_path):
    s = mixprec.train(data=corpus, precision="fp16-dynamic", steps=5, log=tmp_path / "py.csv", **GPT)
    assert s["precision"] == "fp16-dynamic" and s["steps"] == 5 and len(s["loss"]) == 5
    assert all(math.isfinite(x) for x in s["loss"]) and s["scale"] == [65536.0] * 5 and s["skipped"] == []
    assert np.float32(s["loss"][-1]) == np.float32(s["last_train_loss"])  # the JSON's 15 digits hold a float
    args = [cli, "train", "--data", corpus, "--precision", "fp16-dynamic", "--steps", "5",
            "--summary", str(tmp_path / "cli.json"), "--log", str(tmp_path / "cli.csv")]
    for k, v in GPT.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args, check=True, capture_output=True)
    c = json.loads((tmp_path / "cli.json").read_text())
    timing = {"ms_per_step", "tokens_per_s", "peak_memory_mib"}
    assert {k: v for k, v in c.items() if k not in timing} == \
        {k: v for k, v in s.items() if k not in timing | {"loss", "scale"}}
    strip = lambda t: [",".join(r.split(",")[:12] + r.split(",")[13:]) for r in t.splitlines()]  # no "ms"
    assert strip((tmp_path / "py.csv").read_text()) == strip((tmp_path / "cli.csv").read_text())


def test_train_flags_lists_and_errors(corpus):
    s = mixprec.train(data=corpus, precision="bf16", steps=2, no_shuffle=True, betas=(0.9, 0.95), **GPT)
    assert s["precision"] == "bf16" and s["compute_format"] == "bf16" and s["steps"] == 2
    with pytest.raises(MixprecError, match=r"--lr wants a number in \[0, 1e\+06\], not 'x'"):
        mixprec.train(lr="x")
    with pytest.raises(TypeError, match="^train\\(\\) got an unexpected keyword argument 'nonsense'$"):
        mixprec.train(nonsense=1)
    with pytest.raises(MixprecError, match="--epochs and --steps exclude each other"):
        mixprec.train(epochs=1, steps=2)
    with pytest.raises(MixprecError, match="/nonexistent"):
        mixprec.train(data="text:/nonexistent/corpus", steps=1, **GPT)
    with pytest.raises(TypeError, match="log is a file name .*not int"):
        mixprec.train(log=3)
    with pytest.raises(ValueError, match="NUL"):
        mixprec.train(data=corpus, log="a\0b", steps=1, **GPT)


def test_signatures_show_every_option_with_the_clis_default(corpus):
    import inspect
    t, c = inspect.signature(mixprec.train).parameters, inspect.signature(mixprec.compare).parameters
    helped = {m.replace("-", "_") for m in
              __import__("re").findall(r"^  --([a-z][a-z0-9-]*)", mixprec._train._OPTIONS_HELP, flags=8)}
    assert helped and helped <= set(t) and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in t.values())
    assert (t["lr"].default, t["optimizer"].default, t["betas"].default, t["init_scale"].default) == \
        (0.001, "adamw", (0.9, 0.999), 65536.0)
    assert (t["no_shuffle"].default, t["growth_interval"].default, t["precision"].default) == (False, 2000, "fp32")
    assert all(t[k].default is None for k in ("batch", "min_lr", "weight_decay", "master_weights", "log", "steps"))
    assert not {"precision", "log", "summary", "save"} & set(c) and c["checkpoints"].default is False
    assert list(c)[:2] == ["precisions", "out"] and set(c) - {"precisions", "out", "checkpoints"} < set(t)
    # a default given explicitly is the same run as the default left out
    a = mixprec.train(data=corpus, steps=2, **GPT)
    b = mixprec.train(data=corpus, steps=2, gelu="tanh", act="relu", log=None, betas=(0.9, 0.999), momentum=0.0,
                      master_weights=None, **GPT)
    assert a["loss"] == b["loss"]


def test_compare_is_the_ablation(corpus, tmp_path):
    out = tmp_path / "cmp"
    r = mixprec.compare(precisions=["fp32", "fp16-dynamic", "fp16-dynamic+master-weights=none"], data=corpus,
                        steps=4, out=out, **GPT)
    names = [run["precision"] for run in r["runs"]]
    assert names == ["fp32", "fp16-dynamic", "fp16-dynamic+master-weights=none"]
    assert [a["protection"] for a in r["ablation"]] == ["fp32 master weights"]
    assert r["reading"].startswith("Every mode trained the same network (gpt:1-2-16-16)")
    assert os.path.exists(r["report"]) and json.loads((out / "summary.json").read_text())["runs"][0] == r["runs"][0]
    for name in names:
        assert (out / (name + ".csv")).exists() and (out / (name + ".txt")).exists()
    with pytest.raises(MixprecError, match="--log is set by compare itself"):
        mixprec.compare(log="x.csv")
    with pytest.raises(MixprecError, match="bogus"):
        mixprec.compare(precisions=["fp32", "bogus"], out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_outputs_never_replace_inputs(corpus, tmp_path):
    ck = tmp_path / "g.st"
    mixprec.train(data=corpus, steps=1, save=str(ck), **GPT)
    before = ck.read_bytes()
    with pytest.raises(MixprecError, match="--log .*g.st is the file --resume reads"):
        mixprec.train(data=corpus, steps=2, resume=str(ck), log=str(tmp_path / "." / "g.st"), **GPT)
    with pytest.raises(MixprecError, match="cmp/report.html is the file --init reads"):
        mixprec.compare(precisions=["fp32"], data=corpus, steps=1, init=str(tmp_path / "cmp" / "report.html"),
                        out=tmp_path / "cmp", **GPT)
    with pytest.raises(MixprecError, match="--summary /dev/null is a device"):
        mixprec.train(data=corpus, steps=1, summary="/dev/null", **GPT)
    assert ck.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["c.txt", "g.st"]


def test_paths_are_str_bytes_or_pathlike(corpus, tmp_path):
    """A path as os.fsencode takes it: bytes name the file they spell (not "b'x.csv'"), a str holding a
    surrogate (a file name that is not UTF-8, as os.fsdecode gives it) names those bytes."""
    raw = os.fsencode(tmp_path) + b"/\xff.csv"
    mixprec.train(data=corpus, steps=1, log=os.fsencode(tmp_path / "b.csv"), summary=tmp_path / "p.json", **GPT)
    mixprec.train(data=corpus.encode(), steps=1, log=os.fsdecode(raw), **GPT)
    names = sorted(os.listdir(os.fsencode(tmp_path)))
    assert b"b.csv" in names and b"p.json" in names and b"\xff.csv" in names, names
    assert not any(n.startswith(b"b'") for n in names), names
    s = mixprec.compare(precisions=["fp32"], out=os.fsencode(tmp_path / "d"), data=corpus, steps=1, **GPT)
    assert os.path.exists(s["report"]) and s["report"] == str(tmp_path / "d" / "report.html")


def test_argument_types_are_checked(corpus, tmp_path):
    s = mixprec.train(data=corpus, **dict(GPT, steps=np.int64(2), lr=np.float32(3e-3)))
    assert s["steps"] == 2
    for bad in ({"steps": {}}, {"steps": b"2"}, {"model": b"gpt:1-2-16-16"}, {"lr": [object()]}):
        with pytest.raises(TypeError, match="mixprec: %s takes" % next(iter(bad))):
            mixprec.train(data=corpus, **dict(dict(GPT, steps=1), **bad))
    with pytest.raises(ValueError, match="seed is not valid text"):
        mixprec.train(data=corpus, steps=1, seed="1\udcff", **GPT)
    assert os.listdir(tmp_path) == ["c.txt"]

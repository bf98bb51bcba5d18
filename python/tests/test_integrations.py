"""The monitor's integrations, each with its library from PyPI where it is installed (bench/.venv: scripts/
bench_venv.sh), skipped with the reason elsewhere: TensorBoard scalars, Lightning's callback, Hugging Face's
Trainer callback on a GPT-2 built from a config (no downloads)."""
import os

import pytest

torch = pytest.importorskip("torch")
from mixprec.torch import Monitor  # noqa: E402


def tiny_mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_tensorboard_scalars_of_each_recorded_step(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (bench/.venv has it)")
    from torch.utils.tensorboard import SummaryWriter
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    model, w = tiny_mlp(1), SummaryWriter(str(tmp_path))
    with Monitor(model, formats="fp16", every=2, tensorboard=w) as mon:
        for i in range(4):
            x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            mon.after_backward(1.0, loss=loss)
            mon.after_step(1.0)
            model.zero_grad()
    w.close()
    ev = EventAccumulator(str(tmp_path))
    ev.Reload()
    tags = ev.Tags()["scalars"]
    assert "mixprec/loss" in tags and "mixprec/fp16_underflow/0.weight" in tags and "mixprec/fp16_headroom/0" in tags
    assert [e.step for e in ev.Scalars("mixprec/loss")] == [0, 2]
    assert [round(e.value, 5) for e in ev.Scalars("mixprec/loss")] == [round(s["loss"], 5)
                                                                       for s in mon.to_json()["recorded"]]
    with pytest.raises(TypeError, match="tensorboard"):
        Monitor(model, tensorboard="runs")


def test_lightning_callback(tmp_path):
    L = pytest.importorskip("lightning", reason="Lightning is not installed (bench/.venv has it)")
    from mixprec.lightning import MixprecCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_mlp(2)

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    cb = MixprecCallback(report=str(tmp_path / "r.html"), formats="fp16", every=2)
    trainer = L.Trainer(max_steps=5, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, precision="bf16-mixed",
                        callbacks=[cb], default_root_dir=str(tmp_path))
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=16))
    mon = cb.monitor
    assert mon.step == 5 and sorted(mon.history()) == [0, 2, 4]
    assert set(mon.stats()) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    assert all(s["loss"] is not None for s in mon.to_json()["steps"])
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert all(not m._forward_hooks for m in mon.model.modules())  # closed when fitting ended


def test_hugging_face_trainer_callback(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (bench/.venv has it)")
    from mixprec.huggingface import MixprecTrainerCallback
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32)
    torch.manual_seed(3)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 64, (16, 32))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4,
                                          report_to=[], save_strategy="no", logging_strategy="no",
                                          use_cpu=True, disable_tqdm=True)
    cb = MixprecTrainerCallback(report=str(tmp_path / "r.html"), formats=("fp16", "bf16"), every=1)
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb]).train()
    mon = cb.monitor
    assert mon.step == 4 and sorted(mon.history()) == [0, 1, 2, 3]
    assert "transformer.h.0.mlp.c_fc.weight" in mon.stats()
    assert "transformer.h.0.mlp.c_fc" in mon.activations()
    assert os.path.getsize(tmp_path / "r.html") > 1000

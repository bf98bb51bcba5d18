"""mixprec.huggingface: the training monitor in a Hugging Face Trainer with one
line: Trainer(..., callbacks=[MixprecTrainerCallback(report="mixprec.html")]).
Importable only where transformers is installed."""
from transformers import TrainerCallback

from .torch import Monitor

__all__ = ["MixprecTrainerCallback"]


class MixprecTrainerCallback(TrainerCallback):
    """Attaches a mixprec.torch.Monitor to the Trainer's model when training begins (its keyword arguments:
    formats, every, shadow, counts, trap, log, tensorboard), calls after_backward before each optimizer step
    (the gradients as the optimizer takes them: accumulated and clipped, no loss scale: the Trainer runs fp32
    or bf16 on the CPU) and after_step at each step's end, and writes the report to `report` (when given; on the
    world's rank 0) and closes the monitor when training ends. Under torch.distributed the counts are over the
    ranks (Monitor's group). `monitor` is the Monitor."""

    def __init__(self, report=None, **monitor_options):
        self.report, self.options, self.monitor = report, monitor_options, None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.monitor = Monitor(model, **self.options)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.monitor.after_backward(1.0)

    def on_step_end(self, args, state, control, **kwargs):
        if self.monitor is not None and self.monitor._scale_now is not None:
            self.monitor.after_step(1.0)

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is None:
            return
        if self.report is not None and self.monitor.step > 0 and state.is_world_process_zero:
            self.monitor.report(self.report)
        self.monitor.close()

"""mixprec.lightning: the training monitor in a Lightning Trainer with one line:
Trainer(callbacks=[MixprecCallback(report="mixprec.html")]). Importable only
where Lightning (the `lightning` package, or `pytorch_lightning`) is installed."""
try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from .torch import Monitor

__all__ = ["MixprecCallback"]


class MixprecCallback(Callback):
    """Attaches a mixprec.torch.Monitor to the LightningModule when fitting starts (its keyword arguments:
    formats, every, shadow, counts, trap, log, tensorboard), calls after_backward after each backward (with
    the precision plugin's GradScaler, when it has one) and after_step after each batch's optimizer step (one
    backward a step: no accumulate_grad_batches), and writes
    the report to `report` (when given; on the global rank 0) and closes the monitor when fitting ends. Under DDP
    the counts are over the ranks (Monitor's group). `monitor` is the Monitor."""

    def __init__(self, report=None, **monitor_options):
        super().__init__()
        self.report, self.options, self.monitor = report, monitor_options, None
        self._loss = None

    @staticmethod
    def _scaler(trainer):
        plugin = getattr(trainer, "precision_plugin", None) or getattr(trainer.strategy, "precision_plugin", None)
        return getattr(plugin, "scaler", None) or 1.0

    def on_fit_start(self, trainer, pl_module):
        self.monitor = Monitor(pl_module, **self.options)

    def on_after_backward(self, trainer, pl_module):
        self.monitor.after_backward(self._scaler(trainer), loss=self._loss)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._loss = None

    def on_before_backward(self, trainer, pl_module, loss):
        self._loss = loss

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.monitor is not None and self.monitor._scale_now is not None:  # a backward ran for this batch
            self.monitor.after_step(self._scaler(trainer))

    def on_fit_end(self, trainer, pl_module):
        if self.monitor is None:
            return
        if self.report is not None and self.monitor.step > 0 and trainer.is_global_zero:
            self.monitor.report(self.report)
        self.monitor.close()

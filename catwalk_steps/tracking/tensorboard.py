"""The same scalars as W&B, as TensorBoard event files, for users off W&B."""

from pathlib import Path
from typing import Any, Dict


class TensorBoardRun:
    """Scalars of one run in ``log_dir`` (one folder per run, so ``tensorboard --logdir`` over
    their parent shows runs side by side). A run resumed after step ``resumed_at`` purges what
    its killed predecessor wrote after that step, so no curve doubles back."""

    def __init__(self, log_dir: Path, resumed_at: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=resumed_at + 1)
        self.step = resumed_at

    def log(self, values: Dict[str, Any], step: int) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)
        self.step = step
        self.writer.flush()

    def summarize(self, values: Dict[str, Any]) -> None:
        """TensorBoard has no summary: the best-so-far numbers become curves of their own."""
        self.log({f"summary/{name}": value for name, value in values.items()}, self.step)

    def finish(self, failed: bool = False) -> None:
        self.writer.close()

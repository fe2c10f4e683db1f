"""The training-time rank-classification model and its collator.

Every choice of an instance is collated into the same batch, so ``forward()`` can compute the
loss *and* the accuracy itself. Validation accuracy is accumulated across the validation loop
and summed over ranks inside ``forward()``: the trainer only ever reads an exact, already
global number, and no torchmetrics object has to sync in a callback.
"""

from typing import Any, Dict, List

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tango.integrations.torch import DataCollator, Model

from .loading import ModelSpec
from .scoring import Query, collate_queries, continuation_logliks


class RankClassificationModel(Model):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.lm = spec.load_model()
        # Validation sums since the model last entered eval mode: [correct, weighted loss, count].
        # A plain attribute, not a buffer, so that DDP does not broadcast it.
        self._val_sums = [0.0, 0.0, 0.0]

    def train(self, mode: bool = True) -> "RankClassificationModel":
        if not mode:
            self._val_sums = [0.0, 0.0, 0.0]
        return super().train(mode)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        targets: torch.Tensor,
        target_mask: torch.Tensor,
        choice_instance: torch.Tensor,
        choice_index: torch.Tensor,
        labels: torch.Tensor,
        weights: torch.Tensor,
    ) -> Dict[str, torch.Tensor]:
        logliks = continuation_logliks(self.lm, input_ids, attention_mask, position_ids, targets, target_mask)
        scores = logliks.new_full((labels.shape[0], int(choice_index.max()) + 1), float("-inf"))
        scores = scores.index_put((choice_instance, choice_index), logliks)
        losses = F.cross_entropy(scores, labels, reduction="none")
        loss = (losses * weights).sum() / weights.sum()
        if self.training:
            return {"loss": loss}
        correct = (scores.argmax(-1) == labels).to(weights.dtype)
        batch_sums = torch.stack([(correct * weights).sum(), (losses * weights).sum(), weights.sum()])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(batch_sums)
        self._val_sums = [total + value for total, value in zip(self._val_sums, batch_sums.tolist())]
        correct_total, loss_total, count = self._val_sums
        return {"loss": torch.tensor(loss_total / count), "acc": torch.tensor(correct_total / count)}


class RankClassificationCollator(DataCollator[Dict[str, Any]]):
    """Flattens the choices of each instance into one left-padded batch of queries.

    Holds only the pad id and length limit, so it is cheap to send to DDP workers.
    """

    def __init__(self, pad_token_id: int, max_length: int) -> None:
        self.pad_token_id = pad_token_id
        self.max_length = max_length

    def __call__(self, items: List[Dict[str, Any]]) -> Dict[str, Any]:
        queries = [Query(tuple(context), tuple(c)) for item in items for context, c in item["queries"]]
        batch = collate_queries(queries, self.pad_token_id, self.max_length)
        batch["choice_instance"] = torch.tensor(
            [row for row, item in enumerate(items) for _ in item["queries"]], dtype=torch.long
        )
        batch["choice_index"] = torch.tensor(
            [choice for item in items for choice in range(len(item["queries"]))], dtype=torch.long
        )
        batch["labels"] = torch.tensor([item["label"] for item in items], dtype=torch.long)
        batch["weights"] = torch.tensor([item.get("weight", 1.0) for item in items], dtype=torch.float32)
        return batch

"""The training-time rank-classification model and its collator.

Every choice of an instance is collated into the same batch, so ``forward()`` returns, besides
the loss, each instance's loss and whether its best-scored choice is the gold one: the training
loop sums those into an exact validation accuracy, with no metric object to sync across ranks.
"""

from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F
from peft import PeftModel
from tango.integrations.torch import DataCollator, Model

from .adapters import Adapter, add_adapter
from .loading import ModelSpec
from .scoring import Query, collate_queries, continuation_logliks


class RankClassificationModel(Model):
    """The LM of ``spec``, with a fresh ``adapter`` if given (then only the adapter trains), and
    activations recomputed in the backward pass with ``gradient_checkpointing``."""

    def __init__(self, spec: ModelSpec, adapter: Optional[Adapter] = None, gradient_checkpointing: bool = False) -> None:
        super().__init__()
        lm = spec.load_model()
        if gradient_checkpointing:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.lm = add_adapter(lm, adapter) if adapter is not None else lm
        #: Names that share one parameter (GPT-2's lm_head and input embeddings).
        shared: Dict[int, List[str]] = {}
        for name, parameter in self.lm.named_parameters(remove_duplicate=False):
            shared.setdefault(id(parameter), []).append(name)
        self.tied_names = [names for names in shared.values() if len(names) > 1]

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
    ) -> Dict[str, torch.Tensor]:
        """``loss``: the mean over instances of the cross-entropy over their choices' summed
        log-likelihoods; ``losses`` and ``correct``: per instance."""
        # A peft model's adapters live inside its base model, whose forward takes logits_to_keep.
        lm = self.lm.get_base_model() if isinstance(self.lm, PeftModel) else self.lm
        logliks = continuation_logliks(lm, input_ids, attention_mask, position_ids, targets, target_mask)
        scores = logliks.new_full((labels.shape[0], int(choice_index.max()) + 1), float("-inf"))
        scores = scores.index_put((choice_instance, choice_index), logliks)
        losses = F.cross_entropy(scores, labels, reduction="none")
        return {"loss": losses.mean(), "losses": losses.detach(), "correct": scores.argmax(-1) == labels}


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
        return batch

"""DPO's loss, its model and its collator, as TRL 1.16's ``DPOTrainer`` computes them.

A pair's policy log-probabilities are its chosen and its rejected answer's summed token
log-probabilities after the prompt; its reference ones are the same sums under the starting
model (:class:`.preference_rows.PreferenceRow`'s ``reference``, measured once before training:
:mod:`catwalk_steps.kinds.preference`). With ``log_ratio = policy - reference`` and
``delta = chosen's log_ratio - rejected's``, each loss type is TRL's formula per pair (``beta``,
``label_smoothing``), and a list of them is summed under ``loss_weights``. The logged rewards are
TRL's: ``beta * log_ratio`` of each answer, their mean, how often the chosen one's is larger and
their mean margin.

A pair's two sequences share its prompt's forward pass where the model can
(:mod:`.shared_context`, as multiple choice's choices share their context), and the forward pass
returns the micro-batch's *summed* loss, which the loop divides by the global batch's pairs: the
step's gradient is the mean over its pairs, TRL's, however the batch is cut.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from tango.common.exceptions import ConfigurationError

from .preference_rows import PreferenceRow
from .rank_classification import ChoiceRow, RankClassificationCollator, RankClassificationModel
from .scoring import Query, continuation_logliks
from .shared_context import shared_context_logliks

#: ``loss(beta, smoothing, delta, chosen_ratio, rejected_ratio, chosen_tokens, rejected_tokens)``, per pair.
PairLoss = Callable[..., torch.Tensor]


def _per_token_delta(chosen: torch.Tensor, rejected: torch.Tensor, chosen_tokens: torch.Tensor,
                     rejected_tokens: torch.Tensor) -> torch.Tensor:
    """``ipo``'s and ``sigmoid_norm``'s delta: each log-ratio per answer token."""
    return chosen / chosen_tokens.clamp(min=1.0) - rejected / rejected_tokens.clamp(min=1.0)


#: TRL 1.16's loss types that are a sum over pairs (``aot``'s sort over the batch, ``sft`` and
#: ``discopop`` are left out: the first two would depend on how a batch is cut).
LOSSES: Dict[str, PairLoss] = {
    "sigmoid": lambda b, s, d, c, r, nc, nr: -F.logsigmoid(b * d),
    "hinge": lambda b, s, d, c, r, nc, nr: torch.relu(1 - b * d),
    "ipo": lambda b, s, d, c, r, nc, nr: (_per_token_delta(c, r, nc, nr) - 1 / (2 * b)) ** 2,
    "sigmoid_norm": lambda b, s, d, c, r, nc, nr: -F.logsigmoid(b * _per_token_delta(c, r, nc, nr)),
    "robust": lambda b, s, d, c, r, nc, nr: (-(1 - s) * F.logsigmoid(b * d) + s * F.logsigmoid(-b * d)) / (1 - 2 * s),
    "exo_pair": lambda b, s, d, c, r, nc, nr: (
        torch.sigmoid(b * d) * (F.logsigmoid(b * d) - torch.log1p(torch.tensor(-s, device=d.device)))
        + torch.sigmoid(-b * d) * (F.logsigmoid(-b * d) - torch.log(torch.tensor(s, device=d.device)))
    ),
    "nca_pair": lambda b, s, d, c, r, nc, nr: (
        -F.logsigmoid(b * c) - 0.5 * F.logsigmoid(-b * c) - 0.5 * F.logsigmoid(-b * r)
    ),
    "bco_pair": lambda b, s, d, c, r, nc, nr: -F.logsigmoid(b * c) - F.logsigmoid(-b * r),
    "sppo_hard": lambda b, s, d, c, r, nc, nr: (c - 0.5 / b) ** 2 + (r + 0.5 / b) ** 2,
    "apo_zero": lambda b, s, d, c, r, nc, nr: 1 - torch.sigmoid(b * c) + torch.sigmoid(b * r),
    "apo_down": lambda b, s, d, c, r, nc, nr: torch.sigmoid(b * c) + 1 - torch.sigmoid(b * d),
}
#: The loss types whose formula reads ``label_smoothing`` (TRL's ``aot`` too, left out).
SMOOTHED = ("robust", "exo_pair")


@dataclass(frozen=True)
class DPOLoss:
    """TRL's ``beta``, ``loss_type`` (one or a list), ``loss_weights`` (one per loss type; by
    default 1 each) and ``label_smoothing``."""

    beta: float = 0.1
    loss_type: Tuple[str, ...] = ("sigmoid",)
    loss_weights: Optional[Tuple[float, ...]] = None
    label_smoothing: float = 0.0

    @classmethod
    def of(cls, beta: float, loss_type: Any, loss_weights: Any, label_smoothing: float) -> "DPOLoss":
        """The loss of ``catwalk::finetune``'s settings, checked as TRL checks them (and a
        ``label_smoothing`` no chosen loss type reads refused, rather than ignored)."""
        types = (loss_type,) if isinstance(loss_type, str) else tuple(loss_type or ())
        if not types or any(name not in LOSSES for name in types):
            raise ConfigurationError(f"loss_type must be one of {', '.join(LOSSES)} (or a list of them), got "
                                     f"{loss_type!r}")
        if not isinstance(beta, (int, float)) or beta <= 0:
            raise ConfigurationError(f"beta must be a positive number, got {beta!r}")
        weights = None if loss_weights is None else tuple(loss_weights)
        if weights is not None and len(weights) != len(types):
            raise ConfigurationError(f"loss_weights must give one weight per loss_type ({len(types)}), got {loss_weights!r}")
        if label_smoothing and not any(name in SMOOTHED for name in types):
            raise ConfigurationError(f"label_smoothing is read by the {' and '.join(SMOOTHED)} losses only, not by "
                                     f"{', '.join(types)}: leave it at 0")
        if "robust" in types and not 0 <= label_smoothing < 0.5:
            raise ConfigurationError(f"label_smoothing must be in [0, 0.5) for the robust loss, got {label_smoothing}")
        if "exo_pair" in types and not 0 < label_smoothing < 1:
            raise ConfigurationError(f"label_smoothing must be in (0, 1) for the exo_pair loss (its ε), got {label_smoothing}")
        return cls(float(beta), types, weights, float(label_smoothing))

    def __call__(self, logps: torch.Tensor, reference: torch.Tensor, answer_tokens: torch.Tensor) -> torch.Tensor:
        """Each pair's loss, from the policy's and the reference's ``[pairs, 2]`` log-probabilities
        (chosen, rejected) and each answer's tokens."""
        ratios = logps - reference
        chosen, rejected = ratios.unbind(-1)
        tokens = answer_tokens.to(logps.dtype).unbind(-1)
        weights = self.loss_weights or (1.0,) * len(self.loss_type)
        return sum(weight * LOSSES[name](self.beta, self.label_smoothing, chosen - rejected, chosen, rejected, *tokens)
                   for name, weight in zip(self.loss_type, weights))


class PreferenceLossModel(RankClassificationModel):
    """The language model of a DPO fine-tune: the LM wrapper of rank classification (loading,
    adapter, gradient checkpointing, tied weights, contexts shared by a pair's two answers), its
    loss :class:`DPOLoss`."""

    def __init__(self, *args: Any, loss: DPOLoss = DPOLoss(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss = loss

    def forward(self, answer_tokens: torch.Tensor, reference: Optional[torch.Tensor] = None,
                **queries: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``logps``: each pair's chosen and rejected answer's summed log-probability,
        ``[pairs, 2]``; given the ``reference``'s, also ``loss`` (the pairs' summed loss, to be
        divided by the global batch's pairs), ``losses`` and ``rewards`` (``beta`` times each
        answer's log-ratio, ``[pairs, 2]``)."""
        lm = self.scoring_lm
        logliks = shared_context_logliks(lm, **queries) if "context_ids" in queries else continuation_logliks(lm, **queries)
        logps = logliks.view(-1, 2)
        if reference is None:
            return {"logps": logps.detach()}
        losses = self.loss(logps, reference, answer_tokens)
        return {"loss": losses.sum(), "losses": losses.detach(), "logps": logps.detach(),
                "rewards": self.loss.beta * (logps.detach() - reference)}


class PreferenceCollator(RankClassificationCollator):
    """Collates preference rows as rank classification collates a two-choice instance (the prompt
    shared by both answers where the batch fits the window), chosen before rejected, with each
    answer's tokens and, where every row has them, the reference log-probabilities."""

    def __call__(self, rows: Sequence[PreferenceRow]) -> Dict[str, Any]:  # type: ignore[override]
        pairs = [ChoiceRow((Query(row.prompt, row.chosen), Query(row.prompt, row.rejected)), 0) for row in rows]
        batch = super().__call__(pairs)
        for name in ("choice_instance", "choice_index", "labels", "num_choices"):
            del batch[name]
        batch["answer_tokens"] = torch.tensor([[len(row.chosen), len(row.rejected)] for row in rows])
        if all(row.reference is not None for row in rows):
            batch["reference"] = torch.tensor([row.reference for row in rows], dtype=torch.float32)
        return batch


@torch.no_grad()
def with_reference(model: PreferenceLossModel, rows: Sequence[PreferenceRow], collate: PreferenceCollator,
                   batch_size: int, rank: int, world_size: int, device: torch.device) -> list:
    """``rows`` with the reference log-probabilities they lack, measured by ``model`` as it starts
    (under an adapter, with the adapter disabled, as TRL's reference is the base model), in eval
    mode and float32 (TRL's reference model is in eval mode: no dropout). Worker ``rank`` measures
    every ``world_size``-th row; the values are then summed over the workers, each row's measured
    by one alone, so every worker holds them all (exactly). Every worker runs as many forward passes
    (FSDP gathers parameters in each)."""
    import torch.distributed as dist
    from contextlib import nullcontext

    from peft import PeftModel

    from .transfer import on_device

    missing = [n for n, row in enumerate(rows) if row.reference is None]
    if not missing:
        return list(rows)
    values = torch.zeros((len(rows), 2), dtype=torch.float64, device=device)
    shard = missing[rank::world_size]
    longest = -(-len(missing) // world_size)
    was_training = model.training
    model.eval()
    adapter_off = model.lm.disable_adapter() if isinstance(model.lm, PeftModel) else nullcontext()
    with adapter_off:
        for start in range(0, longest, batch_size):
            part = shard[start:start + batch_size]
            batch = collate([rows[n] for n in part or missing[:1]])
            logps = model(**on_device(batch, device))["logps"]
            if part:
                values[part] = logps.double()
    model.train(was_training)
    if dist.is_initialized():
        dist.all_reduce(values)
    found = values.tolist()
    return [row if row.reference is not None else row.with_reference(*found[n]) for n, row in enumerate(rows)]

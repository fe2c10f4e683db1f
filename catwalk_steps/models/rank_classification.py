"""The training-time rank-classification model and its collator.

Every choice of an instance is collated into the same batch, so ``forward()`` returns, besides
the loss, each instance's loss and whether its best-scored choice is the gold one: the training
loop sums those into an exact validation accuracy, with no metric object to sync across ranks.

With ``shared_context`` an instance's context is encoded once for all its choices, in the forward
and the backward pass (:mod:`.shared_context`): the same loss and gradients as encoding every
(context, choice) pair, for less work. Under dropout the choices then also share the context's
dropout mask, which is why the setting is part of a fine-tuned model's cache key.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from peft import PeftModel
from tango.integrations.torch import DataCollator, Model

from .adapters import Adapter, add_adapter
from .loading import ModelSpec
from .output_layer import output_layer
from .scoring import Query, collate_queries, continuation_logliks
from .shared_context import can_share_contexts, collate_shared, shared_context_logliks
from .weights import load_pretrained, tied_parameter_names

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class ChoiceRow:
    """A multiple-choice instance as rank classification trains on it: each choice's query (as
    scoring encodes it), the gold choice, and each answer's characters (what ``acc_norm`` divides
    by; ``None`` where not known)."""

    queries: Tuple[Query, ...]
    label: int
    num_chars: Optional[Tuple[int, ...]] = None


class RankClassificationModel(Model):
    """The LM of ``spec`` (or ``lm``, e.g. one whose weights are still on the meta device), with
    a fresh ``adapter`` if given (then only the adapter trains), and activations recomputed in the
    backward pass with ``gradient_checkpointing``. Contexts are shared by their choices where
    ``shared_context`` is asked for and the model can (:attr:`shares_contexts`; not with gradient
    checkpointing, nor for encoder-decoder models)."""

    def __init__(
        self,
        spec: ModelSpec,
        adapter: Optional[Adapter] = None,
        gradient_checkpointing: bool = False,
        shared_context: bool = False,
        lm: Optional["PreTrainedModel"] = None,
    ) -> None:
        super().__init__()
        lm = load_pretrained(spec) if lm is None else lm
        if gradient_checkpointing:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.shares_contexts = shared_context and can_share_contexts(lm)
        if not any(p.is_meta for p in lm.parameters()):  # else by whoever fills the weights in
            output_layer(lm)  # checked now, in eval mode, before training or sharding wraps the model
        self.lm = add_adapter(lm, adapter) if adapter is not None else lm
        #: Names that share one parameter (GPT-2's lm_head and input embeddings).
        self.tied_names = tied_parameter_names(self.lm)

    @property
    def scoring_lm(self) -> "PreTrainedModel":
        """The LM to run forward passes through: under an adapter, peft's base model, which
        holds the adapter's layers and whose forward takes ``logits_to_keep``."""
        return self.lm.get_base_model() if isinstance(self.lm, PeftModel) else self.lm

    def forward(
        self, choice_instance: torch.Tensor, choice_index: torch.Tensor, labels: torch.Tensor,
        choice_lengths: Optional[torch.Tensor] = None, num_choices: Optional[int] = None, **queries: torch.Tensor
    ) -> Dict[str, torch.Tensor]:
        """``loss``: the mean over instances of the cross-entropy over their choices' summed
        log-likelihoods; ``losses`` and ``correct``: per instance; with ``choice_lengths`` (each
        choice's answer characters and tokens) in eval mode (validation), also ``correct_norm``
        and ``correct_per_token``, the picks of ``acc_norm`` and ``acc_per_token``
        (:mod:`..reports.accuracy`). ``num_choices``: the most choices of an instance, known to
        the collator (else read from ``choice_index``, which makes the host wait for a GPU in the
        middle of the forward pass). ``queries``: the
        tensors of :func:`.scoring.collate_queries` or, for shared contexts, of
        :func:`.shared_context.collate_shared`."""
        lm = self.scoring_lm
        if "context_ids" in queries:
            logliks = shared_context_logliks(lm, **queries)
        else:
            logliks = continuation_logliks(lm, **queries)
        width = (labels.shape[0], int(choice_index.max()) + 1 if num_choices is None else num_choices)
        scores = logliks.new_full(width, float("-inf")).index_put((choice_instance, choice_index), logliks)
        losses = F.cross_entropy(scores, labels, reduction="none")
        outputs = {"loss": losses.mean(), "losses": losses.detach(), "correct": scores.argmax(-1) == labels}
        if choice_lengths is not None and not self.training:  # in float64, as the metrics divide
            for name, lengths in zip(("correct_norm", "correct_per_token"), choice_lengths.double()):
                ranked = torch.full(width, float("-inf"), dtype=torch.float64, device=logliks.device)
                ranked = ranked.index_put((choice_instance, choice_index), logliks.detach().double() / lengths)
                outputs[name] = ranked.argmax(-1) == labels
        return outputs


class RankClassificationCollator(DataCollator[ChoiceRow]):
    """Flattens the choices of each instance into one left-padded batch of queries; with
    ``shared_context``, into contexts (one per run of choices that follow the same context: one
    per instance, or one per choice where the choice is in the context, as in Winogrande) and
    their continuations, unless the batch's longest context and longest continuation, padded
    together, would not fit the model's window (then the whole batch is plain: a query cut to fit
    the window, or a long context with short choices beside a short one with long choices).

    Holds only the pad id, the length limit and whether the model is an encoder-decoder (whose
    context and continuation are cut apart: :func:`.scoring.model_input`), so it is cheap to send
    to DDP workers.
    """

    def __init__(
        self, pad_token_id: int, max_length: int, shared_context: bool = False, encoder_decoder: bool = False
    ) -> None:
        self.pad_token_id = pad_token_id
        self.max_length = max_length
        self.shared_context = shared_context
        self.encoder_decoder = encoder_decoder

    def __call__(self, items: Sequence[ChoiceRow]) -> Dict[str, Any]:
        queries = [query for item in items for query in item.queries]
        # Shared only where every query, and the padded batch (its longest context and its longest
        # continuation), fit the window, as :func:`.scoring.score_queries` batches them.
        width = max(len(q.context) for q in queries) + max(len(q.continuation) for q in queries)
        fits = width <= self.max_length + 1
        if self.shared_context and fits:
            contexts: List[Tuple[int, ...]] = []
            continuations: List[List[Tuple[int, ...]]] = []
            for n, query in enumerate(queries):
                if n == 0 or query.context != queries[n - 1].context:
                    contexts.append(query.context)
                    continuations.append([])
                continuations[-1].append(query.continuation)
            batch = collate_shared(contexts, continuations, self.pad_token_id)
        else:
            batch = collate_queries(queries, self.pad_token_id, self.max_length, self.encoder_decoder)
        batch["choice_instance"] = torch.tensor(
            [row for row, item in enumerate(items) for _ in item.queries], dtype=torch.long
        )
        batch["choice_index"] = torch.tensor(
            [choice for item in items for choice in range(len(item.queries))], dtype=torch.long
        )
        batch["labels"] = torch.tensor([item.label for item in items], dtype=torch.long)
        batch["num_choices"] = max(len(item.queries) for item in items)
        if all(item.num_chars is not None for item in items):
            chars = [n for item in items for n in item.num_chars]
            batch["choice_lengths"] = torch.tensor([chars, [len(q.continuation) for q in queries]], dtype=torch.float64)
        return batch

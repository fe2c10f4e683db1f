"""How text becomes token ids: the one place that decides special tokens, the prefix token, the
pad id and the tokens that stop a generation, for scoring, rolling windows, generation and
training alike.

The conventions are lm-evaluation-harness 0.4.13's ``HFLM`` at its defaults (``add_bos_token``
unset), so that our numbers equal its numbers:

- A causal model's text is encoded with the tokenizer's own special tokens (Llama, Mistral and
  Gemma tokenizers prepend BOS; GPT-2's adds nothing), except where the text already begins with
  the prefix token's text (what a chat template writes): no second BOS. ``add_bos_token``
  ``True``/``False`` forces special tokens on or off, as lm-eval's model argument of that name.
- A (context, continuation) pair is encoded whole and split (lm-eval's ``_encode_pair``): the
  continuation's tokens are the tail of ``context + continuation`` after the context's tokens,
  the context's trailing whitespace moved to the continuation. An empty context is the prefix
  token (BOS, else EOS), the continuation encoded without special tokens.
- A document for rolling log-likelihood is encoded like any text (so with a BOS-adding tokenizer
  it starts with BOS) and its first window conditions on the prefix token: the BOS is scored
  after a BOS, as lm-eval does (its issue #3333). We match it rather than fix it, so that
  perplexities stay comparable with published lm-eval numbers.
- A generation prompt is encoded like a context.

Encoder-decoder models (T5, BART) are encoded as lm-eval's seq2seq path encodes them: the
context (the encoder's input) and a generation prompt with the tokenizer's own special tokens (T5's
ends in EOS, BART's is ``<s> ... </s>``), a continuation encoded apart, without special tokens
(``2+2=`` + ``4`` is SentencePiece's ``['▁', '4']``, not the tail of the whole). One choice of
ours stays (:mod:`.seq2seq`): a scored continuation ends in EOS, as T0's and catwalk's rank
classification score it.
"""

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .scoring import Query

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: The lm-evaluation-harness release whose encoding these conventions reproduce.
LM_EVAL_CONVENTIONS = "lm-eval 0.4.13"
#: How an encoder-decoder's text is encoded and meets the window (:func:`.scoring.model_input`):
#: as lm-evaluation-harness's seq2seq path, its context's encoding (special tokens included) cut to
#: its last ``window`` tokens, the continuation encoded apart (until 2026-12-06 the context was
#: encoded without special tokens and an EOS appended, the continuation split from the whole
#: pair's encoding, and, before that, the continuation's length took from the context's room).
SEQ2SEQ_ENCODING = "lm-eval 0.4.13 seq2seq: context with its special tokens cut to the window, continuation apart"
#: How a BOS-adding tokenizer's whitespace-only context is encoded (:meth:`TokenConventions.pair`):
#: the prefix token alone, as lm-evaluation-harness encodes it (until 2026-12-06 the BOS was scored
#: as the continuation's first token, and cache keys held nothing of this).
WHITESPACE_CONTEXT = "a whitespace-only context is the prefix token alone"
#: What stands for an answer's first word after a chat-trained model's prompt (:meth:`TokenConventions.prompt`).
NEXT_WORD = "a"
#: A text whose encoding shows whether special tokens are added.
SAMPLE = "Question: is this a sample? Answer: yes"


@dataclass(frozen=True)
class TokenConventions:
    """``tokenizer``'s encodings for a causal LM (``encoder_decoder=False``) or an encoder-decoder,
    with special tokens as the tokenizer adds them (``add_bos_token=None``) or forced on/off."""

    tokenizer: "PreTrainedTokenizerBase"
    add_bos_token: Optional[bool] = None
    encoder_decoder: bool = False
    #: Fine-tuned on chat data as TRL trains: a prompt ends where training's learnt tokens began.
    chat_trained: bool = False

    @property
    def prefix_token_id(self) -> int:
        """What an empty context and a document's first window condition on: BOS, else EOS."""
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_token_id

    @cached_property
    def prefix_text(self) -> Optional[str]:
        """The prefix token as text: a text that starts with it gets no second one. ``None`` for a
        tokenizer with neither BOS nor EOS."""
        return None if self.prefix_token_id is None else self.tokenizer.decode(self.prefix_token_id)

    def _special_tokens(self, text: str, prefix_text: Optional[str]) -> Dict[str, bool]:
        if prefix_text and text.startswith(prefix_text):
            return {"add_special_tokens": False}
        return {} if self.add_bos_token is None else {"add_special_tokens": self.add_bos_token}

    def encode(self, text: str) -> List[int]:
        """``text``'s token ids with the special tokens a context gets (lm-eval's ``tok_encode``)."""
        return self.tokenizer.encode(text, **self._special_tokens(text, self.prefix_text))

    def plain(self, text: str) -> List[int]:
        """``text``'s token ids without any special token."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def pair(self, context: str, continuation: str) -> Query:
        """A (context, continuation) scoring query (lm-eval's ``loglikelihood``); an
        encoder-decoder's continuation is encoded apart (lm-eval's seq2seq ``_encode_pair``)."""
        if context == "":
            tokens = self.plain(continuation)
            if not tokens:
                raise ValueError(f"Continuation {continuation!r} encodes to no tokens")
            if tokens[0] == self.prefix_token_id:
                return Query(tuple(tokens[:1]), tuple(tokens[1:]))
            return Query((self.prefix_token_id,), tuple(tokens))
        stripped = context.rstrip()
        continuation = context[len(stripped):] + continuation
        context_ids = self.encode(stripped)  # a whitespace-only context: BOS alone, where one is added
        if self.encoder_decoder:
            continuation_ids = self.plain(continuation)
        else:
            continuation_ids = self.encode(stripped + continuation)[len(context_ids):]
        if not continuation_ids:
            raise ValueError(f"Continuation {continuation!r} encodes to no tokens")
        return Query(tuple(context_ids or [self.prefix_token_id]), tuple(continuation_ids))

    def document(self, text: str) -> List[int]:
        """A document's tokens for rolling log-likelihood (lm-eval's ``loglikelihood_rolling``)."""
        return self.encode(text)

    def prompt(self, text: str) -> Tuple[int, ...]:
        """A generation prompt's tokens (lm-eval's ``tok_batch_encode``); an empty prompt is the
        prefix token.

        A model fine-tuned on chat data (``chat_trained``) learnt each answer from where the
        encodings of its prompt and of the prompt with the answer part (TRL's common prefix): a
        prompt ending in whitespace that the tokenizer joins to the next word (``"ASSISTANT: "``
        under SentencePiece, whose ``▁`` then begins the answer's first token) ends before it, as
        training saw it. Which word follows is not known here, so a word of letters stands for it:
        an answer whose first token does not absorb the whitespace (a digit under SentencePiece)
        was trained after that whitespace token instead."""
        bos = None if self.encoder_decoder else self.tokenizer.bos_token  # lm-eval's seq2seq: always its specials
        ids = self.tokenizer.encode(text, **self._special_tokens(text, bos))
        if self.chat_trained and text[-1:].isspace():
            ids = ids[:common_prefix(ids, self.tokenizer.encode(text + NEXT_WORD, **self._special_tokens(text, bos)))]
        return tuple(ids) or (self.prefix_token_id,)

    def stop_token_ids(self, lm: "PreTrainedModel") -> Set[int]:
        """The tokens that end a generation without being generated: the model's generation
        config's EOS ids, where ``transformers``' ``generate`` (and so lm-evaluation-harness)
        stops; the tokenizer's EOS for a model without any. (The tokenizer's EOS also ends a
        generation as a stop string: :meth:`stop_strings`.)"""
        configured = getattr(getattr(lm, "generation_config", None), "eos_token_id", None)
        if configured is None:
            configured = self.tokenizer.eos_token_id
        return set(configured) if isinstance(configured, list) else {configured} if configured is not None else set()

    def stop_strings(self, until: Tuple[str, ...]) -> Tuple[str, ...]:
        """A generation's stop strings: ``until`` and, as lm-evaluation-harness's
        ``generate_until`` adds it, the tokenizer's EOS as text. Generative fine-tuning ends
        answers with that EOS, so a generation stops there even where the model's generation
        config names another (:meth:`stop_token_ids`)."""
        eos_id = self.tokenizer.eos_token_id
        eos = None if eos_id is None else self.tokenizer.decode(eos_id, skip_special_tokens=False)
        return until + (eos,) if eos and eos not in until else until

    def adds_special_tokens(self) -> bool:
        """Whether these conventions put special tokens where no special tokens would (the
        encoding before they were adopted): a cache key then says so."""
        return self.encode(SAMPLE) != self.plain(SAMPLE) or self.prompt(SAMPLE) != tuple(self.plain(SAMPLE))


def common_prefix(ids: Sequence[int], other: Sequence[int]) -> int:
    """How many leading tokens ``ids`` and ``other`` share (TRL's ``common_prefix_length``): where
    a text's encoding and the encoding of that text with more after it part."""
    length = 0
    for a, b in zip(ids, other):
        if a != b:
            break
        length += 1
    return length


def conventions_key(adds_special_tokens: bool, encoder_decoder: bool = False) -> Optional[Dict[str, Any]]:
    """What a cache key holds of a model's conventions: nothing where they encode as before they
    existed (GPT-2, any tokenizer without special tokens), so that those keys do not change; else
    the conventions' name and how a whitespace-only context is encoded (:data:`WHITESPACE_CONTEXT`),
    so that a result computed without the special tokens, or with that context's BOS scored, is
    never reused; for an encoder-decoder, how its text is encoded and cut
    (:data:`SEQ2SEQ_ENCODING`), so that a result encoded or cut an earlier way is never reused."""
    if encoder_decoder:
        return {"encoder_decoder": SEQ2SEQ_ENCODING}
    if not adds_special_tokens:
        return None
    return {"special_tokens": LM_EVAL_CONVENTIONS, "whitespace_context": WHITESPACE_CONTEXT}


def encoder_decoder_on_disk(file: Callable[[str, str], Optional[Path]]) -> Optional[bool]:
    """Whether the model's ``config.json`` (``file("model", "config.json")``) says it is an
    encoder-decoder; ``None`` where the file is not on this machine."""
    config = file("model", "config.json")
    return None if config is None else bool(json.loads(config.read_text()).get("is_encoder_decoder"))


def adds_special_tokens_on_disk(file: Callable[[str, str], Optional[Path]]) -> Optional[bool]:
    """:meth:`TokenConventions.adds_special_tokens` at the tokenizer's defaults, read from the
    model's files (``file("model" | "tokenizer", name)``) with the ``tokenizers`` library alone, so
    that building a step graph does not import transformers: the tokenizer's ``tokenizer.json``
    says whether it adds special tokens. ``None`` where the files cannot say: not on this machine
    (the tokenizer's, or the model's ``config.json``), or a ``tokenizer_config.json`` whose
    ``add_bos_token``/``add_eos_token`` transformers applies on load."""
    settings, fast = file("tokenizer", "tokenizer_config.json"), file("tokenizer", "tokenizer.json")
    if encoder_decoder_on_disk(file) is None or fast is None:
        return None
    if settings is not None and {"add_bos_token", "add_eos_token"} & set(json.loads(settings.read_text())):
        return None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(fast))
    return tokenizer.encode(SAMPLE).ids != tokenizer.encode(SAMPLE, add_special_tokens=False).ids

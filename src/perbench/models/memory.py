"""How many rows fit in a device's free memory: a documented estimate from the model's shape (``docs/architecture.md``,
"Batches").

For a decoder-only model with L layers, hidden size d, MLP width m, vocabulary V, H attention heads of which H_kv
hold keys and values of width h, and b bytes per value of the compute dtype:

- **weights**: parameters × b (counted only when they are not yet on the device);
- **KV cache per token**: 2 × L × H_kv × h × b (a key and a value per layer);
- **activations per token** (inference: one layer's temporaries live at a time): (4·d + 3·m) × b: the residual
  stream, its normed copy, q/k/v/o, and the MLP's gate, up and their product;
- **generation, per row**: seq × (KV + activations) + 3 × V × 4 (the step's fp32 logits, log-probabilities and
  the sampler's copy);
- **scoring, per row** (one forward, no cache): seq × activations + seq² × b × (1 + H if attention is eager): the
  4-D mask of packed rows, and eager attention's scores (SDPA's are not materialised);
- **a tree forward of n candidates** (policy accuracy's per-position candidates): n × activations + n × (cache + n)
  × b (its additive mask), halved from a cap until it fits (:func:`tree_chunk_tokens`).

The rows that fit are ⌊(free × :data:`HEADROOM` − weights not yet resident) / per row⌋, at least 1, at most ``cap``,
rounded down to a multiple of 8 from 8 on. Out-of-memory still halves the batch (:mod:`perbench.models.batching`):
the estimate is where it starts. On a CPU the sizes stay the measured fastest (``docs/benchmarks.md``), not this.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

#: the share of the free memory a batch may plan to use (the allocator's fragmentation and CUDA's own workspace)
HEADROOM = 0.85
#: the largest batch the estimate proposes
MAX_ROWS = 1024

Kind = Literal["generate", "score"]


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    params: int  # parameter count (0: estimated from the shape)
    eager_attention: bool = False

    @classmethod
    def from_config(cls, config: Any, params: int = 0) -> ModelShape:
        """The shape of a transformers config (its text part); ``params`` 0 estimates the parameter count."""
        c = config.get_text_config() if hasattr(config, "get_text_config") else config
        hidden = int(c.hidden_size)
        heads = int(c.num_attention_heads)
        kv = int(getattr(c, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(c, "head_dim", None) or hidden // heads)
        inter = int(getattr(c, "intermediate_size", None) or 4 * hidden)
        layers, vocab = int(c.num_hidden_layers), int(c.vocab_size)
        if not params:
            per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
            tied = bool(getattr(c, "tie_word_embeddings", False))
            params = layers * per_layer + vocab * hidden * (1 if tied else 2)
        eager = getattr(c, "_attn_implementation", None) == "eager"
        return cls(layers, hidden, inter, vocab, heads, kv, head_dim, params, eager)

    def weight_bytes(self, dtype_bytes: int) -> int:
        return self.params * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def activation_bytes_per_token(self, dtype_bytes: int) -> int:
        return (4 * self.hidden + 3 * self.intermediate) * dtype_bytes


def row_bytes(shape: ModelShape, seq_len: int, dtype_bytes: int, kind: Kind) -> int:
    """The memory one row of a batch needs (the module's estimate)."""
    act = shape.activation_bytes_per_token(dtype_bytes)
    if kind == "generate":
        return seq_len * (shape.kv_bytes_per_token(dtype_bytes) + act) + 3 * shape.vocab * 4
    scores = seq_len * seq_len * dtype_bytes * (1 + (shape.heads if shape.eager_attention else 0))
    return seq_len * act + scores


def rows_that_fit(
    free_bytes: int,
    shape: ModelShape,
    seq_len: int,
    dtype_bytes: int,
    kind: Kind,
    *,
    weights_resident: bool = True,
    cap: int = MAX_ROWS,
) -> int:
    """The batch size the estimate gives for ``free_bytes`` of device memory (at least 1: out-of-memory halving
    has the last word)."""
    budget = int(free_bytes * HEADROOM) - (0 if weights_resident else shape.weight_bytes(dtype_bytes))
    rows = max(1, min(cap, budget // max(1, row_bytes(shape, max(1, seq_len), dtype_bytes, kind))))
    return rows - rows % 8 if rows >= 8 else rows


def tree_chunk_tokens(free: int, shape: ModelShape, cache_len: int, dtype_bytes: int, floor: int, cap: int) -> int:
    """Candidates per tree forward (:func:`~perbench.models.stepper.tree_candidate_hidden`) that ``free`` bytes hold:
    n candidates cost n × activations plus their n × (cache + n) additive mask (and eager attention's scores); the
    largest of ``cap``, ``cap``/2, … that fits, never below ``floor`` (the CPU's size)."""
    budget = int(free * HEADROOM)
    per_score = dtype_bytes * (1 + (shape.heads if shape.eager_attention else 0))
    n = max(cap, floor)
    while n > floor and n * shape.activation_bytes_per_token(dtype_bytes) + n * (cache_len + n) * per_score > budget:
        n //= 2
    return max(n, floor)


def free_bytes(device: str) -> int | None:
    """Free memory on a CUDA device (``torch.cuda.mem_get_info``), else None (CPUs keep their measured sizes)."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    index = device.partition(":")[2]
    free, _ = torch.cuda.mem_get_info(int(index) if index else None)
    return int(free)


@dataclass(frozen=True)
class Estimate:
    """A batch size the estimate chose, with what it was chosen from (recorded in results.json ``batching``)."""

    rows: int
    free_bytes: int
    seq_len: int
    row_bytes: int
    kind: str

    def record(self) -> dict[str, int | str]:
        return asdict(self)


def shape_of(lm: Any) -> tuple[ModelShape, int]:
    """A loaded model's shape (its real parameter count) and its dtype's bytes per value."""
    import torch

    dtype_bytes = torch.empty((), dtype=lm.policy.torch_dtype()).element_size()
    params = sum(p.numel() for p in lm.model.parameters())
    return ModelShape.from_config(lm.model.config, params), dtype_bytes


def estimate_rows(
    lm: Any, seq_len: int, kind: Kind, *, cap: int = MAX_ROWS, free: int | None = None
) -> Estimate | None:
    """The estimate for a loaded model ``lm`` (a :class:`~perbench.models.loader.LoadedLM`) on its device, or None
    on a device without a memory query (a CPU). ``free``: the free bytes to plan with (default: the device's)."""
    free = free if free is not None else free_bytes(str(lm.policy.device))
    if free is None:
        return None
    shape, dtype_bytes = shape_of(lm)
    rows = rows_that_fit(free, shape, seq_len, dtype_bytes, kind, cap=cap)
    return Estimate(rows, free, seq_len, row_bytes(shape, seq_len, dtype_bytes, kind), kind)

"""Pref-LaMP (registry ``pref_lamp``): the recipe of :mod:`perbench.data.benchmarks.pref_lamp` with its encoder
given by name (:func:`perbench.models.encoder.load_encoder`; embeddings cached by its resolved path) and the
Table-1 similarity check (:mod:`.pref_lamp_table1`) in ``meta["table1"]``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from perbench.builders.pref_lamp_table1 import format_table1, random_negatives, table1
from perbench.data.benchmarks.pref_lamp import (
    LAMP5_PREFIX,
    NEGATIVE_POOLS,
    NegativePool,
    TextEncoder,
    build_pref_lamp,
    encode_cached,
    lamp5_dir,
    lamp5_file,
    mine_negatives,
    read_golds,
    strip_prefix,
)
from perbench.data.records import Benchmark
from perbench.data.rows import OnError

__all__ = [
    "LAMP5_PREFIX",
    "NEGATIVE_POOLS",
    "NamedEncoder",
    "NegativePool",
    "TextEncoder",
    "encode_cached",
    "format_table1",
    "lamp5_dir",
    "lamp5_file",
    "load_pref_lamp",
    "mine_negatives",
    "random_negatives",
    "read_golds",
    "strip_prefix",
    "table1",
]


class NamedEncoder:
    """A sentence encoder by its spec (``minilm``: the bundled all-MiniLM-L6-v2, a folder or a hub id), loaded on
    its first ``encode`` (embeddings found in the cache load nothing)."""

    def __init__(self, spec: str) -> None:
        self.name = spec

    @property
    def cache_key(self) -> str:
        """The identity its embeddings are cached under: the resolved path."""
        from perbench.models.encoder import encoder_path

        return f"encoder={encoder_path(self.name)}"

    def encode(self, texts: list[str]) -> np.ndarray:
        from perbench.models.encoder import load_encoder

        return load_encoder(self.name).encode(texts)


def load_pref_lamp(
    path: str | Path,
    *,
    layout: Literal["auto", "user", "time"] = "auto",
    splits: Sequence[str] = ("train", "dev"),
    negative_pool: NegativePool = "other_users",
    unseen_fraction: float = 0.2,
    seed: int = 0,
    encoder: str | TextEncoder = "minilm",
    profile_pairs: int = 0,
    max_profile: int | None = None,
    with_table1: bool = True,
    table1_bertscore: bool = True,
    cache_embeddings: bool = True,
    on_error: OnError = "raise",
    name: str | None = None,
) -> Benchmark:
    """Build Pref-LaMP from local LaMP-5 files (the recipe: :mod:`perbench.data.benchmarks.pref_lamp`).

    ``with_table1`` computes the mined-vs-random similarity table into ``Benchmark.meta["table1"]``.
    ``encoder`` is a spec for :func:`perbench.models.encoder.load_encoder` (embeddings are then cached
    under the perbench cache dir unless ``cache_embeddings=False``) or any object with ``encode``.
    """
    bench = build_pref_lamp(
        path,
        encoder=NamedEncoder(encoder) if isinstance(encoder, str) else encoder,
        layout=layout,
        splits=splits,
        negative_pool=negative_pool,
        unseen_fraction=unseen_fraction,
        seed=seed,
        profile_pairs=profile_pairs,
        max_profile=max_profile,
        cache_embeddings=cache_embeddings,
        on_error=on_error,
        name=name,
    )
    if with_table1 and len(bench.pairs) >= 2:
        bench.meta["table1"] = table1(bench, seed=seed, with_bertscore=table1_bertscore)
    return bench

"""PersonalLLM (Namkoong lab, ICLR 2025): simulated users as Dirichlet-weighted mixtures of open reward models.

Rows (hub ``namkoong-lab/PersonalLLM``, splits ``train`` / ``test``): ``prompt``, ``subset``, ``response_1`` ...
``response_8`` and, per response, one score column per reward model, ``response_{i}_{rm}`` (e.g.
``response_1_gemma_2b``); columns ``response_{i}_model`` name the generator and are not scores. The reward models are
the ``{rm}`` names every response has.

A simulated user u has weights w_u ~ Dirichlet(α·1) over the K reward models (seeded); their reward of a response
is r_u(y) = Σ_k w_uk · z_k(y), z_k(y) = (s_k(y) − mean_k) / sd_k with the means and sds PersonalLLM publishes
(``data/constants.py``, :data:`PUBLISHED_STANDARDISATION`), so the same weights give the same users as upstream
(``standardisation="observed"`` uses the rows read instead, for reward models outside that table). Pairs: per prompt and
user, the response with the highest r_u against each of the other responses, one list (``meta["list_id"]``), so
best-of-8 accuracy applies; a tie at the top is counted (``top_reward_tied``). The weights are the user's answer key
(``User.answer_key``): methods see the user's pairs only. ``unseen_fraction`` holds out a seeded share of users,
whose train pairs are their few-shot set.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perbench.data.benchmarks.common import finish, row_ref, rows_of
from perbench.data.policies import assign_unseen
from perbench.data.reading import detect_format
from perbench.data.records import Benchmark, PreferencePair, SkipReport, Split, User
from perbench.data.rows import DataError, ErrorSink, OnError, Row, is_number, parse_split
from perbench.data.user_context import describe_user_context

PERSONALLLM_HUB_ID = "namkoong-lab/PersonalLLM"
#: PersonalLLM's published standardisation of each reward model's score: (mean, sd) (its data/constants.py)
PUBLISHED_STANDARDISATION: dict[str, tuple[float, float]] = {
    "llama3_sfairx": (1.0637639780044557, 2.953017385451928),
    "mistral_weqweasdas": (7.071075622558594, 2.578636650248985),
    "mistral_ray": (3.0136284782886507, 1.6902981149232585),
    "gemma_7b": (1.6259730467796325, 2.6096741570264976),
    "mistral_raft": (8.309211883544922, 3.0728436748484533),
    "gemma_2b": (4.3304170169830325, 2.038611338958803),
    "oasst_deberta_v3": (2.8976835689097644, 1.7207868789061331),
    "oasst_pythia_1b": (4.293944010734558, 2.3018268820938133),
    "oasst_pythia_7b": (4.706351243972779, 1.3659142113789966),
    "beaver_7b": (6.233516894340515, 3.012641148973965),
}
#: pairs a load may build before it refuses (n_users × rows × (responses − 1)), with the estimate in the message
MAX_PAIRS = 5_000_000
_SCORE = re.compile(r"^response_(\d+)_(.+)$")


def score_columns(columns: Sequence[str]) -> tuple[int, list[str]]:
    """-> (number of responses, the reward-model names every response has a score column for)."""
    responses = sorted(int(c[len("response_") :]) for c in columns if re.fullmatch(r"response_\d+", c))
    if responses != list(range(1, len(responses) + 1)):
        return 0, []
    by_rm: dict[str, set[int]] = {}
    for c in columns:
        m = _SCORE.match(c)
        if m and m.group(2) != "model":
            by_rm.setdefault(m.group(2), set()).add(int(m.group(1)))
    rms = sorted(rm for rm, got in by_rm.items() if got >= set(responses))
    return len(responses), rms


def _rows(source: str | Path, fmt: str | None) -> Iterator[tuple[Row, Split | None]]:
    kind = fmt or detect_format(source)
    if kind in ("hub", "hf_disk"):
        for split in ("train", "test"):
            for row in rows_of(source, fmt=kind, split=split):
                yield row, split  # type: ignore[misc]
        return
    for row in rows_of(source, fmt=kind, split=None):
        yield row, None


def load_personalllm(
    source: str | Path = PERSONALLLM_HUB_ID,
    *,
    n_users: int = 10,
    alpha: float = 0.05,
    reward_models: Sequence[str] | None = None,
    reward_model_paths: Mapping[str, str] | None = None,
    unseen_fraction: float = 0.0,
    seed: int = 0,
    standardisation: str = "published",
    max_pairs: int = MAX_PAIRS,
    fmt: str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Benchmark:
    """Load PersonalLLM's evaluation rows and simulate ``n_users`` users (see the module docstring).

    ``reward_model_paths``: each reward model's hub id or local folder (a ``hub_rm``); with them, generated text gets
    each user's exact reward downstream (``personal_reward``, :mod:`perbench.metrics.simulated`)."""
    if isinstance(n_users, bool) or not isinstance(n_users, int) or n_users < 1:
        raise ValueError(f"n_users must be an integer >= 1, got {n_users!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha > 0:
        raise ValueError(f"alpha must be a number > 0, got {alpha!r}")
    if standardisation not in ("published", "observed"):
        raise ValueError(f"standardisation must be 'published' or 'observed', got {standardisation!r}")
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    kept: list[tuple[Row, Split, str, list[str], np.ndarray]] = []
    n_resp, rms = 0, list(reward_models or [])
    rows_read = 0
    first_where = ""
    first_found: list[str] = []
    for row, hf_split in _rows(source, fmt):
        rows_read += 1
        if not n_resp:
            n_resp, found = score_columns(list(row.data))
            if n_resp < 2 or not found:
                raise row.error("response_1", "no response_{i} columns with reward-model scores response_{i}_{rm}")
            missing = sorted(set(rms) - set(found))
            if missing:
                raise row.error(f"response_1_{missing[0]}", f"no such reward-model score column; found {found}")
            rms = rms or found
            first_found = found
            first_where = row.where
            if standardisation == "published":
                unknown = sorted(set(rms) - set(PUBLISHED_STANDARDISATION))
                if unknown:
                    raise row.error(
                        f"response_1_{unknown[0]}",
                        f"PersonalLLM publishes no standardisation for {unknown}; known: "
                        f"{sorted(PUBLISHED_STANDARDISATION)} (standardisation='observed' uses the rows read)",
                    )
        try:
            got_resp, got_rms = score_columns(list(row.data))
            if got_resp != n_resp:
                where = f"response_{max(got_resp, n_resp)}"
                raise row.error(where, f"{got_resp} responses; {first_where} has {n_resp}")
            absent = sorted(set(first_found) - set(got_rms))
            if absent:
                raise row.error(f"response_1_{absent[0]}", f"no score column here; {first_where} has {first_found}")
            new = sorted(set(got_rms) - set(first_found))
            if new:
                raise row.error(f"response_1_{new[0]}", f"a reward model {first_where} has no score columns for")
            prompt = row.text("prompt")
            texts = [row.text(f"response_{i}", allow_empty=True) for i in range(1, n_resp + 1)]
            scores = np.empty((n_resp, len(rms)))
            for i in range(n_resp):
                for k, rm in enumerate(rms):
                    v = row.require(f"response_{i + 1}_{rm}")
                    if not is_number(v) or not np.isfinite(float(v)):
                        raise row.error(f"response_{i + 1}_{rm}", f"expected a finite number, got {v!r}")
                    scores[i, k] = float(v)
            split = hf_split or (parse_split(row, "split", row.get("split")) if row.has("split") else "test")
        except DataError as e:
            sink(e, n=n_users * max(n_resp - 1, 1))
            continue
        kept.append((row, split, prompt, texts, scores))
    if not kept:
        raise DataError(str(source), None, None, "no usable rows")
    estimate = n_users * len(kept) * (n_resp - 1)
    if estimate > max_pairs:
        raise ValueError(
            f"n_users={n_users} × {len(kept)} rows × {n_resp - 1} rejected responses = {estimate:,} pairs, over "
            f"max_pairs={max_pairs:,}; lower n_users or raise max_pairs"
        )
    if standardisation == "published":
        mean = np.array([PUBLISHED_STANDARDISATION[rm][0] for rm in rms])
        sd = np.array([PUBLISHED_STANDARDISATION[rm][1] for rm in rms])
    else:
        every = np.concatenate([s for *_, s in kept])
        mean, sd = every.mean(0), every.std(0)
        sd[sd == 0] = 1.0
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(len(rms), alpha), size=n_users)
    user_ids = [f"personalllm_u{u:03d}" for u in range(n_users)]
    pairs: list[PreferencePair] = []
    for row, split, prompt, texts, scores in kept:
        z = (scores - mean) / sd
        for uid, w in zip(user_ids, weights, strict=True):
            r = z @ w
            best = int(np.argmax(r))
            if int((r == r[best]).sum()) > 1:
                skipped.add("top_reward_tied", f"{row.where}/{uid}", n=n_resp - 1)
                continue
            for j in range(n_resp):
                if j == best:
                    continue
                meta: dict[str, Any] = {
                    "source": row.where,
                    "list_id": row_ref(row),
                    "reward_gap": float(r[best] - r[j]),
                }
                pid = f"personalllm:{uid}:{row_ref(row)}:{j}"
                pairs.append(PreferencePair(pid, uid, prompt, texts[best], texts[j], split, meta))
    standardisation_table = {rm: [float(m), float(s)] for rm, m, s in zip(rms, mean, sd, strict=True)}
    truth: dict[str, Any] | None = None
    if reward_model_paths is not None:
        missing_paths = sorted(set(rms) - set(reward_model_paths))
        if missing_paths:
            raise ValueError(f"reward_model_paths: no path for {missing_paths} (the score columns name {rms})")
        paths = {rm: str(reward_model_paths[rm]) for rm in rms}
        truth = {"kind": "personalllm", "order": rms, "reward_models": paths, "standardisation": standardisation_table}
    unseen = assign_unseen(user_ids, unseen_fraction, seed)
    users = {
        uid: User(
            uid,
            seen=uid not in unseen,
            answer_key={
                "weights": dict(zip(rms, map(float, w), strict=True)),
                "rubric_text": "Reward = " + " + ".join(f"{x:.2f}·{rm}" for rm, x in zip(rms, w, strict=True)),
                # what decides downstream quality is part of the key (and so of the benchmark's fingerprint)
                **({"reward_models": truth["reward_models"]} if truth else {}),
            },
        )
        for uid, w in zip(user_ids, weights, strict=True)
    }
    meta = {
        "source": str(source),
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "reward_models": rms,
        "standardisation": standardisation_table,
        "standardisation_source": "PersonalLLM's published constants (data/constants.py)"
        if standardisation == "published"
        else "mean and sd over the rows read",
        **({"ground_truth": truth} if truth else {}),
        "users": f"{n_users} simulated users, weights ~ Dirichlet({alpha}) over {len(rms)} reward models (seed {seed})",
        "split_policy": "the hub split (train / test), else a split column, else test",
        "seen_policy": f"seeded unseen_fraction={unseen_fraction} (seed {seed}) of the users",
        "user_context": describe_user_context(
            "pairs_only", users, included=["the user's own train pairs"], withheld=["weights"]
        ),
    }
    return finish(name or "personalllm", pairs, users, skipped, meta)

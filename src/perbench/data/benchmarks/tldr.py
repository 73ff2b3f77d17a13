"""Personalized TL;DR from ``openai/summarize_from_feedback`` (config ``comparisons``).

Rows: ``worker``, ``info`` (``id``, ``post``; CNN/DM rows carry ``article`` and no post), ``summaries`` (two
``{text, policy}``), ``choice`` (0/1, the worker's pick) and ``split`` (``train``, ``valid1``, ``valid2``).
Prompt: ``Human: {post} Assistant:``; summaries and posts are stripped of surrounding whitespace.

Protocol ``"pal"`` (PAL / P-DPO synthetic users):
  keep comparisons where both summaries come from supervised policies (policy name contains ``sup``);
  the 10 workers with most comparisons are the seen users; those at ranks 3, 4, 5 (0-indexed) prefer the
  *shorter* summary, the other 7 the *longer* one (length in characters; equal lengths are counted and
  dropped); labels are rewritten by that rule. Unseen users: the other workers with >= 100 comparisons;
  each draws its rule with a seeded coin (P(shorter) = 3/10, the seen users' mix) -- our choice, the papers
  are silent. An unseen user's few-shot set is their first ``n_shot`` comparisons, taken post by post in a
  seeded order (the boundary post's other comparisons stay in the train split, after them); the posts left
  are test, so no test prompt is among the user's shot prompts. A seen user's posts are split
  ``seen_test_fraction`` test / rest train, by post, seeded -- our choice.
  The rule is the user's answer key (``User.answer_key``): methods see the user's pairs only.

Protocol ``"lore"`` (LoRe): the workers' real labels; workers present in both the train and validation
splits, 50/50 seen/unseen by seed; at most 150 train pairs per seen user and at most 50 few-shot pairs per
unseen user (seeded sample of their train-split comparisons); test = their validation comparisons.

``source`` may be the hub id, a ``save_to_disk`` folder (every split is read), one JSONL/JSON/Parquet file, or
a plain folder of such files (the original ``batch*.json`` JSON Lines files, or the hub's parquet shards).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perbench.data.policies import assign_unseen
from perbench.data.reading import detect_format, read_rows
from perbench.data.records import Benchmark, PreferencePair, SkipReport, Split, User, dedup_pairs
from perbench.data.rows import DataError, ErrorSink, OnError, Row, check_text, type_name
from perbench.data.user_context import describe_user_context

TLDR_HUB_ID = "openai/summarize_from_feedback"
TldrProtocol = Literal["pal", "lore"]


@dataclass
class _Comparison:
    worker: str
    post_id: str
    post: str
    texts: tuple[str, str]
    policies: tuple[str | None, str | None]
    choice: int
    split: str | None
    where: str
    label: str
    line: int


def tldr_prompt(post: str) -> str:
    return f"Human: {post} Assistant:"


def is_supervised(policy: str | None) -> bool:
    return policy is not None and "sup" in policy.lower()


def iter_tldr_rows(
    source: str | Path,
    *,
    fmt: str | None = None,
    config: str = "comparisons",
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Rows from every split / file of the source."""
    path = Path(source)
    if (
        path.is_dir()
        and fmt is None
        and not any((path / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json"))
    ):
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl", ".parquet"))
        if not files:
            raise FileNotFoundError(f"{path}: no *.json/*.jsonl/*.parquet files, not a save_to_disk folder")
        for f in files:
            yield from read_rows(f, fmt="parquet" if f.suffix == ".parquet" else "json")
        return
    kind = fmt or detect_format(source)
    if kind in ("hub", "hf_disk"):
        yield from read_rows(source, fmt=kind, split="*", config=config)
    else:
        yield from read_rows(source, fmt=kind)


def _parse(row: Row) -> _Comparison | None:
    """A comparison, or None for a row without a Reddit post (CNN/DM articles)."""
    worker = row.ident("worker")
    info = row.obj("info")
    post_value = info.get("post")
    if post_value is None:
        return None
    post = check_text(row, "info.post", post_value).strip()
    post_id = row.ident("info.id") if info.get("id") is not None else post[:64]
    summaries = row.seq("summaries")
    if len(summaries) != 2:
        raise row.error("summaries", f"expected 2 summaries, got {len(summaries)}")
    texts: list[str] = []
    policies: list[str | None] = []
    for i, s in enumerate(summaries):
        if not isinstance(s, Mapping):
            raise row.error(f"summaries.{i}", f"expected a {{text, policy}} object, got {type_name(s)}")
        if s.get("text") is None:
            raise row.error(f"summaries.{i}.text", "missing")
        texts.append(check_text(row, f"summaries.{i}.text", s["text"]).strip())
        policy = s.get("policy")
        if policy is not None and not isinstance(policy, str):
            raise row.error(f"summaries.{i}.policy", f"expected a string, got {type_name(policy)}")
        policies.append(policy)
    choice = row.require("choice")
    if isinstance(choice, bool) or not isinstance(choice, int) or choice not in (0, 1):
        raise row.error("choice", f"expected 0 or 1, got {choice!r}")
    split = row.get("split")
    if split is not None and not isinstance(split, str):
        raise row.error("split", f"expected a string, got {type_name(split)}")
    return _Comparison(
        worker,
        post_id,
        post,
        (texts[0], texts[1]),
        (policies[0], policies[1]),
        choice,
        split,
        row.where,
        row.label,
        row.line,
    )


def _is_train(c: _Comparison) -> bool:
    return c.split is not None and c.split.strip().lower() == "train"


def _pair(c: _Comparison, chosen: int, split: Split, rule: str) -> PreferencePair:
    pid = f"tldr:{Path(c.label).name}:{c.line}"
    return PreferencePair(
        pid,
        c.worker,
        tldr_prompt(c.post),
        c.texts[chosen],
        c.texts[1 - chosen],
        split,
        {
            "source": c.where,
            "post_id": c.post_id,
            "label": rule,
            "upstream_split": c.split,
            "chosen_policy": c.policies[chosen],
            "rejected_policy": c.policies[1 - chosen],
        },
    )


def _length_choice(c: _Comparison, prefers: str) -> int | None:
    la, lb = len(c.texts[0]), len(c.texts[1])
    if la == lb:
        return None
    shorter = 0 if la < lb else 1
    return shorter if prefers == "shorter" else 1 - shorter


def load_tldr(
    source: str | Path = TLDR_HUB_ID,
    *,
    protocol: TldrProtocol = "pal",
    config: str = "comparisons",
    fmt: str | None = None,
    supervised_only: bool | None = None,
    policy_filter: Callable[[str | None], bool] = is_supervised,
    n_users: int = 10,
    shorter_ranks: Sequence[int] = (3, 4, 5),
    unseen_min_comparisons: int = 100,
    n_shot: int = 50,
    seen_test_fraction: float = 0.2,
    max_train_per_seen: int = 150,
    max_fewshot_per_unseen: int = 50,
    seed: int = 0,
    on_error: OnError = "raise",
    name: str | None = None,
) -> Benchmark:
    """Personalized TL;DR under the ``pal`` (synthetic length users) or ``lore`` (real labels) protocol.

    ``supervised_only`` defaults to True for ``pal`` and False for ``lore``; it keeps comparisons whose two
    policies both pass ``policy_filter`` (default: the name contains ``sup``, which also matches
    ``sup4_ppo_...`` fine-tunes -- pass a stricter predicate to keep plain supervised models only).
    """
    if protocol not in ("pal", "lore"):
        raise ValueError(f"protocol must be 'pal' or 'lore', got {protocol!r}")
    sup_only = (protocol == "pal") if supervised_only is None else supervised_only
    skipped = SkipReport()
    sink = ErrorSink(on_error, skipped)
    comps: list[_Comparison] = []
    rows_read = 0
    for label, line, data in iter_tldr_rows(source, fmt=fmt, config=config):
        rows_read += 1
        row = Row(label, line, data)
        try:
            comp = _parse(row)
            if protocol == "lore" and comp is not None and comp.split is None:
                raise row.error("split", "missing (the LoRe protocol needs each row's train/valid split)")
        except DataError as e:
            sink(e)
            continue
        if comp is None:
            skipped.add("no_reddit_post", row.where)
        elif sup_only and not all(policy_filter(p) for p in comp.policies):
            skipped.add("not_both_supervised", row.where)
        else:
            comps.append(comp)

    if protocol == "pal":
        pairs, users, policy = _pal(
            comps,
            skipped,
            n_users=n_users,
            shorter_ranks=shorter_ranks,
            unseen_min=unseen_min_comparisons,
            n_shot=n_shot,
            test_fraction=seen_test_fraction,
            seed=seed,
        )
    else:
        pairs, users, policy = _lore(
            comps, skipped, max_train=max_train_per_seen, max_fewshot=max_fewshot_per_unseen, seed=seed
        )
    meta = {
        "source": str(source),
        "protocol": protocol,
        "rows_read": rows_read,
        "rows_with_errors": sink.count,
        "supervised_only": sup_only,
        "prompt_template": "Human: {post} Assistant:",
        "seed": seed,
        **policy,
    }
    return Benchmark(name or f"tldr_{protocol}", pairs, users, skipped=skipped, meta=meta, weighting="pair")


def _by_worker(comps: Sequence[_Comparison]) -> dict[str, list[_Comparison]]:
    out: dict[str, list[_Comparison]] = {}
    for c in comps:
        out.setdefault(c.worker, []).append(c)
    return out


def _pal(
    comps: list[_Comparison],
    skipped: SkipReport,
    *,
    n_users: int,
    shorter_ranks: Sequence[int],
    unseen_min: int,
    n_shot: int,
    test_fraction: float,
    seed: int,
) -> tuple[list[PreferencePair], dict[str, User], dict[str, Any]]:
    groups = _by_worker(comps)
    ranking = sorted(groups, key=lambda w: (-len(groups[w]), w))
    seen = ranking[:n_users]
    unseen = [w for w in ranking[n_users:] if len(groups[w]) >= unseen_min]
    for w in ranking[n_users:]:
        if len(groups[w]) < unseen_min:
            for c in groups[w]:
                skipped.add("worker_below_min_comparisons", c.where)
    p_shorter = len([r for r in shorter_ranks if r < n_users]) / max(n_users, 1)
    prefers: dict[str, str] = {}
    for rank, w in enumerate(seen):
        prefers[w] = "shorter" if rank in shorter_ranks else "longer"
    for w in unseen:
        prefers[w] = "shorter" if random.Random(f"{seed}/{w}").random() < p_shorter else "longer"

    labelled: dict[str, list[PreferencePair]] = {}
    for w in [*seen, *unseen]:
        out = []
        for c in groups[w]:
            pick = _length_choice(c, prefers[w])
            if pick is None:
                skipped.add("equal_length", c.where)
                continue
            out.append(_pair(c, pick, "test", "length rule (the user's answer key)"))
        labelled[w] = dedup_pairs(out, skipped)

    pairs: list[PreferencePair] = []
    for w in seen:
        posts = sorted({str(p.meta["post_id"]) for p in labelled[w]})
        random.Random(f"{seed}/{w}/posts").shuffle(posts)
        n_test = round(test_fraction * len(posts))
        if len(posts) >= 2:
            n_test = min(max(n_test, 1), len(posts) - 1)
        test_posts = set(posts[:n_test])
        for p in labelled[w]:
            pairs.append(_with_split(p, "test" if p.meta["post_id"] in test_posts else "train"))
    for w in unseen:
        # by post, as for seen users: a post's comparisons are all shots or all test, so no test prompt is
        # among the user's shot prompts. Posts in seeded order become shots until n_shot comparisons are reached
        # (the boundary post's other comparisons stay train, after the first n_shot); the rest are test.
        by_post: dict[str, list[PreferencePair]] = {}
        for p in labelled[w]:
            by_post.setdefault(str(p.meta["post_id"]), []).append(p)
        posts = sorted(by_post)
        random.Random(f"{seed}/{w}/shots").shuffle(posts)
        taken = 0
        for post in posts:
            split: Split = "train" if taken < n_shot else "test"
            mine = by_post[post]
            random.Random(f"{seed}/{w}/{post}").shuffle(mine)
            pairs.extend(_with_split(p, split) for p in mine)
            taken += len(mine) if split == "train" else 0
    users = {}
    for rank, w in enumerate([*seen, *unseen]):
        if not labelled[w]:
            skipped.add("user_without_pairs", w)
            continue
        users[w] = User(
            w,
            seen=rank < len(seen),
            answer_key={"prefers": prefers[w], "rubric_text": f"Prefers {prefers[w]} summaries."},
            meta={"rank": rank, "comparisons": len(groups[w])},
        )
    policy = {
        "seen_policy": f"top {n_users} workers by comparisons; ranks {list(shorter_ranks)} prefer shorter",
        "unseen_policy": f"other workers with >= {unseen_min} comparisons; seeded coin P(shorter)={p_shorter}",
        "split_policy": f"seen: posts {test_fraction} test (seeded, by post); unseen: posts (seeded order) train "
        f"until {n_shot} shots, the remaining posts test (shots and test never share a post)",
        "label_rule": "length in characters after stripping; equal lengths dropped",
        "user_context": describe_user_context(
            "pairs_only",
            users,
            included=["own train pairs"],
            withheld=["the length rule (prefers shorter / longer)"],
        ),
    }
    return pairs, users, policy


def _with_split(p: PreferencePair, split: Split) -> PreferencePair:
    return PreferencePair(p.pair_id, p.user_id, p.prompt, p.chosen, p.rejected, split, p.meta)


def _lore(
    comps: list[_Comparison],
    skipped: SkipReport,
    *,
    max_train: int,
    max_fewshot: int,
    seed: int,
) -> tuple[list[PreferencePair], dict[str, User], dict[str, Any]]:
    groups = _by_worker(comps)
    both = sorted(w for w, cs in groups.items() if any(_is_train(c) for c in cs) and any(not _is_train(c) for c in cs))
    for w in sorted(set(groups) - set(both)):
        for c in groups[w]:
            skipped.add("worker_not_in_both_splits", c.where)
    unseen = assign_unseen(both, 0.5, seed)
    pairs: list[PreferencePair] = []
    users: dict[str, User] = {}
    for w in both:
        labelled = dedup_pairs(
            [_pair(c, c.choice, "train" if _is_train(c) else "test", "worker label") for c in groups[w]],
            skipped,
        )
        train = [p for p in labelled if p.split == "train"]
        random.Random(f"{seed}/{w}").shuffle(train)
        cap = max_fewshot if w in unseen else max_train
        for p in train[cap:]:
            skipped.add("over_fewshot_cap" if w in unseen else "over_train_cap", p.pair_id)
        pairs.extend(train[:cap])
        pairs.extend(p for p in labelled if p.split == "test")
        if not labelled:
            skipped.add("user_without_pairs", w)
            continue
        users[w] = User(w, seen=w not in unseen, meta={"comparisons": len(groups[w])})
    policy = {
        "seen_policy": "workers in both train and validation; 50/50 seen/unseen (seeded)",
        "split_policy": f"train split -> train (<= {max_train} per seen user, <= {max_fewshot} few-shot per "
        "unseen user, seeded sample); validation -> test",
        "label_rule": "the worker's own choice",
        "user_context": describe_user_context(
            "pairs_only", users, included=["own train pairs"], note="real labels: there is no answer key to withhold"
        ),
    }
    return pairs, users, policy

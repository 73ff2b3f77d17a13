"""Benchmark checks a run makes right after loading and before any model loads.

:func:`check_benchmark` turns a benchmark on which a number would be meaningless into a located
:class:`~perbench.data.rows.DataError` (no pairs, no test pairs, no train pairs for a method that fits on
them), re-marks seen users without train pairs as unseen (whatever loader built the benchmark), and returns
notes for the report. ``perbench validate`` runs the same checks (with ``needs_train=False``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perbench.data.policies import demote_untrained, demotion_note
from perbench.data.records import Benchmark
from perbench.data.rows import DataError


def check_benchmark(bench: Benchmark, *, needs_train: bool) -> list[str]:
    """Raise :class:`DataError` when no method could produce a meaningful number on ``bench``; else return
    notes (one line each) for the report.

    Errors: no pairs at all; no test pairs; ``needs_train`` (some method fits on the seen users' train pairs)
    and there are none -- because every pair is test, or because every user is unseen -- unless the benchmark is
    evaluation-only by design (``meta["evaluation_only"]``, e.g. Personalized RewardBench): then such methods are
    reported not applicable. A seen user without
    train pairs while others have some is re-marked unseen in place (listed in
    ``meta["seen_users_without_train"]``), so no method scores them as a user it was trained on. The notes are
    also stored in ``meta["notes"]``, so a run's results carry them.
    """
    path = str(bench.meta.get("source", bench.name))
    if not bench.pairs:
        raise DataError(path, None, None, f"no usable pairs ({_dropped(bench)}); there is nothing to evaluate")
    if not bench.test_pairs():
        raise DataError(
            path,
            None,
            "split",
            f"no test pairs: all {len(bench.pairs)} pairs are train ({_policy(bench, 'split_policy')}); "
            f"nothing would be evaluated. Fix: {_split_fix(bench)}",
        )
    notes = [str(n) for n in bench.meta.get("notes", [])]
    bench.users, demoted = demote_untrained(bench.users, bench.pairs)
    if demoted:
        before = bench.meta.get("seen_users_without_train") or {}
        users = sorted(set(before.get("users", [])) | set(demoted))
        bench.meta["seen_users_without_train"] = {"count": len(users), "users": users[:50]}
        policy = bench.meta.get("seen_policy")
        bench.meta["seen_policy"] = (f"{policy}; " if policy else "") + (
            f"{len(demoted)} seen user(s) without train pairs re-marked unseen"
        )
        notes.append(demotion_note(demoted))
    has_train = any(p.split == "train" for p in bench.pairs)
    if needs_train and not bench.train_pairs() and not bench.meta.get("evaluation_only"):
        if not has_train:
            raise DataError(
                path,
                None,
                "split",
                f"no train pairs ({_policy(bench, 'split_policy')}): without a mapped split field every pair is "
                f"test, so the methods that fit on train pairs cannot run. Fix: {_split_fix(bench)}; or run only "
                "methods that need no training",
            )
        raise DataError(
            path,
            None,
            "seen",
            f"no seen user has train pairs ({len(bench.seen_users)} seen, {len(bench.unseen_users)} unseen; "
            f"{_policy(bench, 'seen_policy')}): the train pairs belong to unseen users, so the methods that fit on "
            "train pairs have nothing to fit; mark some users seen (fewer unseen_users, a lower unseen_fraction, "
            "or seen=true in the file)",
        )
    if not has_train:
        notes.append(
            "no train pairs: every user is evaluated without training data; methods that fit on train pairs "
            "are reported not applicable"
            if bench.meta.get("evaluation_only")
            else "no train pairs: every user is evaluated without training data (zero-shot)"
        )
    no_shots = [u for u in bench.unseen_users if not bench.fewshot(u, 1)]
    if no_shots and has_train:
        notes.append(
            f"{len(no_shots)} unseen user(s) have no few-shot pairs: methods that adapt from shots report them "
            "as not applicable"
        )
    shared = shot_prompt_overlap(bench)
    if shared:
        notes.append(
            f"{shared} test pair(s) of unseen users share their prompt with one of the same user's few-shot pairs "
            "(the split does not keep shot and test prompts apart)"
        )
    dropped = bench.skipped.total()
    if dropped:
        notes.append(f"{dropped} pair(s) dropped while loading ({_dropped(bench)})")
    notes = list(dict.fromkeys(notes))
    bench.meta["notes"] = notes  # results.json carries the benchmark's meta
    return notes


def shot_prompt_overlap(bench: Benchmark) -> int:
    """How many unseen users' test pairs have a prompt that is also the prompt of one of that user's shots."""
    from perbench.data.records import prompt_key

    unseen = set(bench.unseen_users)
    shots: dict[str, set[str]] = {}
    tests: list[tuple[str, str]] = []
    for p in bench.pairs:
        if p.user_id in unseen:
            if p.split == "train":
                shots.setdefault(p.user_id, set()).add(prompt_key(p.prompt))
            else:
                tests.append((p.user_id, prompt_key(p.prompt)))
    return sum(key in shots.get(u, ()) for u, key in tests)


def data_warnings(bench: Benchmark, methods: Sequence[str] | None = None) -> list[str]:
    """What ``perbench validate`` warns about: the methods (of ``methods``, default every registered one) that this
    data leaves without train pairs to fit on or without shots to adapt from."""
    from perbench import registry

    def classes() -> dict[str, Any]:
        names = list(dict.fromkeys(methods if methods is not None else registry.reward_models.names()))
        return {n: registry.reward_models.get(n) for n in names}

    out: list[str] = []
    if not bench.train_pairs():
        fit = [n for n, c in classes().items() if c.needs_train_pairs]
        why = "no seen users" if not bench.seen_users else "no train pairs for seen users"
        if fit:
            outcome = (
                "are reported not applicable"
                if bench.meta.get("evaluation_only")
                else "cannot run: a run that lists any of them stops with an error"
            )
            fix = ""
            if (
                bench.pairs
                and not any(p.split == "train" for p in bench.pairs)
                and not bench.meta.get("evaluation_only")
            ):
                fix = f". Fix: {_split_fix(bench)}"
            out.append(f"{why}: the methods that fit on train pairs ({', '.join(fit)}) {outcome}{fix}")
    no_shots = [u for u in bench.unseen_users if not bench.fewshot(u, 1)]
    if no_shots:
        adapt = [
            n
            for n, c in classes().items()
            if not c.user_agnostic and c.uses_shots and not getattr(c, "scores_without_shots", False)
        ]
        if adapt:
            out.append(
                f"{len(no_shots)} unseen user(s) have no train pairs to adapt from (e.g. {no_shots[0]!r}): methods "
                f"that adapt from shots ({', '.join(adapt)}) report them not applicable"
            )
    return out


def _policy(bench: Benchmark, key: str) -> str:
    value: Any = bench.meta.get(key)
    return f"{key.replace('_', ' ')}: {value}" if value else f"{key.replace('_', ' ')} not recorded"


def _split_fix(bench: Benchmark) -> str:
    fix = bench.meta.get("split_fix")
    return str(fix) if fix else "give the loader a train/test split"


def skip_line(bench: Benchmark) -> str:
    """The skip report of a loaded benchmark in one line (the run prints one for every benchmark it loads)."""
    dropped = bench.skipped.total()
    head = f"{dropped} pair(s) skipped" if dropped else "no pair skipped"
    return f"{head} ({_dropped(bench)})"


#: what a skip reason means, in words a reader can follow
SKIP_REASONS = {
    "no_candidate_meets_rubric": "no response in the prompt's candidate pool meets the user's rubric, so that (user, "
    "prompt) has no chosen response",
    "no_candidate_violates_rubric": "no response in the prompt's candidate pool violates the user's rubric, so that "
    "(user, prompt) has no rejected response",
}


def _dropped(bench: Benchmark) -> str:
    rows = bench.meta.get("rows_read")
    counts = bench.skipped.counts
    parts = []
    for r, n in counts.most_common(5):
        why = SKIP_REASONS.get(r)
        parts.append(f"{n} {bench.skipped.unit(r)}(s): {why} [{r}]" if why else f"{r}: {n} {bench.skipped.unit(r)}(s)")
    head = f"{rows} row(s) read; " if rows is not None else ""
    return head + ("; ".join(parts) if parts else "nothing skipped")

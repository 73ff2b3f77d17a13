"""Load any preference file into a :class:`~perbench.data.records.Benchmark`, with loud, located errors.

Formats: JSONL, JSON (a list of objects or ``{"data": [...]}``; an object holding rows under other keys too is
refused), CSV/TSV, Parquet, a Hugging Face dataset folder written by ``save_to_disk``, or (with network) a hub
id ``org/name``. Named pipes and devices are refused before reading. A :class:`FieldMap` says which
source column feeds each canonical field, e.g. ``"user_id=ground_truth_persona,prompt=question"``.

Row numbers: JSONL and CSV report the 1-based line in the file; JSON arrays, Parquet and HF datasets report
the 1-based position of the record. Every problem is either a :class:`DataError` naming file, row and field,
or (``on_error="skip"``) a counted entry in ``Benchmark.skipped`` -- never a silent drop.

Reading: text files must be UTF-8 (a UTF-8 or UTF-16 byte-order mark is honoured). Another encoding, a binary
file under a text name (pickle, gzip, zip, Parquet) and a Git LFS pointer are errors that say what the file
is. A CSV header that names a column twice is an error; so is a JSON object with a key twice, and JSON nested
too deeply to read.

Policies (recorded in ``Benchmark.meta``):

* split: taken from a ``split`` field when one is mapped (or a ``split`` column exists); otherwise every pair
  is ``test``, unless ``test_fraction`` asks for a seeded per-user split (``round(f·n)`` of each user's pairs
  become test; a user with two pairs or more keeps at least one train pair and gets at least one test pair).
* seen/unseen users: a ``seen`` field if mapped, else the ``unseen_users`` list, else a seeded
  ``unseen_fraction`` of the sorted user ids; default: every user is seen. When the benchmark has train
  pairs, a seen user without any is evaluated as unseen (never seen in training: few-shot adaptation only),
  listed in ``meta["seen_users_without_train"]`` and ``meta["notes"]``.
* user ids: a string or an integer in Unicode NFC, surrounding whitespace and zero-width characters stripped, so
  ``1``, ``"1"`` and ``" 1 "`` are one user; when a file writes one id in several forms the merge is counted in
  ``meta["user_id_merges"]``.
* conversations: when chosen and rejected are conversations their turns before the response must agree, and a
  prompt column must ask their last user turn's question; otherwise the row is an error.
  ``default_user`` puts every pair of a file without a user field under one user.
* degenerate pairs: an empty (or whitespace-only) response, or chosen equal to rejected up to whitespace,
  is dropped and counted (``empty_response``, ``chosen_equals_rejected``) -- the pair holds no preference.
* duplicates: pairs are deduplicated on (user, prompt, chosen, rejected), whitespace and Unicode-form differences
  ignored, and counted, so metrics are pair-weighted; ``dedup=False`` keeps duplicates (row-weighted).
* mirrors: a pair and another user's pair the other way round (same prompt and split) are matched one to one;
  dedup, ``test_fraction`` and the caps keep them together, and the matched pairs form the
  ``personalization_only`` subset (any user-agnostic scorer gets exactly ½ on it, ties ½).
* caps: ``max_prompts`` keeps a seeded choice of prompts, ``max_pairs`` a seeded choice of pairs (mirrors
  together); recorded in ``meta["cap"]``.
* long texts: a response over ``max_chars`` characters (default :data:`DEFAULT_MAX_CHARS`) keeps its first
  ``max_chars``; a prompt (each message of a chat prompt) keeps its last ``max_chars``. Truncated pairs are
  counted in ``meta["truncated"]``; ``max_chars=None`` keeps every text whole.
* skip counts are pairs (``SkipReport``): in this loader one row holds one pair (plus its history pairs in
  persona files); a record that holds several rows (a JSON array on one JSONL line) counts every one, in
  ``meta["rows_skipped"]`` too. A skip that would remove a user entirely is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from perbench.data.checks import check_benchmark, data_warnings
from perbench.data.load_options import keyword_options
from perbench.data.loading import LoadOptions, LoadStats, load_with_stats
from perbench.data.policies import assign_unseen
from perbench.data.reading import Source, source_label
from perbench.data.records import SPLITS, Benchmark
from perbench.data.rows import SKIP_HINT, DataError
from perbench.errors import PerbenchError

__all__ = [
    "DataError",
    "NoTrainPairsWarning",
    "assign_unseen",
    "format_validation",
    "load_benchmark_file",
    "validate_file",
]


@keyword_options
def load_benchmark_file(source: Source, options: Mapping[str, Any]) -> Benchmark:
    """Load any supported file/dataset with a field mapping into a :class:`Benchmark`.

    The keyword options are :func:`~perbench.data.load_options.load_keywords`'s (``mapping=``, ``on_error=``,
    ...), checked into one :class:`~perbench.data.load_options.LoadOptions`. Without a mapped ``split`` field
    every pair is ``test`` (the file is treated as evaluation data) unless ``test_fraction`` asks for a seeded
    per-user split. ``default_user`` names the one user of a file without a user field. ``on_error="skip"``
    counts bad rows in ``Benchmark.skipped`` instead of raising :class:`DataError`. Texts over ``max_chars`` are
    cut and counted (see the module docstring).
    """
    bench, _ = load_with_stats(source, LoadOptions.build(**options))
    if bench.pairs and not any(p.split == "train" for p in bench.pairs):
        import warnings

        from perbench.data.loading import SPLIT_FIX

        warnings.warn(
            f"{bench.meta.get('source', source)}: no train pairs (the file maps no split field, so every pair is "
            f"test): reward models that fit on train pairs have nothing to fit. Fix: {SPLIT_FIX}",
            NoTrainPairsWarning,
            stacklevel=3,  # the caller of the keyword wrapper
        )
    return bench


class NoTrainPairsWarning(UserWarning):
    """A loaded file whose pairs are all test pairs (no split field, no ``test_fraction``)."""


# ------------------------------------------------------------------------------------------ validation
@keyword_options
def validate_file(source: Source, options: Mapping[str, Any]) -> dict[str, Any]:
    """Load ``source`` exactly as :func:`load_benchmark_file` would with the same keyword options, run the
    benchmark checks every run makes (:func:`perbench.data.checks.check_benchmark`), and report (``perbench
    validate``).

    ``ok`` is True exactly when a run with these options would load the file. When it would not, ``fatal`` holds
    the error a run would print, and -- when that error is a bad row under ``on_error="raise"`` -- the counts
    come from a second pass with ``on_error="skip"`` (``diagnosis``) so the report still shows every problem.
    """
    return validate_with(source, options)


RunChecks = Callable[[Benchmark], None]
"""What a run checks beyond :func:`check_benchmark` (a config's methods, token limits); raises to fail."""


def benchmark_counts(bench: Benchmark) -> dict[str, Any]:
    """The report fields a loaded benchmark answers by itself: pairs, users, splits and its counted skips."""
    return {
        "pairs_kept": len(bench.pairs),
        "users": len(bench.users),
        "users_seen": len(bench.seen_users),
        "users_unseen": len(bench.unseen_users),
        "splits": {s: sum(p.split == s for p in bench.pairs) for s in SPLITS},
        "train_pairs_seen": len(bench.train_pairs()),
        "skipped": {
            r: {"count": n, "unit": bench.skipped.unit(r), "examples": bench.skipped.examples.get(r, [])}
            for r, n in sorted(bench.skipped.counts.items())
        },
        "skipped_pairs": bench.skipped.total(),
    }


def blank_report(source: str, fmt: Any, on_error: Any) -> dict[str, Any]:
    """A validation report before anything is read: every field ``perbench validate`` prints, at its empty value
    (the generic loader's :func:`validate_file` and a named loader's
    :func:`~perbench.data.validate_named.validate_named` fill the same fields)."""
    return {
        "source": source,
        "format": fmt,
        "mapping": None,
        "on_error": on_error,
        "rows_read": 0,
        "rows_with_errors": 0,
        "rows_skipped": 0,
        "pairs_kept": 0,
        "users": 0,
        "users_seen": 0,
        "users_unseen": 0,
        "splits": {s: 0 for s in SPLITS},
        "train_pairs_seen": 0,
        "skipped": {},
        "skipped_pairs": 0,
        "truncated": None,
        "cap": None,
        "mirrored_pairs": 0,
        "user_id_merges": None,
        "seen_users_without_train": None,
        "notes": [],
        "warnings": [],
        "first_error": None,
        "fatal": None,
        "diagnosis": None,
        "ok": False,
        "weighting": "pair",
        "split_policy": None,
        "seen_policy": None,
        "user_policy": None,
        "references": 0,
    }


def validate_with(
    source: Source, options: Mapping[str, Any], run_checks: RunChecks | None = None, methods: list[str] | None = None
) -> dict[str, Any]:
    """:func:`validate_file` with the loader ``options`` as a mapping, plus a run config's own checks
    (``run_checks``) and the names of its methods (``methods``: what the warnings list; default every registered
    method)."""
    report = blank_report(source_label(source), options.get("fmt"), options.get("on_error", "raise"))
    report["weighting"] = "pair" if options.get("dedup") is not False else "row"
    try:
        opts = LoadOptions.build(**options)
    except PerbenchError as e:
        report["fatal"] = report["first_error"] = str(e)
        return report
    report["mapping"] = opts.mapping.to_dict()
    try:
        bench, stats = load_with_stats(source, opts)
        notes = check_benchmark(bench, needs_train=False)
        if run_checks is not None:
            run_checks(bench)
    except (PerbenchError, OSError) as e:
        report["fatal"] = report["first_error"] = str(e)
        if opts.on_error == "raise" and isinstance(e, DataError) and (e.message.endswith(SKIP_HINT) or e.fix):
            try:
                bench, stats = load_with_stats(source, replace(opts, on_error="skip"))
            except (PerbenchError, OSError):
                return report
            _fill(report, bench, stats, list(bench.meta.get("notes", [])), methods)
            report["diagnosis"] = "counts from a second pass with on_error: skip (a run with on_error: raise stops)"
        return report
    _fill(report, bench, stats, notes, methods)
    report["ok"] = True
    return report


def _fill(
    report: dict[str, Any], bench: Benchmark, stats: LoadStats, notes: list[str], methods: list[str] | None
) -> None:
    report.update(
        format=stats.fmt,
        rows_read=stats.rows_read,
        rows_with_errors=stats.rows_with_errors,
        rows_skipped=stats.rows_skipped,
        **benchmark_counts(bench),
        truncated=bench.meta.get("truncated"),
        cap=bench.meta.get("cap"),
        mirrored_pairs=len(bench.subsets.get("personalization_only", ())),
        warnings=data_warnings(bench, methods),
        user_id_merges=bench.meta.get("user_id_merges"),
        seen_users_without_train=bench.meta.get("seen_users_without_train"),
        notes=notes,
        split_policy=bench.meta.get("split_policy"),
        seen_policy=bench.meta.get("seen_policy"),
        user_policy=bench.meta.get("user_policy"),
        references=len(bench.references),
        weighting=bench.weighting,
    )
    report["first_error"] = report["first_error"] or stats.first_error


def format_validation(report: Mapping[str, Any]) -> str:
    """A short human-readable rendering of :func:`validate_file`'s report."""
    lines = [f"{report['source']} ({report.get('format') or '?'})"]
    if report.get("fatal") and not report.get("diagnosis"):
        lines.append(f"  error        : {report['fatal']}")
        lines.append("  status       : FAILED (a run would stop here)")
        return "\n".join(lines)
    splits = report.get("splits", {})
    lines += [
        f"  rows read    : {report['rows_read']} ({report.get('rows_with_errors', 0)} with errors, "
        f"{report.get('rows_skipped', 0)} row(s) lost)",
        f"  pairs kept   : {report['pairs_kept']} ({report['weighting']}-weighted)",
        f"  users        : {report['users']} ({report['users_seen']} seen, {report['users_unseen']} unseen;"
        f" {report.get('seen_policy')})",
        f"  user ids     : {report.get('user_policy')}",
        f"  splits       : train {splits.get('train', 0)}, test {splits.get('test', 0)} ({report.get('split_policy')})",
        f"  train pairs  : {report.get('train_pairs_seen', 0)} (seen users: what reward models fit on)",
    ]
    demoted = report.get("seen_users_without_train") or {}
    if demoted.get("count"):
        lines.append(f"  seen -> unseen: {demoted['count']} user(s) without train pairs, e.g. {demoted['users'][:3]}")
    merges = report.get("user_id_merges") or {}
    if merges.get("count"):
        lines.append(f"  id merges    : {merges['count']} user id(s) written in several forms")
    if report.get("mirrored_pairs"):
        lines.append(f"  mirrors      : {report['mirrored_pairs']} pair(s) whose mirror another user holds")
    cap = report.get("cap") or {}
    if cap:
        lines.append(f"  cap          : {cap['pairs'][1]} of {cap['pairs'][0]} pairs kept (seed {cap['seed']})")
    cut = report.get("truncated") or {}
    if cut.get("pairs"):
        lines.append(f"  truncated    : {cut['pairs']} pair(s) over max_chars={cut['max_chars']} {cut['parts']}")
    skipped = report.get("skipped") or {}
    lines.append(f"  skipped      : {report.get('skipped_pairs', 0)} pair(s)")
    for reason, info in skipped.items():
        example = f"  e.g. {info['examples'][0]}" if info.get("examples") else ""
        lines.append(f"    {reason}: {info['count']} {info.get('unit', 'pair')}(s){example}")
    for note in report.get("notes") or []:
        lines.append(f"  note         : {note}")
    for warning in report.get("warnings") or []:
        lines.append(f"  warning      : {warning}")
    if report.get("first_error"):
        lines.append(f"  first error  : {report['first_error']}")
    if report.get("ok"):
        status = "OK"
    elif report.get("diagnosis"):
        status = (
            f"FAILED ({report['rows_with_errors']} row(s) with errors; a run stops at the first: "
            f"{report['fatal']}; the counts above are from on_error: skip)"
        )
    else:
        status = f"FAILED ({report.get('fatal')})"
    lines.append(f"  status       : {status}")
    return "\n".join(lines)

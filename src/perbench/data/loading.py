"""The one loading path of :func:`~perbench.data.loaders.load_benchmark_file`,
:func:`~perbench.data.loaders.validate_file` and the persona loader: :func:`load_with_stats` (see
:mod:`perbench.data.loaders` for the policies). Its options are :class:`~perbench.data.load_options.LoadOptions`
and its rows are parsed by :mod:`perbench.data.row_parsing`; both are importable from here too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perbench.data.fields import FieldMap
from perbench.data.load_options import LoadOptions as LoadOptions
from perbench.data.policies import (
    Cap,
    Truncations,
    assign_test_split,
    assign_unseen,
    demote_untrained,
    demotion_note,
)
from perbench.data.reading import Source, detect_format, iter_records, source_label
from perbench.data.records import (
    Benchmark,
    PreferencePair,
    ProfileItem,
    Reference,
    SkipReport,
    User,
    content_hash,
    dedup_pairs,
    mirrored_ids,
    pair_identity,
    prompt_key,
)
from perbench.data.row_parsing import NO_USER_FIX as NO_USER_FIX
from perbench.data.row_parsing import SPLIT_FIX as SPLIT_FIX
from perbench.data.row_parsing import ParsedRow, note_user, parse_row
from perbench.data.row_parsing import ids_are_answer_keys as ids_are_answer_keys
from perbench.data.rows import (
    DataError,
    ErrorSink,
    Row,
)
from perbench.data.user_context import describe_user_context, opaque_user_id, withhold_answer_key
from perbench.errors import ConfigError

RowHook = Callable[[Row, PreferencePair], list[PreferencePair]]
"""Extra (history) pairs derived from a row and its parsed pair; they must not repeat a row's own pair."""
RowSize = Callable[[Row], int]
"""How many pairs a row holds (its own pair and its extra pairs): what a skipped row counts."""


@dataclass
class LoadStats:
    rows_read: int = 0
    #: records (lines, array elements) that could not be used
    rows_with_errors: int = 0
    #: source rows those records held (a JSON array on one line holds several)
    rows_skipped: int = 0
    first_error: str | None = None
    fmt: str = ""


def load_with_stats(
    source: Source,
    opts: LoadOptions,
    *,
    row_hook: RowHook | None = None,
    row_size: RowSize | None = None,
) -> tuple[Benchmark, LoadStats]:
    """The one loading path of :func:`~perbench.data.loaders.load_benchmark_file`,
    :func:`~perbench.data.loaders.validate_file` and the persona loader."""
    fmap = opts.mapping
    label = source_label(source)
    fmt = opts.fmt or detect_format(source)
    stats = LoadStats(fmt=fmt)
    skipped = SkipReport()
    sink = ErrorSink(opts.on_error, skipped)
    stem = Path(label).name if isinstance(source, str | Path) else "row"
    parsed: list[ParsedRow] = []
    extras: list[PreferencePair] = []
    user_seen: dict[str, tuple[bool, str]] = {}
    id_forms: dict[str, dict[str, str]] = {}
    #: users named by skipped rows -> where: a user whose every row is skipped must not vanish unnoticed
    skipped_users: dict[str, str] = {}
    for file_label, line, data in iter_records(source, fmt=fmt, split=opts.split, config=opts.config):
        stats.rows_read += 1
        if isinstance(data, DataError):
            stats.rows_with_errors += 1
            stats.rows_skipped += data.rows
            sink(data, n=data.rows)  # one row holds one pair here
            for held in data.held:
                note_user(skipped_users, Row(file_label, line, held), fmap, opts.default_user)
            continue
        row = Row(file_label, line, data)
        try:
            item = parse_row(row, fmap, stem, opts.default_user)
            more = row_hook(row, item.pair) if row_hook is not None else []
            if item.seen is not None:
                first = user_seen.setdefault(item.pair.user_id, (item.seen, row.where))
                if first[0] != item.seen:
                    raise row.error(
                        fmap.source("seen"), f"user {item.pair.user_id!r} was seen={first[0]} at {first[1]}"
                    )
        except DataError as e:
            stats.rows_with_errors += 1
            stats.rows_skipped += 1
            sink(e, n=row_size(row) if row_size is not None else 1)
            note_user(skipped_users, row, fmap, opts.default_user)
            continue
        if opts.test_fraction is not None and item.split_given:
            raise row.error(
                fmap.source("split"),
                f"the file gives a split, and test_fraction={opts.test_fraction} is set; use one of them "
                "(mapping 'split=' switches the file's split off)",
            )
        id_forms.setdefault(item.pair.user_id, {}).setdefault(repr(item.user_raw), row.where)
        parsed.append(item)
        extras.extend(more)
    stats.first_error = sink.first

    # users: profile items (union, first occurrence wins), first answer key
    profiles: dict[str, list[ProfileItem]] = {}
    keys: dict[str, str] = {}
    for item in parsed:
        uid = item.pair.user_id
        known = profiles.setdefault(uid, [])
        texts = {p.text for p in known}
        known.extend(p for p in item.profile if p.text not in texts)
        if item.answer_key is not None:
            keys.setdefault(uid, item.answer_key)
    truncations = Truncations(opts.max_chars)
    row_pairs = truncations.apply([item.pair for item in parsed])
    row_keys = {pair_identity(p) for p in row_pairs}
    kept_extras = []
    for p in truncations.apply(extras):
        if pair_identity(p) in row_keys:
            skipped.add("history_equals_row_pair", p.pair_id)
        else:
            kept_extras.append(p)
    first_seen: dict[str, tuple[str, str]] = {}
    unique_ids = []
    for p in row_pairs + kept_extras:  # before dedup, so that dedup keeps mirrored pairs together
        key, where = p.content_key(), str(p.meta.get("source", ""))
        prior = first_seen.setdefault(p.pair_id, (key, where))
        if prior[0] != key:
            stats.rows_with_errors += 1
            stats.rows_skipped += 1
            sink(
                DataError(
                    label,
                    int(p.meta.get("line", 0)) or None,
                    fmap.source("pair_id"),
                    f"duplicate pair id {p.pair_id!r} with different content (first at {prior[1]})",
                )
            )
            skipped_users.setdefault(p.user_id, where)
            continue
        unique_ids.append(p)
    pairs = dedup_pairs(unique_ids, skipped, dedup=opts.dedup)
    stats.first_error = sink.first
    cap = Cap(opts.max_pairs, opts.max_prompts, opts.seed)
    pairs = cap.apply(pairs)
    if opts.test_fraction is not None:
        pairs = assign_test_split(pairs, opts.test_fraction, opts.seed, {item.pair.pair_id for item in parsed})
    with_pairs = {p.user_id for p in pairs}
    lost = {u: w for u, w in skipped_users.items() if u not in with_pairs and u not in cap.dropped_users}
    if lost:
        shown = ", ".join(f"{u!r} ({w})" for u, w in list(lost.items())[:3])
        raise DataError(
            label,
            None,
            fmap.source("user_id"),
            f"skipping bad rows would remove {len(lost)} user(s) entirely, e.g. {shown}: every row of theirs is "
            "bad, so they would vanish from the per-user results; fix those rows (or delete the user's rows)",
        )
    for uid in sorted(set(profiles) - with_pairs - cap.dropped_users):
        skipped.add("user_without_pairs", uid)
    user_ids = sorted(with_pairs)

    if user_seen:
        if opts.unseen_users is not None or opts.unseen_fraction:
            raise ConfigError("give either a 'seen' field or unseen_users / unseen_fraction, not both")
        unseen = {u for u, (s, _) in user_seen.items() if not s}
        seen_policy = f"from field '{fmap.source('seen')}' (users without a value are seen)"
    elif opts.unseen_users is not None:
        # with opaque ids, unseen users may be named by their label (the persona sentence) or their opaque id
        named = {
            opaque_user_id(u) if ids_are_answer_keys(fmap) and opaque_user_id(u) in profiles else u
            for u in opts.unseen_users
        }
        unknown = sorted(named - set(profiles))
        if unknown:
            raise DataError(label, None, "unseen_users", f"unknown user(s) {unknown[:5]} (not in the file)")
        unseen = named
        seen_policy = "unseen_users list"
    else:
        unseen = assign_unseen(user_ids, opts.unseen_fraction, opts.seed)
        seen_policy = (
            f"seeded fraction {opts.unseen_fraction} (seed {opts.seed})" if opts.unseen_fraction else "all users seen"
        )
    users = {
        u: withhold_answer_key(
            User(
                u,
                seen=u not in unseen,
                profile=tuple(profiles[u]),
                answer_key={"rubric_text": keys[u]} if u in keys else None,
            ),
            skipped,
        )
        for u in user_ids
    }
    users, demoted = demote_untrained(users, pairs)
    if demoted:
        seen_policy += f"; {len(demoted)} seen user(s) without train pairs re-marked unseen"

    references: list[Reference] = []
    ref_keys: set[str] = set()
    kept_prompts = {(p.user_id, prompt_key(p.prompt)) for p in pairs}
    for item in parsed:
        if item.reference is None or (item.pair.user_id, prompt_key(item.pair.prompt)) not in kept_prompts:
            continue
        key = content_hash(item.pair.user_id, prompt_key(item.pair.prompt))
        if key not in ref_keys:
            ref_keys.add(key)
            references.append(Reference(item.pair.user_id, item.pair.prompt, item.reference, item.pair.split))

    merges = {u: forms for u, forms in sorted(id_forms.items()) if len(forms) > 1 and u in users}
    notes = []
    if merges:
        example = next(iter(merges.items()))
        notes.append(
            f"{len(merges)} user id(s) written in several forms were merged (ids are strings in Unicode NFC, "
            f"surrounding whitespace and zero-width characters stripped), e.g. {example[0]!r}: "
            + ", ".join(f"{form} at {where}" for form, where in example[1].items())
        )
    if demoted:
        notes.append(demotion_note(demoted))
    if truncations.note():
        notes.append(str(truncations.note()))
    if cap.note():
        notes.append(str(cap.note()))
    mirrored = mirrored_ids(pairs)
    meta = {
        "source": label,
        "format": fmt,
        "mapping": fmap.to_dict(),
        "split_policy": _split_policy(fmap, parsed, opts),
        "split_fix": SPLIT_FIX,
        "seen_policy": seen_policy,
        "user_policy": (
            f"every pair belongs to default_user {opts.default_user!r} (the file has no user field)"
            if opts.default_user is not None
            else f"from field '{fmap.source('user_id')}'"
        ),
        "rows_read": stats.rows_read,
        "rows_with_errors": stats.rows_with_errors,
        "rows_skipped": stats.rows_skipped,
        "dedup": opts.dedup,
        "mirrors": {
            "pairs": len(mirrored),
            "rule": "a pair (u, x, a > b) and the pair (v, x, b > a) of another user in the same split are matched "
            "one to one in file order; dedup, caps and test_fraction keep or move them together (a dropped "
            "pair's mirror is counted as mirror_of_skipped_pair); the matched pairs are the personalization_only "
            "subset",
        },
        "truncated": truncations.to_dict(),
        "user_id_merges": {
            "count": len(merges),
            "examples": {u: forms for u, forms in list(merges.items())[:5]},
        },
        "seen_users_without_train": {"count": len(demoted), "users": demoted[:50]},
        "notes": notes,
        "user_context": describe_user_context(
            "profile" if any(u.profile for u in users.values()) else "pairs_only",
            users,
            included=(["profile"] if any(u.profile for u in users.values()) else []) + ["own train pairs"],
            withheld=[f"answer_key (from '{fmap.source('answer_key')}')"] if keys else [],
            note=(
                f"the user id field ('{fmap.source('user_id')}') is the answer key: user ids are opaque hashes "
                "of it (the text is in User.answer_key)"
                if ids_are_answer_keys(fmap)
                else "user ids are labels for reports and never reach a prompt"
            ),
        ),
    }
    if opts.test_fraction is not None:
        meta["test_fraction"] = opts.test_fraction
    if opts.default_user is not None:
        meta["default_user"] = opts.default_user
    if cap.active:
        meta["cap"] = cap.to_dict()
    bench = Benchmark(
        name=opts.name or (Path(label).stem if isinstance(source, str | Path) else "rows"),
        pairs=pairs,
        users=users,
        references=references,
        skipped=skipped,
        meta=meta,
        weighting="pair" if opts.dedup else "row",
        subsets={"personalization_only": mirrored} if mirrored else {},
    )
    return bench, stats


def _split_policy(fmap: FieldMap, parsed: list[ParsedRow], opts: LoadOptions) -> str:
    if opts.test_fraction is not None:
        return (
            f"seeded per-user split: round({opts.test_fraction}·n) of each user's pairs test, at least one train "
            f"and one test pair for a user with two or more (seed {opts.seed}); a pair and its mirror share a split"
        )
    if fmap.disabled("split"):
        return "all test (split field switched off)"
    if fmap.explicit("split"):
        return f"from field '{fmap.source('split')}'"
    if any(item.split_given for item in parsed):
        return "from column 'split' (rows without one are test)"
    return "all test (no split field mapped)"

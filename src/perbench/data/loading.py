"""The one loading path of :func:`~perbench.data.loaders.load_benchmark_file`,
:func:`~perbench.data.loaders.validate_file` and the persona loader: :class:`LoadOptions` and
:func:`load_with_stats` (see :mod:`perbench.data.loaders` for the policies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perbench.data.fields import FieldMap
from perbench.data.policies import (
    DEFAULT_MAX_CHARS,
    Cap,
    Truncations,
    assign_test_split,
    assign_unseen,
    demote_untrained,
    demotion_note,
)
from perbench.data.reading import FORMATS, Source, detect_format, iter_records, source_label
from perbench.data.records import (
    Benchmark,
    Message,
    PreferencePair,
    ProfileItem,
    Prompt,
    Reference,
    SkipReport,
    Split,
    User,
    content_hash,
    dedup_pairs,
    is_blank,
    mirrored_ids,
    normalize_text,
    pair_identity,
    prompt_identity,
    prompt_key,
    prompt_text,
)
from perbench.data.rows import (
    MISSING,
    DataError,
    ErrorSink,
    OnError,
    Row,
    check_ident,
    check_text,
    is_number,
    parse_bool,
    parse_profile,
    parse_prompt,
    parse_response,
    parse_split,
    resolve,
)
from perbench.data.user_context import describe_user_context, opaque_user_id, withhold_answer_key
from perbench.errors import ConfigError


# ------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class LoadOptions:
    """Every option of :func:`~perbench.data.loaders.load_benchmark_file` (and so of
    :func:`~perbench.data.loaders.validate_file`), checked once.

    A bad value is a :class:`~perbench.errors.ConfigError` naming the option.
    """

    mapping: FieldMap = field(default_factory=FieldMap)
    name: str | None = None
    unseen_users: tuple[str, ...] | None = None
    unseen_fraction: float = 0.0
    seed: int = 0
    fmt: str | None = None
    split: str | None = None
    config: str | None = None
    on_error: OnError = "raise"
    dedup: bool = True
    test_fraction: float | None = None
    default_user: str | None = None
    max_chars: int | None = DEFAULT_MAX_CHARS
    max_pairs: int | None = None
    max_prompts: int | None = None

    @classmethod
    def build(
        cls,
        *,
        mapping: str | Mapping[str, str] | FieldMap | None = None,
        unseen_users: Sequence[str] | None = None,
        **options: Any,
    ) -> LoadOptions:
        if unseen_users is not None:
            if isinstance(unseen_users, str) or not all(isinstance(u, str | int) for u in unseen_users):
                raise ConfigError(f"unseen_users must be a list of user ids, got {unseen_users!r}")
            unseen_users = tuple(str(u).strip() for u in unseen_users)
        return cls(mapping=FieldMap.parse(mapping), unseen_users=unseen_users, **options)

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if not is_number(self.unseen_fraction) or not 0.0 <= self.unseen_fraction < 1.0:
            raise ConfigError(f"unseen_fraction must be a number in [0, 1), got {self.unseen_fraction!r}")
        if self.test_fraction is not None and (not is_number(self.test_fraction) or not 0 < self.test_fraction < 1):
            raise ConfigError(f"test_fraction must be a number in (0, 1), or None, got {self.test_fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.dedup, bool):
            raise ConfigError(f"dedup must be true or false, got {self.dedup!r}")
        if self.max_chars is not None and (
            isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int) or self.max_chars < 1
        ):
            raise ConfigError(
                f"max_chars must be a positive integer, or None to keep texts whole, got {self.max_chars!r}"
            )
        for key in ("max_pairs", "max_prompts"):
            cap = getattr(self, key)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
                raise ConfigError(f"{key} must be a positive integer, or None for no cap, got {cap!r}")
        if self.fmt is not None and self.fmt not in FORMATS:
            raise ConfigError(f"unknown format {self.fmt!r}; use one of {', '.join(FORMATS)}")
        if self.default_user is not None:
            if not isinstance(self.default_user, str) or not self.default_user.strip():
                raise ConfigError(f"default_user must be a non-empty user id, got {self.default_user!r}")
            if self.mapping.explicit("user_id"):
                raise ConfigError(
                    f"default_user={self.default_user!r} is for files without a user field, but the mapping names "
                    f"one (user_id={self.mapping.source('user_id')}); drop one of them"
                )
            object.__setattr__(self, "default_user", self.default_user.strip())
        if self.test_fraction is not None and self.mapping.explicit("split"):
            raise ConfigError(
                f"test_fraction={self.test_fraction} splits a file without a split field, but the mapping names one "
                f"(split={self.mapping.source('split')}); drop one of them"
            )


# ------------------------------------------------------------------------------------------- loading
@dataclass
class _Parsed:
    pair: PreferencePair
    seen: bool | None
    profile: list[ProfileItem]
    answer_key: str | None
    reference: str | None
    where: str
    split_given: bool
    user_raw: Any


def ids_are_answer_keys(fmap: FieldMap) -> bool:
    """The user id field is also the answer-key field (a persona sentence that names the user and decides the
    labels): such ids are replaced by :func:`~perbench.data.user_context.opaque_user_id`."""
    return not fmap.disabled("answer_key") and fmap.source("answer_key") == fmap.source("user_id")


#: the fix for a file without a user field (every row of it would fail, so skipping rows is no fix)
NO_USER_FIX = (
    "a file without a user field: set default_user to put every pair under one user (`perbench validate "
    "--default-user NAME`; in a run config `benchmark: {name: file, default_user: NAME}`; `default_user=` in "
    "Python), or map the user column (`--map user_id=<column>`, `mapping: user_id=<column>`)"
)
#: the fix for a file without a split field (every pair is test: nothing to fit on)
SPLIT_FIX = (
    "map a split field (`--map split=<column>`, `mapping: split=<column>`, with train/test values), or set "
    "test_fraction for a seeded per-user split (`perbench validate --test-fraction 0.2`; in a run config "
    "`benchmark: {name: file, test_fraction: 0.2}`; `test_fraction=0.2` in Python)"
)


def _parse_row(row: Row, fmap: FieldMap, stem: str, default_user: str | None = None) -> _Parsed:
    def optional(canonical: str) -> Any:
        """Explicitly mapped -> required; otherwise used when present; empty string = absent."""
        if fmap.disabled(canonical):
            return None
        path = fmap.source(canonical)
        value = row.require(path) if fmap.explicit(canonical) else row.get(path)
        if isinstance(value, str) and is_blank(value):
            if fmap.explicit(canonical) and canonical in ("split", "seen", "pair_id"):
                raise row.error(path, "empty value")
            return None
        return value

    user_path = fmap.source("user_id")
    id_is_key = ids_are_answer_keys(fmap)
    if default_user is not None:
        if resolve(row.data, user_path) is not MISSING:
            raise row.error(
                user_path,
                f"present, but default_user={default_user!r} is set (it is for files without a user field); "
                "drop default_user to use the file's user ids",
            )
        user, user_raw = default_user, default_user
    else:
        if resolve(row.data, user_path) is MISSING and not fmap.explicit("user_id"):
            err = row.error(user_path, "missing")
            err.fix = NO_USER_FIX  # the fix for a whole file, not a row: skipping would drop every such row
            raise err
        user_raw = row.require(user_path)
        user = check_ident(row, user_path, user_raw)
        if id_is_key:  # the id is the answer key (e.g. a persona sentence): methods get an opaque id
            user = opaque_user_id(user)
    chosen_path, rejected_path = fmap.source("chosen"), fmap.source("rejected")
    chosen, chosen_ctx = parse_response(row, chosen_path, row.require(chosen_path))
    rejected, rejected_ctx = parse_response(row, rejected_path, row.require(rejected_path))
    if chosen_ctx and rejected_ctx and prompt_identity(chosen_ctx) != prompt_identity(rejected_ctx):
        raise row.error(
            rejected_path,
            f"its conversation before the response differs from {chosen_path!r}'s "
            f"({_first_difference(chosen_ctx, rejected_ctx)}): the two responses answer different questions",
        )
    prompt_path = fmap.source("prompt")
    raw_prompt = resolve(row.data, prompt_path)
    prompt: Prompt
    if (raw_prompt is MISSING or raw_prompt is None) and chosen_ctx and not fmap.explicit("prompt"):
        prompt = chosen_ctx  # implicit prompt: the conversation before the chosen response
    else:
        prompt = parse_prompt(row, prompt_path, row.require(prompt_path))
        context = chosen_ctx or rejected_ctx
        if context and normalize_text(prompt_text(prompt)) != normalize_text(prompt_text(context)):
            side = chosen_path if chosen_ctx else rejected_path
            raise row.error(
                prompt_path,
                f"its question differs from the user turn in {side!r}'s conversation "
                f"({prompt_text(prompt)[:40]!r} vs {prompt_text(context)[:40]!r}); the row must ask one question",
            )
    split_value = optional("split")
    split: Split = "test" if split_value is None else parse_split(row, fmap.source("split"), split_value)
    seen_value = optional("seen")
    seen = None if seen_value is None else parse_bool(row, fmap.source("seen"), seen_value)
    profile_value = optional("profile")
    profile = [] if profile_value is None else parse_profile(row, fmap.source("profile"), profile_value)
    key_value = optional("answer_key")
    answer_key = None if key_value is None else check_text(row, fmap.source("answer_key"), key_value)
    ref_value = optional("reference")
    reference = None if ref_value is None else check_text(row, fmap.source("reference"), ref_value)
    pid_value = optional("pair_id")
    pair_id = f"{stem}:{row.line}" if pid_value is None else row.ident(fmap.source("pair_id"))
    meta = {"source": row.where, "line": row.line}
    pair = PreferencePair(pair_id, user, prompt, chosen, rejected, split, meta)
    return _Parsed(pair, seen, profile, answer_key, reference, row.where, split_value is not None, user_raw)


def _note_user(users: dict[str, str], row: Row, fmap: FieldMap, default_user: str | None) -> None:
    """Record the user a skipped row names, when it names one readably (``users``: id -> where)."""
    if default_user is not None:
        users.setdefault(default_user, row.where)
        return
    path = fmap.source("user_id")
    value = resolve(row.data, path)
    if value is MISSING or value is None:
        return
    try:
        user = check_ident(row, path, value)
    except DataError:
        return
    # the id pairs carry: an answer-key id (a persona sentence) becomes its opaque id, as in _parse_row
    users.setdefault(opaque_user_id(user) if ids_are_answer_keys(fmap) else user, row.where)


def _first_difference(a: tuple[Message, ...], b: tuple[Message, ...]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x.role != y.role or normalize_text(x.content) != normalize_text(y.content):
            return f"first at message {i}: {x.content[:30]!r} vs {y.content[:30]!r}"
    return f"{len(a)} vs {len(b)} messages"


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
    parsed: list[_Parsed] = []
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
                _note_user(skipped_users, Row(file_label, line, held), fmap, opts.default_user)
            continue
        row = Row(file_label, line, data)
        try:
            item = _parse_row(row, fmap, stem, opts.default_user)
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
            _note_user(skipped_users, row, fmap, opts.default_user)
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


def _split_policy(fmap: FieldMap, parsed: list[_Parsed], opts: LoadOptions) -> str:
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

"""Side-by-side generations per user: zero-shot next to each guided decoder, with the user's rubric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import escape

from perbench.report.extract import _d, _l
from perbench.report.fmt import is_missing, num

MAX_CHARS = 1500


def _aspects(row: Mapping[str, Any]) -> str:
    items = []
    for a in _l(row.get("rubric_aspects")):
        a = _d(a)
        met = a.get("met")
        cls, mark = ("met", "✓") if met is True else ("unmet", "✗") if met is False else ("unk", "?")
        what = f"{a.get('aspect', '?')}: {a.get('pole', '?')}"
        items.append(f'<span class="asp {cls}" title="{escape(what)}">{mark} {escape(what)}</span>')
    return f'<div class="aspects">{"".join(items)}</div>' if items else ""


def _card(decoder: str, row: Mapping[str, Any]) -> str:
    text = str(row.get("text", ""))
    cut = text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " …"
    score = row.get("rubric_satisfaction")
    sat = "" if is_missing(score) else f'<span class="sat">rubric {num(score)}%</span>'
    body = escape(cut) if cut.strip() else '<span class="muted">(empty response)</span>'
    return (
        f'<div class="gen{" zs" if decoder == "zero_shot" else ""}"><div class="gh"><b>{escape(decoder)}</b>{sat}</div>'
        f'{_aspects(row)}<div class="text">{body}</div></div>'
    )


def generations_section(
    samples: Sequence[Mapping[str, Any]] | None, max_users: int = 6, max_prompts: int = 2, picks: bool = False
) -> str:
    """Up to ``max_users`` users × ``max_prompts`` prompts; every generation is in samples.jsonl. With only one
    decoder (zero-shot) and the Best-of-N picks shown (``picks``), nothing is added: the picks already show it."""
    gens = [_d(r) for r in samples or [] if _d(r).get("kind") == "generation"]
    if not gens or (picks and len({r.get("decoder") for r in gens}) < 2):
        return ""
    by_user: dict[str, dict[tuple[str, str], dict[str, dict[str, Any]]]] = {}
    decoders: list[str] = []
    for r in gens:
        user = str(r.get("user_id", "?"))
        key = (str(r.get("policy", "")), str(r.get("prompt_id") or r.get("prompt", "")))
        dec = str(r.get("decoder", "?"))
        if dec not in decoders:
            decoders.append(dec)
        by_user.setdefault(user, {}).setdefault(key, {}).setdefault(dec, r)
    decoders = [d for d in decoders if d == "zero_shot"] + [d for d in decoders if d != "zero_shot"]
    users = sorted(by_user)
    parts = [
        "<h2>Generations side by side</h2>",
        f'<p class="muted">Zero-shot next to each guided decoder for the same user and prompt '
        f"(showing {min(len(users), max_users)} of {len(users)} users, up to {max_prompts} prompts each; "
        "all generations are in samples.jsonl). ✓/✗: rubric aspects the response meets.</p>",
    ]
    for i, user in enumerate(users[:max_users]):
        prompts = by_user[user]
        first = next(iter(next(iter(prompts.values())).values()))
        rubric = first.get("user_rubric")
        seen = first.get("seen")
        tag = "" if seen is None else (" (seen)" if seen else " (unseen)")
        summary = f"user <b>{escape(user)}</b>{escape(tag)}" + (
            f' — <span class="rubric">{escape(rubric)}</span>' if rubric else ""
        )
        inner = []
        for (policy, _pid), rows in list(prompts.items())[:max_prompts]:
            prompt = str(next(iter(rows.values())).get("prompt", ""))
            pol = f' <span class="muted">policy {escape(policy)}</span>' if policy else ""
            cards = "".join(_card(d, rows[d]) for d in decoders if d in rows)
            inner.append(
                f'<div class="prompt"><b>Prompt</b>{pol}: {escape(prompt)}</div><div class="gens">{cards}</div>'
            )
        parts.append(
            f'<details class="user"{" open" if i == 0 else ""}><summary>{summary}</summary>{"".join(inner)}</details>'
        )
    return "".join(parts)

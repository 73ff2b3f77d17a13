"""Side-by-side generations per user: zero-shot next to each guided decoder, with the user's rubric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.report.extract import _d, _l
from perbench.report.fmt import is_missing, num
from perbench.report.templating import render

MAX_CHARS = 1500


def _aspects(row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(class, mark, "aspect: pole") of each rubric aspect the row was judged on."""
    items = []
    for a in _l(row.get("rubric_aspects")):
        a = _d(a)
        met = a.get("met")
        cls, mark = ("met", "✓") if met is True else ("unmet", "✗") if met is False else ("unk", "?")
        items.append((cls, mark, f"{a.get('aspect', '?')}: {a.get('pole', '?')}"))
    return items


def _card(decoder: str, row: Mapping[str, Any]) -> dict[str, Any]:
    text = str(row.get("text", ""))
    score = row.get("rubric_satisfaction")
    return {
        "cls": " zs" if decoder == "zero_shot" else "",
        "title": decoder,
        "full": "",
        "sat": "" if is_missing(score) else num(score),
        "aspects": _aspects(row),
        "text": text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " …",
    }


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
    shown = []
    for user in users[:max_users]:
        prompts = by_user[user]
        first = next(iter(next(iter(prompts.values())).values()))
        seen = first.get("seen")
        shown.append(
            {
                "user": user,
                "tag": "" if seen is None else (" (seen)" if seen else " (unseen)"),
                "rubric": str(first.get("user_rubric") or ""),
                "prompts": [
                    {
                        "policy": policy,
                        "prompt": str(next(iter(rows.values())).get("prompt", "")),
                        "cards": [_card(d, rows[d]) for d in decoders if d in rows],
                    }
                    for (policy, _pid), rows in list(prompts.items())[:max_prompts]
                ],
            }
        )
    return str(render("generations.html.j2", kind="side", users=shown, total=len(users), max_prompts=max_prompts))

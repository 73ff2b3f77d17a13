"""What the chosen RM actually picks: for a user and a prompt, the zero-shot output beside the Best-of-N pick of each
top system and the oracle pick, each with that user's rubric poles met or missed.

It reads samples.jsonl: the pool's texts (``bon_sample``), each system's top-scored sample per cell (``bon_cell``
``top``), the oracle's (``bon_pool_cell`` ``oracle_top``) and the zero-shot generation of the cell (with the user's
rubric). Poles of the built-in rubric benchmark are checked on each text with its own checkers; another benchmark's
picks are shown without marks. One collapsible block per user, with a jump list: the page filters by user without
a script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.report.extract import _d, _l
from perbench.report.generations import MAX_CHARS
from perbench.report.templating import render

TOP = 3


def _poles(rubric: Any) -> list[tuple[str, str]]:
    """``length: detailed; format: bulleted`` → [(aspect, pole), …]."""
    out = []
    for part in str(rubric or "").split(";"):
        aspect, colon, pole = part.partition(":")
        if colon and aspect.strip() and pole.strip():
            out.append((aspect.strip(), pole.strip()))
    return out


def _marks(text: str, poles: Sequence[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(class, mark, "aspect: pole") of each of the user's rubric poles, as the checker reads ``text``."""
    if not poles:
        return []
    try:
        from perbench.data.rubrics.aspects import ASPECTS, annotate
    except ImportError:  # pragma: no cover - the rubric module ships with perbench
        return []
    if any(a not in ASPECTS for a, _ in poles):
        return []
    got = annotate(text)
    return [("met", "✓", f"{a}: {p}") if got.get(a) == p else ("unmet", "✗", f"{a}: {p}") for a, p in poles]


def _card(title: str, full: str, text: str, poles: Sequence[tuple[str, str]], cls: str = "") -> dict[str, Any]:
    cut = text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " …"
    return {"cls": cls, "title": title, "full": full, "sat": "", "aspects": _marks(text, poles), "text": cut}


def _top_systems(analysis: Mapping[str, Any], metric: str) -> list[str]:
    ranking = _d(_d(analysis.get("ranking")).get(metric))
    order = [str(m) for m in _l(ranking.get("order"))]
    if order:
        return order[:TOP]
    systems = _d(_d(_d(analysis.get("headroom")).get(metric)).get("systems"))
    values: list[tuple[str, float]] = []
    for m, s in systems.items():
        v = _d(s).get("value")
        if _d(s).get("role") == "deployable" and isinstance(v, int | float):
            values.append((str(m), float(v)))
    return [m for m, _ in sorted(values, key=lambda x: -x[1])[:TOP]]


def picks_section(
    samples: Sequence[Mapping[str, Any]] | None,
    analysis: Mapping[str, Any] | None,
    names: Mapping[str, str],
    max_users: int = 8,
) -> str:
    a = _d(analysis)
    rows = [_d(r) for r in samples or []]
    metric = str(_d(a.get("verdict")).get("metric") or "")
    if not metric.startswith("best_of_n") or not rows:
        return ""
    pool: dict[tuple[str, str], dict[int, str]] = {}
    tops: dict[tuple[str, str, str], int] = {}
    oracle: dict[tuple[str, str, str], int] = {}
    zero: dict[tuple[str, str], Mapping[str, Any]] = {}
    quality = metric.partition(":")[2]
    for r in rows:
        kind, pid, user = r.get("kind"), str(r.get("prompt_id", "")), str(r.get("user_id", ""))
        if kind == "bon_sample" and isinstance(r.get("sample"), int):
            pool.setdefault((str(r.get("decoder")), pid), {})[int(r["sample"])] = str(r.get("text", ""))
        elif kind == "bon_cell" and isinstance(r.get("top"), int):
            tops[(str(r.get("decoder")), user, pid)] = int(r["top"])
        elif kind == "bon_pool_cell":
            o = _d(r.get("oracle_top")).get(quality)
            if isinstance(o, int):
                oracle[(str(r.get("decoder")), user, pid)] = o
        elif kind == "generation" and r.get("decoder") == "zero_shot":
            zero[(user, pid)] = r
    systems = _top_systems(a, metric)
    decoders = sorted({d for d, _ in pool})
    if not systems or not decoders:
        return ""
    dec = decoders[0]
    cells = sorted({(u, p) for (d, u, p) in oracle if d == dec and (u, p) in zero})
    by_user: dict[str, str] = {}
    for u, p in cells:
        by_user.setdefault(u, p)
    users = sorted(by_user)[:max_users]
    if not users:
        return ""
    blocks = []
    for u in users:
        p = by_user[u]
        z = zero[(u, p)]
        poles = _poles(z.get("user_rubric"))
        texts = pool.get((dec, p), {})
        cards = [_card("zero-shot", "zero_shot", str(z.get("text", "")), poles, " zs")]
        for m in systems:
            top = tops.get((f"{dec}[{m}]", u, p))
            if top is not None and top in texts:
                cards.append(_card(f"{names.get(m, m)} pick", m, texts[top], poles))
        o = oracle.get((dec, u, p))
        if o is not None and o in texts:
            cards.append(_card("oracle pick", "oracle_pick", texts[o], poles, " zs"))
        rubric = str(z.get("user_rubric") or "")
        blocks.append({"user": u, "tag": "", "rubric": rubric, "prompt": str(z.get("prompt", "")), "cards": cards})
    top_names = [names.get(m, m) for m in systems]
    return str(render("generations.html.j2", kind="picks", users=blocks, top=top_names))

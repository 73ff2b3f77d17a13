"""The verdict box, the decision marks of the leaderboards and the power planner's table, read from
``results["analysis"]`` (the words are the analysis's own; nothing here decides)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from perbench.report.extract import _d, _l
from perbench.report.fmt import badge, is_pct_metric, metric_head, metric_label, num, span, value_ci

DECISIONS = {
    "separable": ("deploy", "best"),
    "equivalent": ("practically equivalent", "best"),
    "baseline": ("a baseline is as good", "tied"),
    "undecided": ("undecided", "tied"),
    "no_better_than_random": ("not shown better than a random pick", "tied"),
    "too_little_data": ("too little data", "tied"),
}


def _tau(v: Mapping[str, Any]) -> str:
    val, ci = v.get("upstream_tau"), _l(v.get("upstream_tau_ci"))
    if not isinstance(val, int | float):
        return "n/a"
    out = f"{float(val):+.2f}"
    if len(ci) == 2 and all(isinstance(c, int | float) for c in ci):
        out += " " + span("ci", f"[{float(ci[0]):+.2f}, {float(ci[1]):+.2f}]")
    return out


def mark(rank: Mapping[str, Any], method: str) -> tuple[str, str] | None:
    """(text, kind) of a method's place in a ranking's decision: best, identical, equivalent, tied, or None."""
    if rank.get("best") == method:
        return "best", "best"
    if method in _l(rank.get("identical")):
        return "identical to the leader", "best"
    if method in _l(rank.get("equivalent")):
        return "equivalent", "best"
    order = _l(rank.get("order"))
    if rank.get("decision") == "equivalent" and order and method == order[0]:
        return "leader (equivalence)", "best"
    tied = _l(rank.get("tied"))
    if rank.get("best") is None and method in tied and len(tied) > 1:
        return "tied", "tied"
    return None


#: how the verdict's parts are headed in the box (the analysis's ``verdict.parts`` kinds)
PART_TITLES = {
    "headroom": "Headroom",
    "null": "Against a random pick",
    "plan": "What would decide",
    "decision": "Decision",
    "tie_break": "Tie-break",
    "trade_offs": "Trade-offs",
    "zero_shot": "Against zero-shot",
    "win_rate": "Reward hacking",
    "adaptive": "Adaptive rounds",
    "references": "Reference lines",
    "stability": "Stability",
    "ci_note": "About the CI",
    "upstream": "Upstream",
}


def _parts(v: Mapping[str, Any], names: Mapping[str, str]) -> tuple[str, list[tuple[str, str]]]:
    """(the lead sentence, (title, text) of each other part) from ``verdict.parts`` in display names: compact
    system labels and metric labels for their ids; a part that starts with its own title says it once."""
    from perbench.report.labels import shorten_text

    parts = [(str(_d(p).get("kind") or ""), str(_d(p).get("text") or "")) for p in _l(v.get("parts"))]
    parts = [(k, t) for k, t in parts if t.strip()]
    if not parts:
        return "", []
    metrics = {str(m): metric_label(str(m)) for m in (v.get("metric"), v.get("upstream_metric")) if m}
    names = {**metrics, **names}
    items = []
    for kind, text in parts[1:]:
        title = PART_TITLES.get(kind, kind.replace("_", " ").capitalize())
        text = shorten_text(text, names)
        if text.lower().startswith(title.lower()):  # "Upstream, …" under the title Upstream
            text = text[len(title) :].lstrip(" :,;—-")
        items.append((title, text))
    return shorten_text(parts[0][1], names), items


def _fact(text: str = "", bold: Sequence[Any] = (), html: str = "", more: str = "") -> dict[str, Any]:
    """One fact of the verdict box: ``text``, the names in ``bold``, then ``html`` (built from escaped parts)."""
    return {"text": text, "bold": [str(b) for b in bold], "html": Markup(html), "more": more}


def verdict_box(analysis: Mapping[str, Any] | None, names: Mapping[str, str] | None = None) -> str:
    """The verdict (templates/verdict.html.j2), rendered from its parts, with compact labels."""
    from perbench.report.templating import render

    return str(render("verdict.html.j2", verdict=verdict_data(analysis, names or {})))


def verdict_data(analysis: Mapping[str, Any] | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    """What the verdict box shows (None without a verdict): its class, lead, parts and facts."""
    v = _d(_d(analysis).get("verdict"))
    if not v:
        return None
    metric = str(v.get("metric") or "")
    pct = is_pct_metric(metric)
    facts = []
    decision = v.get("decision")
    if decision in DECISIONS:
        facts.append(_fact(html=badge(*DECISIONS[str(decision)])))

    def nm(ms: Sequence[Any]) -> list[str]:
        return [names.get(str(m), str(m)) for m in ms]

    if v.get("deploy"):
        facts.append(_fact("deploy ", nm([v["deploy"]])))
    if _l(v.get("equivalent")):
        facts.append(_fact("equivalent to the leader: ", nm(v["equivalent"])))
    if _l(v.get("contenders")):
        facts.append(_fact("still in contention: ", nm(v["contenders"])))
    elif not v.get("deploy") and len(_l(v.get("tied"))) > 1:
        facts.append(_fact("tied: ", nm(v["tied"])))
    if metric:
        facts.append(_fact(html=f"{metric_head(metric)} {value_ci(v.get('value'), v.get('ci'), pct)}"))
    members = _l(_d(v.get("best_set")).get("members"))
    if members:
        more = f" and {len(members) - 6} more" if len(members) > 6 else ""
        facts.append(_fact("could be the best (simultaneous 95%): ", nm(members[:6]), more=more))
    if v.get("runner_up"):
        facts.append(_fact("runner-up " + nm([v["runner_up"]])[0]))
    outs = _d(_d(v.get("stability")).get("outcomes"))
    if outs and len(outs) > 1:
        said = {k: DECISIONS.get(str(k), (str(k), ""))[0] for k in outs}
        facts.append(_fact("over the bootstrap replicates: " + ", ".join(
            f"{said[k]} {100 * float(x):.0f}%" for k, x in outs.items())))  # fmt: skip
    if isinstance(v.get("margin"), int | float):
        facts.append(_fact(f"equivalence margin ±{num(v['margin'], pct)}{' pts' if pct else ''}"))
    if _l(v.get("reference_lines")):
        facts.append(_fact("reference lines (never recommended): " + ", ".join(nm(v["reference_lines"]))))
    if v.get("upstream_metric"):
        agrees = v.get("agrees")
        word = "puts several first" if agrees is None else ("agrees" if agrees else "disagrees")
        head = metric_head(str(v["upstream_metric"]))
        facts.append(_fact("upstream ", html=Markup("{} {} (τ-b {})").format(head, word, Markup(_tau(v)))))
    lead, parts = _parts(v, names)
    cls = "verdict" + ("" if decision in ("separable", "equivalent") or v.get("deploy") else " tie")
    return {"cls": cls, "lead": lead or str(v.get("text") or "No verdict text."), "parts": parts, "facts": facts}


def _size(s: Any, crossed: bool) -> dict[str, str] | None:
    s = _d(s)
    if not s:
        return None
    per = "" if crossed else " per user"
    return {"prompts": num(s.get("prompts"), pct=False), "per": per, "users": num(s.get("users"), pct=False)}


def power_section(analysis: Mapping[str, Any] | None, names: Mapping[str, str] | None = None) -> str:
    """The planner's table for the verdict metric (templates/power.html.j2): leader − each other deployable
    method (compact ``names``)."""
    from perbench.report.templating import render

    names = names or {}
    a = _d(analysis)
    metric = str(_d(a.get("verdict")).get("metric") or "")
    plans = [_d(p) for p in _l(_d(a.get("power")).get(metric))]
    if not plans:
        return ""
    pct = is_pct_metric(metric)
    rows = []
    for p in plans:
        c = _d(p.get("components"))
        crossed = bool(c.get("crossed"))
        comps = ", ".join(
            f"{k} {float(c[k]):.3g}" for k in ("user", "prompt", "residual") if isinstance(c.get(k), int | float)
        )
        rows.append(
            {
                "a": names.get(str(p.get("a")), str(p.get("a"))),
                "b": names.get(str(p.get("b")), str(p.get("b"))),
                "observed": num(p.get("observed"), pct, signed=True),
                "components": comps,
                "separate": _size(p.get("separate"), crossed),
                "effect": num(p.get("effect"), pct, True),
                "equivalence": _size(p.get("equivalence"), crossed),
            }
        )
    return str(render("power.html.j2", metric=metric_head(metric), plans=rows))

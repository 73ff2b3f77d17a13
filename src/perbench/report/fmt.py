"""Formatting functions shared by the report sections: every string from data is escaped (markupsafe, Jinja2's
escaping) or rendered by an autoescaping template (:mod:`perbench.report.templating`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

NA = "n/a"

_DECODERS = {
    "args": "ARGS",
    "best_of_n": "Best-of-N",
    "genarm": "GenARM",
    "zero_shot": "zero-shot",
    "icl_rag": "ICL-RAG",
}
_QUALITIES = {
    "rubric_satisfaction": "rubric sat.",
    "personal_reward": "user reward",
    "rouge1": "ROUGE-1",
    "rougeL": "ROUGE-L",
    "bertscore_f1": "BERTScore-F1",
    "rm_win": "win rate",
    "bon_gain": "BoN gain",
    "words": "length (words)",
}
_UPSTREAM = {
    "rm_acc": "RM acc. (seen + unseen)",
    "rm_acc_seen": "RM acc. seen",
    "rm_acc_unseen": "RM acc. unseen",
    "rm_acc_all": "RM acc. all pairs",
    "rm_acc_pers_only": "RM acc. pers.-only",
    "rm_acc_consensus": "RM acc. consensus",
    "rm_acc_paraphrased": "RM acc. paraphrased prompts",
    "rm_bok_acc": "best-of-k acc.",
    "rm_ties": "Ties score (RewardBench 2)",
    "rm_consistency": "paraphrase consistency",
    "fewshot_acc": "few-shot acc.",
    "fewshot_active_acc": "few-shot acc. (active)",
    "pa": "policy acc. (sequence tilt)",
    "pa_prefix_mean": "policy acc. variant (prefix-sum / length)",
    "pa_prefix_sum": "policy acc. variant (prefix-sum, not shift-invariant)",
    "pa_rgd": "policy acc. variant (top-k RGD-induced policy)",
}


def is_missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def is_pct_metric(metric: str) -> bool:
    """Accuracies, satisfactions, ROUGE, BERTScore and win rates are fractions, shown as %; counts are not."""
    return not any(s in metric for s in ("words", "reward", "n_systems"))


def metric_label(metric: str) -> str:
    """``args:rubric_satisfaction`` → ``ARGS · rubric sat.``; ``fewshot_acc@5`` → ``few-shot acc. @5``."""
    if ":" in metric:
        dec, _, q = metric.partition(":")
        qual = _QUALITIES.get(q)
        if qual is None and q.startswith("bon_gain_"):
            qual = "BoN gain " + _QUALITIES.get(q[len("bon_gain_") :], q[len("bon_gain_") :])
        return f"{_DECODERS.get(dec, dec)} · {qual or q}"
    if metric.startswith("rm_acc_on_"):
        name, _, kind = metric[len("rm_acc_on_") :].partition("@")
        what = {"bok": "best-of-k acc.", "ties": "Ties score", "consistency": "paraphrase consistency"}
        return f"{what.get(kind, 'RM acc.')} on {name}"
    base, at, n = metric.partition("@")
    return _UPSTREAM.get(base, base) + (f" @{n}" if at else "")


def metric_head(metric: str) -> Markup:
    """A metric's display label as HTML, its name on hover."""
    return Markup(span("", metric_label(metric), metric))


def quality_label(quality: str) -> str:
    """``rubric_satisfaction`` → ``rubric sat.`` (a downstream quality without its decoder)."""
    return metric_label(f"_:{quality}").partition(" · ")[2] or quality


def num(x: Any, pct: bool = True, signed: bool = False, digits: int = 1) -> str:
    """A number as text (``pct``: a fraction shown as a percentage); missing values show as ``n/a``."""
    if is_missing(x):
        return NA
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(escape(x))
    v = 100 * float(x) if pct else float(x)
    if not pct and not signed and float(x).is_integer() and abs(v) < 1e6:
        return str(int(v))
    sign = "+" if signed else ""
    return f"{v:{sign}.{digits}f}" if pct else f"{v:{sign}.3g}"


def ci_text(ci: Any, pct: bool = True, signed: bool = False) -> str:
    """``[lo, hi]`` or an empty string when there is no interval."""
    if not isinstance(ci, Sequence) or len(ci) != 2 or any(is_missing(v) for v in ci):
        return ""
    return f"[{num(ci[0], pct, signed)}, {num(ci[1], pct, signed)}]"


def span(cls: str, text: Any, title: str = "") -> str:
    """``<span class=cls title=title>text</span>`` (the ``span`` macro of templates/macros.html.j2): text and title
    escaped."""
    from perbench.report.templating import environment

    return str(environment().get_template("macros.html.j2").module.span(cls, str(text), title))


def value_ci(x: Any, ci: Any = None, pct: bool = True, signed: bool = False, na: str | None = None) -> str:
    """``62.5 <span class=ci>[17.9, 87.2]</span>`` or an ``n/a`` marker whose hover text gives the reason."""
    if is_missing(x):
        return na_span(na)
    c = ci_text(ci, pct, signed)
    return num(x, pct, signed) + (" " + span("ci", c) if c else "")


class NotApplicable(str):
    """The n/a marker of a cell as HTML (its reason on hover); a table whose every value is one is hidden."""

    reason: str


def na_span(reason: str | None) -> NotApplicable:
    why = str(reason or "not available in this run")
    out = NotApplicable(span("na", NA, why))
    out.reason = why
    return out


def all_na(rows: Sequence[Sequence[Any]], skip: int = 1) -> str | None:
    """The most common reason when every value of ``rows`` (past the first ``skip`` label columns) is n/a or empty,
    else None."""
    values = [c for r in rows for c in r[skip:] if str(c).strip()]
    if not rows or any(not isinstance(c, NotApplicable) for c in values):
        return None
    reasons = Counter(c.reason for c in values if isinstance(c, NotApplicable))
    return reasons.most_common(1)[0][0] if reasons else "no values"


def table(
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    cls: str = "",
    what: str = "",
    skip: int = 1,
    scroll: bool = True,
) -> str:
    """A table of cells (HTML built from escaped parts); header texts are escaped unless Markup. A table
    whose every value is n/a is replaced by one line saying so (``what`` names it) and why."""
    from perbench.report.templating import render

    head = [h if isinstance(h, Markup) else escape(h) for h in head]
    why = all_na(rows, skip)
    rows = [[Markup(c) for c in r] for r in rows]  # cells are HTML built from escaped parts (the sections' contract)
    hidden = f"{what or 'This table'}: n/a for every row ({why}), so the table is left out." if why else ""
    return str(render("table.html.j2", head=head, rows=rows, cls=cls, scroll=scroll, hidden=hidden))


def badge(text: str, kind: str) -> str:
    return span(f"badge {kind}", text)

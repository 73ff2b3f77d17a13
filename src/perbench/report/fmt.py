"""Formatting functions shared by the report sections: every string from data goes through :func:`esc`."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

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


def esc(x: Any) -> str:
    """HTML-escape any value (quotes included), so data never becomes markup."""
    return html.escape(str(x), quote=True)


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


def quality_label(quality: str) -> str:
    """``rubric_satisfaction`` → ``rubric sat.`` (a downstream quality without its decoder)."""
    return metric_label(f"_:{quality}").partition(" · ")[2] or quality


def num(x: Any, pct: bool = True, signed: bool = False, digits: int = 1) -> str:
    """A number as text (``pct``: a fraction shown as a percentage); missing values show as ``n/a``."""
    if is_missing(x):
        return NA
    if isinstance(x, bool) or not isinstance(x, int | float):
        return esc(x)
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


def value_ci(x: Any, ci: Any = None, pct: bool = True, signed: bool = False, na: str | None = None) -> str:
    """``62.5 <span class=ci>[17.9, 87.2]</span>`` or an ``n/a`` marker whose hover text gives the reason."""
    if is_missing(x):
        return na_span(na)
    c = ci_text(ci, pct, signed)
    return num(x, pct, signed) + (f' <span class="ci">{c}</span>' if c else "")


def na_span(reason: str | None) -> str:
    why = reason or "not available in this run"
    return f'<span class="na" title="{esc(why)}">{NA}</span>'


def table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """A table from already-escaped cell HTML; header texts are escaped here."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    klass = f' class="{esc(cls)}"' if cls else ""
    return f'<div class="scroll"><table{klass}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def badge(text: str, kind: str) -> str:
    return f'<span class="badge {esc(kind)}">{esc(text)}</span>'

"""What the verdict's pick costs on the other qualities of its decoder, and how it changes the length of its
answers: each difference to zero-shot decoding beside its two causes, sampling from the policy (random pick −
zero-shot) and re-ranking by the reward model (pick − random pick), read from ``verdict.trade_offs`` (the
analysis's numbers; nothing here decides)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from perbench.report.extract import _d, _l
from perbench.report.fmt import is_pct_metric, metric_label, na_span, value_ci
from perbench.report.templating import render


def trade_off_section(analysis: Mapping[str, Any] | None, names: Mapping[str, str] | None = None) -> str:
    """The verdict's trade-offs as a table (one row per quality), or "" when the verdict has none."""
    v = _d(_d(analysis).get("verdict"))
    rows = [_d(r) for r in _l(v.get("trade_offs"))]
    pick = str(v.get("pick") or "")
    if not rows or not pick:
        return ""
    shown = (names or {}).get(pick, pick)
    out = []
    lengths = 0
    for r in rows:
        metric = str(r.get("metric") or "")
        lengths += metric.partition(":")[2] == "words"
        pct = is_pct_metric(metric)

        def part(p: Any, pct: bool = pct) -> str:
            p = _d(p)
            if not p:
                return na_span("no random pick from the same pool on this decoder")
            return value_ci(p.get("value"), p.get("ci"), pct, signed=True)

        out.append(
            [
                metric_label(metric),
                value_ci(r.get("delta"), r.get("ci"), pct, signed=True),
                part(r.get("sampling")),
                part(r.get("reranking")),
            ]
        )
    head = [
        "quality",
        f"{shown} − zero-shot",
        "sampling (random pick − zero-shot)",
        f"re-ranking by {shown} (pick − random pick)",
    ]
    cells = [[r[0], *(Markup(c) for c in r[1:])] for r in out]
    qualities = len(out) - lengths
    return str(render("trade_offs.html.j2", shown=shown, head=head, rows=cells, qualities=qualities, lengths=lengths))

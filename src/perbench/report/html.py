"""A self-contained HTML report from a results dict (tables; no external assets)."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from perbench.io import atomic_write_text

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{padding:.3rem .6rem;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f6f6f6}
.muted{color:#888;font-size:.85rem}.best{font-weight:600;background:#eef7ee}
.bar{display:inline-block;height:.6rem;background:#6a9;vertical-align:middle;margin-left:.3rem}
code{background:#f4f4f4;padding:0 .2rem}
"""


def _fmt(x: Any, pct: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        return f"{100 * x:.1f}" if pct else f"{x:.3g}"
    return html.escape(str(x))


def _ci(entry: dict[str, Any], key: str = "ci") -> str:
    lo, hi = entry.get(key, [None, None])
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return ""
    return f' <span class="muted">[{_fmt(lo)}, {_fmt(hi)}]</span>'


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def render(results: dict[str, Any]) -> str:
    bench = results["benchmark"]
    prov = results["provenance"]
    parts = [
        f"<h1>perbench — {html.escape(bench['name'])}</h1>",
        f"<p class=muted>{html.escape(results['created'])} · config {results['config_hash']} · "
        f"git {html.escape(str(prov.get('git')))} · policy <code>{html.escape(prov['models']['policy']['name'])}</code>"
        f" · RM backbone <code>{html.escape(prov['models']['rm_backbone']['name'])}</code></p>",
        f"<p>{bench['pairs']} pairs · {bench['users_seen']} seen / {bench['users_unseen']} unseen users · "
        f"{bench['skipped']['total']} rows skipped · {bench['weighting']}-weighted</p>",
    ]

    up = results["upstream"]
    parts.append("<h2>Upstream: RM accuracy (%, 95% CI by user)</h2>")
    rows = []
    for label, r in up.items():
        acc = r["rm_accuracy"]
        cells = [html.escape(label) + (' <span class="muted">baseline</span>' if r["baseline"] else "")]
        for g in ("seen", "unseen", "all"):
            e = acc.get(g)
            cells.append(_fmt(e["accuracy"]) + _ci(e) if e else "–")
        cells.append(str(acc.get("all", {}).get("ties", "–")))
        pa = r.get("policy_accuracy", {})
        for g in ("seen", "unseen"):
            cells.append(_fmt(pa[g]["sum"]["accuracy"]) if g in pa else "–")
        rows.append(cells)
    parts.append(_table(["method", "seen", "unseen", "all", "ties", "policy acc. seen", "policy acc. unseen"], rows))

    curves = {k: v["fewshot_curve"] for k, v in up.items() if "fewshot_curve" in v}
    if curves:
        shots = sorted({int(n) for c in curves.values() for n in c})
        parts.append("<h2>Few-shot adaptation of unseen users (RM accuracy %)</h2>")
        parts.append(
            _table(
                ["method"] + [f"{n} shots" for n in shots],
                [
                    [html.escape(k)] + [_fmt(c.get(str(n), {}).get("accuracy")) for n in shots]
                    for k, c in curves.items()
                ],
            )
        )

    down = results["downstream"]
    if down:
        parts.append("<h2>Downstream: what generation gives each user</h2>")
        metrics = [
            ("rubric_satisfaction", "rubric sat. %"),
            ("rubric_all", "all aspects %"),
            ("rougeL", "ROUGE-L"),
            ("judge_score", "judge %"),
            ("rm_win", "RM win rate %"),
            ("words", "words"),
        ]
        present = [(m, t) for m, t in metrics if any(m in d for d in down.values())]
        best = {m: max((d[m]["mean"] for d in down.values() if m in d), default=None) for m, _ in present}
        rows = []
        for label, d in down.items():
            cells = [html.escape(label)]
            for m, _ in present:
                if m not in d:
                    cells.append("–")
                    continue
                v = d[m]["mean"]
                text = _fmt(v, pct=m != "words") + (_ci(d[m]) if m != "words" else "")
                cls = ' class="best"' if m not in ("words", "rm_win") and v == best[m] and len(down) > 1 else ""
                cells.append(f"<span{cls}>{text}</span>")
            rows.append(cells)
        parts.append(_table(["decoder[guide]"] + [t for _, t in present], rows))
        if any("rubric_satisfaction" in d for d in down.values()):
            parts.append(
                "<p class=muted>Rubric satisfaction is exact: the fraction of each user's checkable "
                "rubric aspects the generated text meets, averaged over (user, prompt).</p>"
            )

    if down:
        parts.append(_deltas(down))
        parts.append(_bon_curves(down))
    rgd = {
        k: v["policy_accuracy"] for k, v in up.items() if any("rgd" in g for g in v.get("policy_accuracy", {}).values())
    }
    if rgd:
        parts.append(_rgd_table(rgd))

    if results.get("skipped_combinations"):
        parts.append("<h2>Skipped combinations</h2>")
        parts.append(
            _table(
                ["decoder", "method", "reason"],
                [
                    [html.escape(s["decoder"]), html.escape(s["method"]), html.escape(s["reason"])]
                    for s in results["skipped_combinations"]
                ],
            )
        )

    parts.append("<h2>Provenance</h2>")
    pk = prov["packages"]
    parts.append(_table(["package", "version"], [[html.escape(k), html.escape(str(v))] for k, v in pk.items() if v]))
    work = results["work"]
    parts.append(
        f"<p class=muted>work computed: {html.escape(str(work['computed']))} · reused: "
        f"{html.escape(str(work['reused']))} · timing (s): {html.escape(str(results['timing_s']))}</p>"
    )
    parts.append(
        "<h2>Accounting policies</h2><ul>"
        + "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in results["policies"].items())
        + "</ul>"
    )
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>perbench report</title><style>{CSS}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )


def _signed(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:+.1f}"


def _deltas(down: dict[str, Any]) -> str:
    """Paired differences of each output's quality against zero-shot and ICL-RAG on the same targets."""
    refs = sorted({r for d in down.values() for r in d.get("vs", {})})
    metrics = [
        m
        for m in ("rubric_satisfaction", "rougeL", "judge_score")
        if any(m in d.get("vs", {}).get(r, {}) for d in down.values() for r in refs)
    ]
    if not refs or not metrics:
        return ""
    names = {"rubric_satisfaction": "rubric sat.", "rougeL": "ROUGE-L", "judge_score": "judge"}
    head = ["decoder[guide]"] + [f"Δ {names[m]} vs {r}" for r in refs for m in metrics]
    rows = []
    for label, d in down.items():
        cells = [html.escape(label)]
        for r in refs:
            for m in metrics:
                e = d.get("vs", {}).get(r, {}).get(m)
                cells.append(_signed(e["delta"]) + _ci(e) if e else "–")
        rows.append(cells)
    return "<h2>Downstream: difference to zero-shot and ICL-RAG (points, paired, 95% CI by user)</h2>" + _table(
        head, rows
    )


def _bon_curves(down: dict[str, Any]) -> str:
    """Ground-truth quality of Best-of-n vs n for every RM, with the pool's oracle and sample mean."""
    curves = {label: d["bon_curve"] for label, d in down.items() if d.get("bon_curve")}
    if not curves:
        return ""
    ns = sorted({n for c in curves.values() for m in c.values() for n in m["n"]})
    rows = []
    refs: dict[str, dict[str, Any]] = {}
    for label, c in curves.items():
        for metric, m in c.items():
            vals = dict(zip(m["n"], m["quality"], strict=True))
            rows.append(
                [html.escape(label), html.escape(metric)] + [_fmt(vals.get(n), pct=metric != "rougeL") for n in ns]
            )
            refs.setdefault(metric, m)
    for metric, m in refs.items():
        for key, name in (("oracle", "oracle (best of n by ground truth)"), ("sample_mean", "random pick")):
            vals = dict(zip(m["n"], m[key], strict=True))
            rows.append(
                [f'<span class="muted">{name}</span>', html.escape(metric)]
                + [_fmt(vals.get(n), pct=metric != "rougeL") for n in ns]
            )
    return "<h2>Best-of-N: ground-truth quality vs N (first N samples of one shared pool)</h2>" + _table(
        ["RM", "quality"] + [f"N={n}" for n in ns], rows
    )


def _rgd_table(pa: dict[str, Any]) -> str:
    rows = []
    for label, groups in pa.items():
        for g, e in groups.items():
            r = e.get("rgd")
            if not r or "skipped" in r:
                continue
            rows.append(
                [
                    html.escape(label),
                    g,
                    _fmt(r["sum"]["accuracy"]) + _ci(r["sum"]),
                    _fmt(r["mean"]["accuracy"]),
                    _fmt(r["miss_rate"]),
                    str(r["pairs_both_miss"]),
                ]
            )
    if not rows:
        return ""
    return "<h2>Policy accuracy under the RGD-induced policy (%, top-k softmax; misses = −inf)</h2>" + _table(
        ["method", "group", "sum", "mean", "response miss rate", "pairs both missed"], rows
    )


def write_report(results: dict[str, Any], path: str | Path) -> None:
    atomic_write_text(path, render(results))

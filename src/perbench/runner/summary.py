"""What a finished run prints: the verdict paragraph, the headroom table and which benchmark to trust."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def print_verdict(analysis: dict[str, Any]) -> None:
    """The verdict paragraph, a Kendall τ-b table (upstream metric → downstream metric) and the NDCG / RBO of
    the verdict metric's best predictor beside their chance values, on stdout. Under ``PERBENCH_QUIET=1`` the
    verdict and its decision line still print (they are the run's answer, not a log line); the τ table does not."""
    import os

    verdict = analysis.get("verdict") or {}
    print("\nVerdict: " + str(verdict.get("text", "no verdict (no downstream metric)")))
    if verdict.get("decision"):
        facts = [f"Decision on {verdict.get('metric')}: {verdict['decision']}"]
        for key, name in (("deploy", "deploy"), ("equivalent", "equivalent"), ("contenders", "contenders")):
            got = verdict.get(key)
            if got:
                facts.append(f"{name}: {got if isinstance(got, str) else ', '.join(map(str, got))}")
        if verdict.get("reference_lines"):
            facts.append("reference lines: " + ", ".join(map(str, verdict["reference_lines"])))
        print("; ".join(facts))
        st = verdict.get("stability") or {}
        outs = st.get("outcomes") or {}
        if st.get("replicates", 0) >= 2 and outs:
            shown = ", ".join(f"{k} {100 * v:.0f}%" for k, v in outs.items())
            picks = ", ".join(f"{m} {100 * v:.0f}%" for m, v in list((st.get("picks") or {}).items())[:3])
            tail = f"; picks {picks}" if picks else ""
            print(f"Stability over {st['replicates']} bootstrap replicates: {shown}{tail}")
    pairs = (analysis.get("selection") or {}).get("pairs") or []
    if not pairs or os.environ.get("PERBENCH_QUIET") == "1":
        return
    ups = list(dict.fromkeys(p["upstream"] for p in pairs))
    downs = list(dict.fromkeys(p["downstream"] for p in pairs))
    quality = str(verdict.get("metric") or "").split(":")[-1]
    with_tau = {p["downstream"] for p in pairs if p["kendall_tau_b"].get("value") is not None}
    # the verdict's quality under each decoder; the rest are in results.json and the report
    downs = [d for d in downs if d.split(":")[-1] == quality and d in with_tau] or downs[:3]
    ups = [u for u in ups if not u.startswith("fewshot")] or ups
    cell = {(p["upstream"], p["downstream"]): p for p in pairs}
    width = max(len(u) for u in ups) + 2
    print(
        f"\nKendall τ-b between method rankings (95% CI, deployable systems: reference lines left out), {len(ups)} "
        f"upstream × {len(downs)} downstream metrics:"
    )
    for d in downs:
        print(f"  → {d}")
        for u in ups:
            t = (cell.get((u, d)) or {}).get("kendall_tau_b") or {}
            v, ci = t.get("value"), t.get("ci")
            text = "n/a" if v is None else f"{v:+.2f}" + ("" if not ci else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")
            print(f"    {u:<{width}}{text}")
    best = ((analysis.get("selection") or {}).get("best_predictor") or {}).get(verdict.get("metric")) or {}
    pair = cell.get((best.get("upstream"), verdict.get("metric"))) or {}
    heads = [(k, pair.get(k) or {}) for k in ("ndcg", "rbo")]
    if all(e.get("value") is not None for _, e in heads):
        shown = ", ".join(f"{k.upper()} {e['value']:.2f} (chance {e.get('chance') or 0:.2f})" for k, e in heads)
        print(f"  {best['upstream']} → {verdict['metric']}: {shown}, over {pair.get('n_systems')} systems")


def headroom_lines(analysis: Mapping[str, Any], metric: str | None = None) -> list[str]:
    """The verdict metric's null and ceiling, and every system against them, as text lines (the CLI summary)."""
    room = analysis.get("headroom") or {}
    metric = metric or str((analysis.get("verdict") or {}).get("metric") or "")
    entry = room.get(metric)
    if not entry or not entry.get("oracle") or not entry.get("headroom"):
        return []

    def pts(e: Mapping[str, Any] | None, delta: bool = True) -> str:
        e = e or {}
        v, ci = e.get("value"), e.get("ci")
        if v is None:
            return "n/a"
        text = f"{100 * v:+.1f}" if delta else f"{100 * v:.1f}%"
        return text + (f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else "")

    def share(e: Mapping[str, Any] | None) -> str:
        e = e or {}
        v, ci = e.get("value"), e.get("ci")
        if v is None:
            return "n/a"
        return f"{100 * v:.0f}%" + (f" [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if ci else "")

    lines = [
        f"\n{metric} against its null and ceiling (points, 95% CIs): random pick {pts(entry['random_pick'], False)}, "
        f"oracle {pts(entry['oracle'], False)}, headroom {pts(entry['headroom'])}"
    ]
    if entry.get("sampling_term"):
        lines.append(f"  sampling alone (random pick − greedy zero-shot): {pts(entry['sampling_term'])}")
    systems = entry.get("systems") or {}
    order = sorted(systems, key=lambda m: -(systems[m].get("value") or float("-inf")))
    width = max((len(m) for m in order), default=6) + 2
    lines.append(f"  {'system':<{width}}{'value':>8}  {'gain over random':<22}{'share of headroom':<20}beats random*")
    for m in order:
        e = systems[m]
        mark = "yes" if e.get("beats_random") else "no"
        if e.get("role") != "deployable":
            mark += f" ({e.get('role')})"
        value = "n/a" if e.get("value") is None else f"{100 * e['value']:.1f}%"
        lines.append(f"  {m:<{width}}{value:>8}  {pts(e.get('gain')):<22}{share(e.get('share')):<20}{mark}")
    lines.append(f"  * {entry.get('test')}")
    return lines


def print_headroom(analysis: Mapping[str, Any]) -> None:
    for line in headroom_lines(analysis):
        print(line)


def print_validity(analysis: dict[str, Any]) -> None:
    """Which benchmark to trust: for the verdict metric (else the first downstream metric with predictors), each
    predictor's τ-b, ρ and NDCG with CIs, the verdict with its uncertainty, and the headline comparison."""
    validity = analysis.get("validity") or {}
    by = validity.get("by_downstream") or {}
    metric = (analysis.get("verdict") or {}).get("metric")
    d = metric if metric in by else next(iter(by), None)
    if d is None:
        return
    entry = by[d]
    rows = entry.get("predictors") or []
    width = max(len(str(r["upstream"])) for r in rows) + 2 if rows else 0

    def corr(e: dict[str, Any] | None) -> str:
        e = e or {}
        v, ci = e.get("value"), e.get("ci")
        return "n/a" if v is None else f"{v:+.2f}" + ("" if not ci else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")

    print(f"\nWhich benchmark to trust for {d} (τ-b / Spearman ρ / NDCG, 95% CI, over systems):")
    pre = entry.get("prespecified") or {}
    if pre.get("upstream"):
        print(f"  the predictor fixed before the run: {pre['upstream']}, τ-b {corr(pre.get('kendall_tau_b'))}")
    if validity.get("reference_lines"):
        print(f"  (deployable systems only; reference lines left out: {', '.join(validity['reference_lines'])})")
    for r in rows:
        coefs = " / ".join(corr(r.get(k)) for k in ("kendall_tau_b", "spearman", "ndcg"))
        print(f"  {r['upstream']:<{width}}{coefs}  ({r.get('n_systems')} systems)")
    print("  " + str((entry.get("verdict") or {}).get("text", "")))
    if entry.get("headline"):
        print("  " + str(entry["headline"]))

"""Plain data for the figures and tables, pulled from results.json, its analysis and cells.jsonl."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from perbench.report.fmt import is_missing

Curve = list[tuple[int, float, float | None, float | None]]
_AT = re.compile(r"^(fewshot(?:_active)?_acc)@(\d+)$")
HEADLINE_UPSTREAM = ("rm_acc_seen", "rm_acc_unseen", "pa", "rm_acc_pers_only", "pa_rgd")


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def metrics_of(analysis: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    m = _d(analysis.get("metrics"))
    return [str(x) for x in _l(m.get("upstream"))], [str(x) for x in _l(m.get("downstream"))]


def main_downstream(analysis: Mapping[str, Any], limit: int = 3) -> list[str]:
    """The verdict metric first, then the same quality under the other decoders (then anything else but the
    zero-shot decoder's own metrics, which have a single system)."""
    _, downs = metrics_of(analysis)
    verdict = _d(analysis.get("verdict")).get("metric")
    first = [verdict] if verdict in downs else []
    quality = str(verdict).partition(":")[2] if verdict else ""
    same = [d for d in downs if d.partition(":")[2] == quality and d not in first and not d.startswith("zero_shot")]
    rest = [d for d in downs if d not in first and d not in same and "rm_win" not in d and "bon_gain" not in d]
    rest = [d for d in rest if not d.startswith("zero_shot")]  # one system: shown as the reference instead
    return (first + same + rest)[:limit]


def main_upstream(analysis: Mapping[str, Any], limit: int = 3) -> list[str]:
    """RM accuracy seen / unseen and the headline policy accuracy, or whatever upstream metrics exist."""
    ups, _ = metrics_of(analysis)
    chosen = [u for u in HEADLINE_UPSTREAM if u in ups]
    rest = [u for u in ups if u not in chosen]
    return (chosen + rest)[:limit]


def fewshot_curves(analysis: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, Curve]:
    """Method → [(shots, accuracy, lo, hi)], from the analysis table (``fewshot_acc@N``), else from results."""
    out: dict[str, Curve] = {}
    for method, row in _d(analysis.get("table")).items():
        for metric, e in _d(row).items():
            m = _AT.match(metric)
            if not m or is_missing(_d(e).get("value")):
                continue
            ci = _l(e.get("ci")) or [None, None]
            label = method if m.group(1) == "fewshot_acc" else f"{method} (active)"
            out.setdefault(label, []).append((int(m.group(2)), float(e["value"]), ci[0], ci[1]))
    if out:
        return out
    for method, up in _d(results.get("upstream")).items():
        for key, suffix in (("fewshot_curve", ""), ("fewshot_curve_active", " (active)")):
            for n, e in _d(_d(up).get(key)).items():
                acc = _d(e).get("accuracy")
                if str(n).isdigit() and isinstance(acc, int | float) and not is_missing(acc):
                    ci = _l(e.get("ci")) or [None, None]
                    out.setdefault(method + suffix, []).append((int(n), float(acc), ci[0], ci[1]))
    return out


def bon_curves(results: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    return {
        str(label): {str(q): _d(c) for q, c in _d(d.get("bon_curve")).items()}
        for label, d in _d(results.get("downstream")).items()
        if isinstance(d, dict) and _d(d.get("bon_curve"))
    }


def per_user_values(cells: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Metric → method → per-user mean (pooled over prompts and groups). ``rm_acc`` pools seen and unseen."""
    want = set(metrics)
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for c in cells:
        metric = str(c.get("metric"))
        key = "rm_acc" if metric in ("rm_acc_seen", "rm_acc_unseen") and "rm_acc" in want else metric
        v = c.get("value")
        if key not in want or not isinstance(v, int | float) or is_missing(float(v)):
            continue
        s = sums[(key, str(c.get("method")), str(c.get("user")))]
        s[0] += float(v)
        s[1] += 1
    out: dict[str, dict[str, list[float]]] = {m: {} for m in metrics}
    for (metric, method, _user), (total, n) in sorted(sums.items()):
        out[metric].setdefault(method, []).append(total / n)
    return {k: v for k, v in out.items() if v}


def per_user_from_fairness(analysis: Mapping[str, Any]) -> dict[str, dict[str, list[float]]]:
    per = {
        m: [float(v) for v in _d(f.get("per_user")).values() if not is_missing(v)]
        for m, f in _d(analysis.get("fairness")).items()
        if isinstance(f, dict)
    }
    per = {m: v for m, v in per.items() if v}
    return {"rm_acc": per} if per else {}


def win_gain_rows(results: Mapping[str, Any], quality: str) -> list[dict[str, Any]]:
    """Each guided output's RM win rate vs zero-shot next to its paired ground-truth gain over zero-shot."""
    rows = []
    for label, d in _d(results.get("downstream")).items():
        if not isinstance(d, dict) or "rm_win" not in d:
            continue
        win = _d(d.get("rm_win"))
        gain = _d(_d(_d(d.get("vs")).get("zero_shot")).get(quality))
        rows.append(
            {
                "label": str(label),
                "win": win.get("mean"),
                "win_ci": win.get("ci"),
                "null": win.get("null"),
                "gain": gain.get("delta"),
                "gain_ci": gain.get("ci"),
                "excludes_zero": gain.get("excludes_zero"),
            }
        )
    return rows


def win_gain_from_analysis(analysis: Mapping[str, Any], quality: str) -> list[dict[str, Any]]:
    """The same from the analysis: ``DECODER:rm_win`` of a method and its paired difference to zero-shot."""
    table = _d(analysis.get("table"))
    paired = _d(analysis.get("paired"))
    rows = []
    for metric in metrics_of(analysis)[1]:
        dec, _, q = metric.partition(":")
        if q != "rm_win":
            continue
        for method, row in table.items():
            win = _d(_d(row).get(metric))
            if is_missing(win.get("value")):
                continue
            gain: dict[str, Any] = next(
                (
                    _d(p)
                    for p in _l(paired.get(f"{dec}:{quality}"))
                    if _d(p).get("a") == method and _d(p).get("b") == "zero_shot"
                ),
                {},
            )
            rows.append(
                {
                    "label": f"{dec}[{method}]",
                    "win": win.get("value"),
                    "win_ci": win.get("ci"),
                    # the random pick of a pooled decoder's win rate is its no-information null, n/(n+1)
                    "null": _d(_d(_d(analysis.get("headroom")).get(metric)).get("random_pick")).get("value"),
                    "gain": gain.get("delta"),
                    "gain_ci": gain.get("ci"),
                    "excludes_zero": gain.get("excludes_zero"),
                }
            )
    return rows


def rl_histories(results: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    """The rl phase's per-step history of every trained run, labelled ``ARM GROUP|seedN``."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for label, arm in _d(_d(results.get("rl")).get("arms")).items():
        for run_id, run in _d(_d(arm).get("runs")).items():
            hist = _l(_d(run).get("history"))
            if hist:
                out[f"{label} {run_id}"] = [_d(h) for h in hist]
    return out


def rl_summary(results: Mapping[str, Any], quality: str = "rubric_satisfaction") -> list[dict[str, Any]]:
    """Per arm of the rl phase (each RM, the placebo, each KL-matched random update): its runs, the mean
    normalised reward gain during training (base-sd units), the mean KL from the base policy on the evaluated
    prompts (nats per sequence), and the paired ``quality`` gains of its greedy and sampled outputs over the
    untrained policy's, over the placebo's and over the KL-matched update's (greedy), each with its CI, plus
    the RM's win rate of its greedy output over the base policy's."""
    rl = _d(results.get("rl"))
    evaluation = _d(rl.get("evaluation"))
    rows = []
    for label, arm in _d(rl.get("arms")).items():
        arm = _d(arm)
        runs = [_d(r) for r in _d(arm.get("runs")).values()]
        gains = [g for r in runs if isinstance(g := _d(r.get("summary")).get("reward_norm_gain"), int | float)]
        kls = [k for r in runs if isinstance(k := r.get("kl_eval", r.get("kl")), int | float)]

        def vs(mode: str, role: str, label: str = str(label)) -> dict[str, Any]:
            return _d(_d(_d(_d(_d(evaluation.get(mode)).get(label)).get("vs")).get(role)).get(quality))

        greedy = _d(_d(evaluation.get("greedy")).get(label))
        rows.append(
            {
                "label": str(label),
                "kind": arm.get("kind"),
                "runs": len(runs),
                "reward_gain": sum(gains) / len(gains) if gains else None,
                "kl": sum(kls) / len(kls) if kls else None,
                "greedy": vs("greedy", "base"),
                "sampled": vs("sampled", "base"),
                "vs_placebo": vs("greedy", "placebo"),
                "vs_kl_matched": vs("greedy", "kl_matched"),
                "rm_win": _d(greedy.get("rm_win")),
            }
        )
    return rows

"""The report's figures (matplotlib, Agg, imported lazily): PNG for the page, PNG and SVG files beside it.

Every function takes plain data and returns a :class:`Plot` (or None when there is nothing to draw); figures are
built without pyplot's global state, math-text parsing is off (a ``$`` in a method label is just a character),
and SVG ids use a fixed salt with no date, so the same data gives the same files.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perbench.report.fmt import is_missing, is_pct_metric, metric_label, quality_label
from perbench.report.labels import family_styles
from perbench.report.labels import short as compact

#: systems labelled on an in-page scatter (the top ones by the downstream metric)
TOP_LABELS = 5
PALETTE = ("#3b6fb6", "#e07b39", "#3f9e5a", "#c4453c", "#8064a8", "#8c6d3f", "#d16ba5", "#6f6f6f", "#b5b535", "#2eb3c4")
_RC: dict[str, Any] = {
    "text.parse_math": False,
    "svg.hashsalt": "perbench",
    "svg.fonttype": "none",
    "font.size": 8.5,
    "axes.titlesize": 9,
    "axes.labelsize": 8.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e6e6e6",
    "grid.linewidth": 0.6,
    "legend.fontsize": 7.5,
    "legend.frameon": False,
}


#: one point of a few-shot curve: (shots, accuracy, CI low, CI high)
Point = tuple[int, float, float | None, float | None]


@dataclass(frozen=True)
class Plot:
    """A rendered figure: ``name`` is the file stem (safe characters only), ``in_page`` whether the page shows it."""

    name: str
    title: str
    png: bytes
    svg: bytes
    in_page: bool = True


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.")[:100] or "plot"


def short(label: str, n: int = 22) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


@contextmanager
def _style() -> Iterator[Any]:
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        from matplotlib.figure import Figure

        yield Figure


def _render(fig: Any, name: str, title: str, in_page: bool = True, dpi: int = 110) -> Plot:
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=dpi, metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    return Plot(safe_name(name), title, png.getvalue(), svg.getvalue(), in_page)


def _margins(
    fig: Any,
    left: float = 0.7,
    right: float = 0.2,
    bottom: float = 0.55,
    top: float = 0.4,
    wspace: float = 0.0,
    hspace: float = 0.0,
) -> None:
    """Fixed margins in inches (no layout engine: one draw per saved format keeps rendering fast)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, wspace=wspace, hspace=hspace
    )


def _scale(metric: str) -> float:
    return 100.0 if is_pct_metric(metric) else 1.0


def _unit(metric: str) -> str:
    return " (%)" if is_pct_metric(metric) else ""


def _tau_title(pair: Mapping[str, Any]) -> str:
    tau = pair.get("kendall_tau_b") or {}
    v, ci = tau.get("value"), tau.get("ci")
    if is_missing(v):
        return "τ-b n/a"
    text = f"τ-b = {v:+.2f}"
    if isinstance(ci, Sequence) and len(ci) == 2 and not any(is_missing(c) for c in ci):
        text += f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return text


def _points(pair: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    return [
        (str(q[0]), float(q[1]), float(q[2]))
        for q in pair.get("points") or []
        if isinstance(q, Sequence) and len(q) == 3 and not is_missing(q[1]) and not is_missing(q[2])
    ]


def _ci_err(table: Mapping[str, Any] | None, systems: Sequence[str], metric: str, values: Sequence[float]) -> Any:
    """(2, n) error-bar lengths from each system's 95% CI in the analysis table (0 where it has none)."""
    lo, hi = [], []
    for m, v in zip(systems, values, strict=True):
        ci = ((table or {}).get(m) or {}).get(metric, {}).get("ci") if isinstance(table, Mapping) else None
        ok = isinstance(ci, Sequence) and len(ci) == 2 and not any(is_missing(c) for c in ci)
        lo.append(max(0.0, v - float(ci[0]) * _scale(metric)) if ok else 0.0)  # type: ignore[index]
        hi.append(max(0.0, float(ci[1]) * _scale(metric) - v) if ok else 0.0)  # type: ignore[index]
    return [lo, hi]


def scatter_grid(
    pairs: Sequence[Mapping[str, Any]],
    ups: Sequence[str],
    downs: Sequence[str],
    name: str,
    in_page: bool = True,
    table: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> Plot | None:
    """Upstream (x) against downstream (y) values of every system, one panel per pair, fitted τ-b in the title.

    In-page grids number the top :data:`TOP_LABELS` systems of each panel (by the downstream metric) and key the
    numbers below (every other point stays unlabelled: 20 labels overlap into a blob); file-only grids (many
    panels) use one colour per method and a legend. ``names``: compact labels."""
    by = {(p.get("upstream"), p.get("downstream")): p for p in pairs}
    if not any((u, d) in by for d in downs for u in ups):
        return None
    systems = sorted({m for p in by.values() for m, _, _ in _points(p)})
    color = {m: st[0] for m, st in family_styles(systems, PALETTE).items()}
    names = {m: compact(m, names or {}) for m in systems}
    nrow, ncol = len(downs), len(ups)
    keys: list[str] = []
    from matplotlib.ticker import MaxNLocator

    with _style() as Figure:
        fig = Figure(figsize=(3.3 * ncol, 2.9 * nrow + 0.9))
        axes = fig.subplots(nrow, ncol, squeeze=False)
        _margins(fig, left=0.75, top=0.75, bottom=1.0, wspace=0.45, hspace=0.7)
        for i, d in enumerate(downs):
            for j, u in enumerate(ups):
                ax = axes[i][j]
                p = by.get((u, d))
                if p is None:
                    ax.set_axis_off()
                    continue
                pts = _points(p)
                xs, ys = [x * _scale(u) for _, x, _ in pts], [y * _scale(d) for _, _, y in pts]
                ms = [m for m, _, _ in pts]
                if table:  # each system's 95% CIs on both metrics (from the same two-way bootstrap)
                    ax.errorbar(
                        xs, ys, xerr=_ci_err(table, ms, u, xs), yerr=_ci_err(table, ms, d, ys), fmt="none",
                        ecolor="#bbb", elinewidth=0.6, zorder=2,
                    )  # fmt: skip
                ax.scatter(xs, ys, s=22, c=[color[m] for m in ms], zorder=3)
                if in_page:
                    _number_top(ax, xs, ys, [names[m] for m in ms], keys)
                ax.xaxis.set_major_locator(MaxNLocator(4))
                ax.yaxis.set_major_locator(MaxNLocator(4))
                ax.set_title(f"{_tau_title(p)}  (n={p.get('n_systems', len(pts))})")
                ax.set_xlabel(metric_label(u) + _unit(u))
                ax.set_ylabel(metric_label(d) + _unit(d))
        if not in_page and systems:
            from matplotlib.lines import Line2D

            handles = [Line2D([], [], ls="", marker="o", color=color[m], label=short(names[m], 28)) for m in systems]
            fig.legend(handles=handles, loc="lower center", ncol=min(6, len(handles)))
        if keys:
            fig.text(0.01, 0.012, "  ".join(keys), fontsize=7, wrap=True)
        fig.suptitle("Upstream metric (x) vs downstream metric (y), one point per system", fontsize=10)
        return _render(fig, name, "Upstream vs downstream", in_page, dpi=110 if in_page else 80)


def _number_top(
    ax: Any, xs: Sequence[float], ys: Sequence[float], shown: Sequence[str], keys: list[str], top: int = TOP_LABELS
) -> None:
    """Number the ``top`` points by y (1 = highest) with small digits beside them, and add ``N label`` to ``keys``
    (one number per label across panels): short digits do not overlap where 20 names would."""
    placed: list[tuple[float, float]] = []  # label positions in points: a label near another one moves up
    for k in sorted(range(len(xs)), key=lambda k: -ys[k])[:top]:
        entry = shown[k]
        found = next((i for i, e in enumerate(keys) if e.split(" ", 1)[1] == entry), None)
        if found is None:
            keys.append(f"{len(keys) + 1} {entry}")
            found = len(keys) - 1
        px, py = ax.transData.transform((xs[k], ys[k])) * 72.0 / ax.figure.dpi
        dy = 2.0
        while any(abs(px - qx) < 9 and abs(py + dy - qy) < 7 for qx, qy in placed):
            dy += 7.0
        placed.append((px, py + dy))
        line = {"arrowstyle": "-", "color": "#999", "lw": 0.4} if dy > 2 else None  # a moved label keeps a leader
        ax.annotate(str(found + 1), (xs[k], ys[k]), fontsize=6.5, xytext=(3, dy), textcoords="offset points",
                    color="#333", arrowprops=line)  # fmt: skip


def fewshot_plot(
    curves: Mapping[str, Sequence[tuple[int, float, float | None, float | None]]],
    names: Mapping[str, str] | None = None,
) -> Plot | None:
    """RM accuracy of unseen users against the number of shots they were adapted with, one line per method."""
    curves = {m: [c for c in cs if not is_missing(c[1])] for m, cs in curves.items()}
    curves = {m: sorted(cs) for m, cs in curves.items() if cs}
    if not curves:
        return None
    styles = family_styles(curves, PALETTE)
    names = {m: compact(m, names or {}) for m in curves}
    with _style() as Figure:
        fig = Figure(figsize=(6.6, 3.4))
        ax = fig.subplots()
        _margins(fig, right=1.7)
        for m, cs in curves.items():
            color, ls, marker = styles[m]
            xs = [c[0] for c in cs]
            ax.plot(xs, [100 * c[1] for c in cs], marker=marker, ms=3.5, ls=ls, color=color, label=short(names[m], 20))
            band = [c for c in cs if not is_missing(c[2]) and not is_missing(c[3])]
            if len(band) > 1 and ls == "-":  # one band per family (its full-data variant): bands of all would overlap
                ax.fill_between(
                    [c[0] for c in band],
                    [100 * float(c[2] or 0) for c in band],
                    [100 * float(c[3] or 0) for c in band],
                    color=color,
                    alpha=0.12,
                    lw=0,
                )
        ax.set_xlabel("shots per unseen user")
        ax.set_ylabel("RM accuracy (%)")
        ax.axhline(50, color="#999", lw=0.8, ls=":")
        ax.set_title("Few-shot adaptation of unseen users (95% CI band per family)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6.5)
        return _render(fig, "fewshot_curves", "Few-shot curves")


def bon_plot(
    curves: Mapping[str, Mapping[str, Mapping[str, Any]]], names: Mapping[str, str] | None = None
) -> Plot | None:
    """Ground-truth quality of Best-of-n vs n per RM (label → quality metric → curve), with oracle and random pick."""
    metrics = list(dict.fromkeys(q for c in curves.values() for q in c))[:4]
    if not metrics:
        return None
    styles = family_styles(curves, PALETTE)
    names = {m: compact(m, names or {}) for m in curves}
    ncol = min(2, len(metrics))  # two panels a row (stacked, not shrunk), the legend to the right
    nrow = -(-len(metrics) // ncol)
    with _style() as Figure:
        fig = Figure(figsize=(3.6 * ncol + 1.9, 3.0 * nrow))
        axes = list(fig.subplots(nrow, ncol, squeeze=False).ravel())
        for extra in axes[len(metrics) :]:
            extra.set_axis_off()
        axes = axes[: len(metrics)]
        _margins(fig, right=2.0, wspace=0.35, hspace=0.55, top=0.35)
        for ax, q in zip(axes, metrics, strict=True):
            ref: Mapping[str, Any] | None = None
            for label, c in curves.items():
                m = c.get(q)
                if not m or not m.get("n"):
                    continue
                ref = ref or m
                xs, ys = list(m["n"]), [_num(v) * _scale(q) for v in m.get("quality", [])]
                if len(xs) == len(ys):
                    color, ls, marker = styles[label]
                    ax.plot(xs, ys, marker=marker, ms=3, ls=ls, color=color, label=short(names[label], 22))
            if ref is not None:
                for key, style, text in (("oracle", "--", "oracle"), ("sample_mean", ":", "random pick")):
                    vals = ref.get(key)
                    if vals and len(vals) == len(ref["n"]):
                        ax.plot(list(ref["n"]), [_num(v) * _scale(q) for v in vals], ls=style, color="#777", label=text)
            ax.set_xscale("log", base=2)
            ns = sorted({int(n) for c in curves.values() for n in (c.get(q) or {}).get("n", [])})
            if ns:
                ax.set_xticks(ns, [str(n) for n in ns])
                ax.minorticks_off()
            ax.set_xlabel("N (samples)")
            ax.set_ylabel(quality_label(q) + _unit(q))
            ax.set_title(quality_label(q))
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="upper right", fontsize=6.5, ncol=1 if len(labels) <= 24 else 2)
        return _render(fig, "best_of_n_curves", "Best-of-N curves")


def rl_plot(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> Plot | None:
    """Training curves of the rl phase (``ARM RUN`` label → per-step history): normalised reward and KL to the
    base policy against the optimizer step, one line per run, one colour per arm (RM or placebo)."""
    runs = {k: list(h) for k, h in runs.items() if h}
    if not runs:
        return None
    arms = list(dict.fromkeys(label.split(" ")[0] for label in runs))
    with _style() as Figure:
        fig = Figure(figsize=(7.0, 3.2))
        axes = fig.subplots(1, 2)
        _margins(fig, wspace=0.35)
        labelled: set[str] = set()
        for label, hist in runs.items():
            arm = label.split(" ")[0]
            color = PALETTE[arms.index(arm) % len(PALETTE)]
            steps = list(range(1, len(hist) + 1))
            for ax, key in zip(axes, ("reward_norm", "kl"), strict=True):
                ys = [_num(r.get(key)) for r in hist]
                legend = short(arm, 30) if arm not in labelled and key == "reward_norm" else None
                ax.plot(steps, ys, marker="o", ms=2.5, lw=1.0, alpha=0.8, color=color, label=legend)
            labelled.add(arm)
        axes[0].set_ylabel("reward (base-policy sd units)")
        axes[0].axhline(0, color="#999", lw=0.8, ls=":")
        axes[1].set_ylabel("KL to the base policy (per token)")
        for ax in axes:
            ax.set_xlabel("optimizer step")
        axes[0].set_title("Reward over training")
        axes[1].set_title("KL over training")
        axes[0].legend(loc="best")
        return _render(fig, "rl_training", "RL training curves")


def per_user_plot(
    dists: Mapping[str, Mapping[str, Sequence[float]]], names: Mapping[str, str] | None = None
) -> Plot | None:
    """Per-user values (metric → method → one value per user): a box and every user as a dot."""
    dists = {k: {m: list(v) for m, v in d.items() if v} for k, d in dists.items()}
    dists = {k: d for k, d in dists.items() if d}
    if not dists:
        return None
    import numpy as np

    rng = np.random.default_rng(0)
    n_methods = max(len(d) for d in dists.values())
    with _style() as Figure:
        fig = Figure(figsize=(4.8 * len(dists), 1.1 + 0.42 * n_methods))
        axes = fig.subplots(1, len(dists), squeeze=False)[0]
        _margins(fig, left=1.55, wspace=0.6)
        for ax, (metric, d) in zip(axes, dists.items(), strict=True):
            systems = list(d)[::-1]
            data = [[v * _scale(metric) for v in d[m]] for m in systems]
            ax.boxplot(
                data,
                vert=False,
                widths=0.55,
                showfliers=False,
                medianprops={"color": "#c4453c"},
                boxprops={"color": "#555"},
            )
            for i, vals in enumerate(data, start=1):
                ax.scatter(vals, i + rng.uniform(-0.16, 0.16, len(vals)), s=7, alpha=0.55, color="#3b6fb6", zorder=3)
            ax.set_yticks(range(1, len(systems) + 1), [short(compact(m, names or {}), 18) for m in systems])
            ax.set_xlabel(metric_label(metric) + _unit(metric) + " per user")
            ax.set_title(metric_label(metric))
        return _render(fig, "per_user", "Per-user distributions")


def win_gain_plot(
    rows: Sequence[tuple[str, float, float]],
    quality: str,
    nulls: Sequence[Any] | None = None,
    top: int = 5,
    names: Mapping[str, str] | None = None,
) -> Plot | None:
    """RM win rate (its own guided output vs zero-shot) against the ground-truth gain over zero-shot, beside the
    win rate a scorer with no information gets under each decoder (``nulls``, one per row: n/(n+1) for Best-of-n,
    50% for a single guided output); only the ``top`` systems by gain are numbered, and keyed below."""
    keep = [i for i, r in enumerate(rows) if not is_missing(r[1]) and not is_missing(r[2])]
    if not keep:
        return None
    nulls = [nulls[i] if nulls is not None and i < len(nulls) else None for i in keep]
    rows = [rows[i] for i in keep]
    keys: list[str] = []
    with _style() as Figure:
        fig = Figure(figsize=(5.2, 4.2))
        ax = fig.subplots()
        _margins(fig, left=0.75, bottom=1.15)
        for k, (_, win, gain) in enumerate(rows):
            ax.scatter([100 * win], [100 * gain], s=26, color=PALETTE[k % len(PALETTE)], zorder=3)
        _number_top(
            ax, [100 * r[1] for r in rows], [100 * r[2] for r in rows],
            [compact(r[0], names or {}) for r in rows], keys, top,
        )  # fmt: skip
        fig.text(0.01, 0.012, "  ".join(keys), fontsize=6.5, wrap=True)
        ax.margins(x=0.3, y=0.15)
        ax.axhline(0, color="#999", lw=0.8)
        lines = sorted({round(100 * float(n), 3) for n in nulls if not is_missing(n)}) or [50.0]
        for x in lines:
            ax.axvline(x, color="#b45309", lw=0.9, ls=":")
            ax.annotate(
                f"null {x:.1f}%", (x, 1), xycoords=("data", "axes fraction"), fontsize=6.5, color="#b45309",
                xytext=(2, -8), textcoords="offset points",
            )  # fmt: skip
        ax.set_xlabel("RM win rate vs zero-shot (%)")
        ax.set_ylabel(f"ground-truth gain, {quality_label(quality)} (points)")
        ax.set_title("Does the RM's own preference track real gains?")
        return _render(fig, "win_rate_vs_gain", "Win rate vs ground-truth gain")


def _num(v: Any) -> float:
    return math.nan if is_missing(v) else float(v)


def save_plots(plots: Sequence[Plot], out_dir: Path) -> list[Path]:
    """Write every plot as NAME.png and NAME.svg into ``out_dir``; returns the paths written."""
    from perbench.io import atomic_write_bytes

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for p in plots:
        for ext, data in (("png", p.png), ("svg", p.svg)):
            path = out_dir / f"{p.name}.{ext}"
            atomic_write_bytes(path, data)
            written.append(path)
    return written

"""The verdict's phrasing: compact lists of systems and values with their intervals, in the words every
part of the verdict shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perbench.metrics.analysis.estimates import Estimates


def names(xs: Sequence[str], most: int = 3) -> str:
    """``a``, ``a and b``, ``a, b and c``, or ``a, b, c and N more``: never a long list in a sentence."""
    xs = list(xs)
    if len(xs) > most + 1:
        return ", ".join(xs[:most]) + f" and {len(xs) - most} more"
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + f" and {xs[-1]}"


class Phrasing:
    """The numbers a verdict reads (estimates, roles, the pooled headroom, the systems) and how it writes them."""

    def __init__(
        self,
        est: Estimates,
        roles: Mapping[str, str],
        margin: Mapping[str, Any],
        room: Mapping[str, Any] | None,
        systems: Mapping[str, Mapping[str, Any]] | None,
    ) -> None:
        self.est, self.roles, self.room = est, roles, room
        self.margin = float(margin["value"])
        self.margin_source = str(margin["source"])
        self.systems = systems or {}

    def pct(self, metric: str, x: float, delta: bool = False) -> str:
        return self.est.fmt(metric, x, delta)

    def with_ci(self, metric: str, e: Mapping[str, Any] | None, delta: bool = True, label: str | None = None) -> str:
        if not e or e.get("value") is None:
            return "n/a"
        return f"{self.pct(metric, e['value'], delta)} ({self.est.fmt_ci(metric, e.get('ci'), label)})"

    def share_text(self, s: Mapping[str, Any] | None) -> str:
        if not s or s.get("value") is None:
            return ""
        ci = s.get("ci")
        inner = f", 95% CI [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if ci else ""
        return f"{100 * s['value']:.0f}% of the headroom{inner}"

    def sim(self, metric: str, c: Mapping[str, Any]) -> str:
        e = self.est
        text = f"{c['a']} − {c['b']} = {e.fmt(metric, c['delta'], True)}"
        if c["ci"] is not None and c["ci"][0] == c["ci"][1]:
            text += " on every cell (no variation in the resamples)"
        else:
            text += ", " + e.fmt_ci(metric, c["ci"], f"simultaneous {100 * e.level:g}% CI")
        return text + (f", on the {c['cells']} cells both cover" if c["partial"] else "")

    def margin_text(self, metric: str) -> str:
        shown = "±" + self.est.fmt(metric, self.margin, True).lstrip("+")
        return f"{shown}, the margin: {self.margin_source}"

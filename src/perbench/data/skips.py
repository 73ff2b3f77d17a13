"""Counted skips: what a loader dropped and why, each reason in one unit (:class:`SkipReport`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: the unit a skip reason counts when it is not a preference pair (every other reason counts pairs)
REASON_UNITS: dict[str, str] = {
    "user_without_pairs": "user",
    "user_below_min_dialogues": "user",
    "profile_item_contains_answer_key": "profile_item",
    "gold_without_question": "row",
    "fewer_than_two_styles": "row",
    "turn_without_chosen": "turn",
    "turn_with_several_chosen": "turn",
    "turn_with_single_response": "turn",
}


@dataclass
class SkipReport:
    """Counted, never silent: what a loader dropped and why.

    Every reason has one unit. Pairs are the unit of results, so a reason counts the preference pairs it
    removed unless :data:`REASON_UNITS` (or ``unit=`` at the first ``add``) names another unit (users left
    without pairs, withheld profile items, rows that could hold no pair). :meth:`total` counts pairs only.
    """

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, where: str = "", n: int = 1, unit: str | None = None) -> None:
        """Count ``n`` dropped things (pairs unless the reason's unit says otherwise), with ``where`` as example."""
        unit = unit or self.units.get(reason) or REASON_UNITS.get(reason, "pair")
        known = self.units.setdefault(reason, unit)
        if known != unit:
            raise ValueError(f"skip reason {reason!r} counts {known}s, not {unit}s")
        self.counts[reason] += n
        ex = self.examples.setdefault(reason, [])
        if where and len(ex) < 5:
            ex.append(where)

    def merge(self, other: SkipReport) -> None:
        for reason, n in other.counts.items():
            self.add(reason, n=n, unit=other.unit(reason))
            ex = self.examples.setdefault(reason, [])
            ex.extend(other.examples.get(reason, [])[: max(0, 5 - len(ex))])

    def unit(self, reason: str) -> str:
        return self.units.get(reason) or REASON_UNITS.get(reason, "pair")

    def total(self) -> int:
        """Pairs dropped, over every reason that counts pairs."""
        return sum(n for r, n in self.counts.items() if self.unit(r) == "pair")

    def other(self) -> dict[str, int]:
        """Dropped things that are not pairs, by unit (e.g. ``{"user": 2}``)."""
        out: Counter[str] = Counter()
        for r, n in self.counts.items():
            if self.unit(r) != "pair":
                out[self.unit(r)] += n
        return dict(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total(),
            "unit": "pair",
            "other": self.other(),
            "counts": dict(self.counts),
            "units": {r: self.unit(r) for r in self.counts},
            "examples": self.examples,
        }

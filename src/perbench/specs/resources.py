"""The ``resources:`` block of a run config: what one unit of each kind asks of a machine
(``{KIND: {num_cpus: N, num_gpus: N, memory_gb: N}}``), each kind and field checked where it is written. Ray
schedules by it; the ``local`` executor ignores it."""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from perbench.specs.located import Where
from perbench.specs.values import Bound, check_value, show

#: the kinds of unit whose needs ``resources:`` sets (``runner/plan.py`` maps each unit to one), and their fields
RESOURCE_KINDS = ("features", "fit", "score", "decode", "rl")
RESOURCE_FIELDS: dict[str, Bound] = {
    "num_cpus": Bound(0),
    "num_gpus": Bound(0),
    "memory_gb": Bound(0, lo_open=True),
}


def parse_resources(value: Any, where: Where) -> dict[str, dict[str, float]] | None:
    """``resources: {KIND: {FIELD: number}}``, each kind and field checked where it is written."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise where.error(f"expected a mapping of unit kinds ({', '.join(RESOURCE_KINDS)}), got {show(value)}")
    out: dict[str, dict[str, float]] = {}
    for kind, needs in value.items():
        at = where.at(str(kind), value)
        if kind not in RESOURCE_KINDS:
            close = difflib.get_close_matches(str(kind), RESOURCE_KINDS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise at.error(f"unknown kind of unit {kind!r}.{hint} Allowed: {', '.join(RESOURCE_KINDS)}")
        if not isinstance(needs, dict):
            raise at.error(f"expected a mapping of {', '.join(RESOURCE_FIELDS)}, got {show(needs)}")
        out[kind] = {}
        for name, n in needs.items():
            field_at = at.at(str(name), needs)
            if name not in RESOURCE_FIELDS:
                close = difflib.get_close_matches(str(name), list(RESOURCE_FIELDS), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise field_at.error(f"unknown field {name!r}.{hint} Allowed: {', '.join(RESOURCE_FIELDS)}")
            check_value(n, Annotated[float, RESOURCE_FIELDS[name]], field_at)
            out[kind][name] = float(n)
    return out

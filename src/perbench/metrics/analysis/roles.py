"""What each method is in a verdict: a deployable candidate, or a reference line that is never recommended.

- ``deployable``: a reward model a team could ship (the only role that can be ``best``, ``tied`` or a contender);
- ``baseline``: a reward model that sets a floor (``random``, ``length``, any method the run lists under
  ``baselines:``);
- ``oracle``: an upper bound told the answer key (``icl_judge_oracle``);
- ``decoder``: a decoder without a reward model (``zero_shot``, ``icl``, ``icl_rag``): its metrics are its own
  ``DECODER:*``;
- ``invalid``: a reward model that returned invalid (NaN) scores for some pairs (the run passes it): its numbers
  count those pairs as wrong and are shown, but it is never a candidate.

A pooled decoder's two reference lines have fixed roles: ``random_pick`` (the pool mean: the exact Best-of-1, what a
pick with no information gets) is a baseline, ``oracle_pick`` (Best-of-n by the exact metric) an oracle.

Roles come from, in order: the explicit mapping a caller passes (``perbench compare`` passes what each run's
results.json says; a run passes its ``baselines:``), then the registry entry of the label's method name (the name
before any ``(params)``), then whether the method only has its own ``DECODER:*`` metrics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

DEPLOYABLE, BASELINE, ORACLE, DECODER, INVALID = "deployable", "baseline", "oracle", "decoder", "invalid"
ROLES = (DEPLOYABLE, BASELINE, ORACLE, DECODER, INVALID)
_NAME = re.compile(r"[A-Za-z0-9_]+")
#: the null and the ceiling of a pooled decoder (cells written by ``runner/pooled.py``)
RANDOM_PICK, ORACLE_PICK = "random_pick", "oracle_pick"
FIXED = {RANDOM_PICK: BASELINE, ORACLE_PICK: ORACLE}


def registry_role(label: str) -> str | None:
    """The registered role of a reward-model label such as ``random`` or ``icl_judge_oracle(profile_k=3)``;
    None for a name the registry does not know."""
    from perbench import registry

    m = _NAME.match(label)
    if m is None or m.group(0) not in registry.reward_models:
        return None
    return registry.reward_models.entry(m.group(0)).role or DEPLOYABLE


def method_roles(
    methods: Iterable[str], pure_decoders: Iterable[str], explicit: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every method's role (see the module docstring); an explicit role outside :data:`ROLES` is an error."""
    given = dict(explicit or {})
    for m, r in given.items():
        if r not in ROLES:
            raise ValueError(f"role of {m!r}: expected one of {', '.join(ROLES)}, got {r!r}")
    pure = set(pure_decoders)
    out: dict[str, str] = {}
    for m in methods:
        if m in given:
            out[m] = given[m]
        elif m in FIXED:
            out[m] = FIXED[m]
        elif m in pure:
            out[m] = DECODER
        else:
            out[m] = registry_role(m) or DEPLOYABLE
    return out


def reference_lines(roles: Mapping[str, str]) -> set[str]:
    return {m for m, r in roles.items() if r != DEPLOYABLE}

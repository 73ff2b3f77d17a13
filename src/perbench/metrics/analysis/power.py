"""Power planning: how many users × prompts would decide: separate the leader from each other system (or establish
equivalence), and show each system beats the random pick, all together.

The planner in three parts, each its own module, all importable from here as before:

- :mod:`.components`: the variance components (users, prompts, residual) of a comparison's per-cell differences by
  the method of moments, their K × K cross-covariances for several comparisons, and the variance the verdict's
  two-way bootstrap gives a mean of them (:func:`bootstrap_factors`);
- :mod:`.sizing`: one comparison's power to separate, to beat the random pick or to establish equivalence, the
  users × prompts that reach a target power (:func:`sizes`), and its entry and sentence (:func:`plan_comparison`);
- :mod:`.decision_model`: the whole decision's power by Monte Carlo (:class:`DecisionModel`) and its plan
  (:func:`decision`).

The planner assumes at least 5 users (fewer: the verdict's CIs resample prompts only).
"""

from __future__ import annotations

from perbench.metrics.analysis.components import (
    Components,
    Joint,
    bootstrap_factors,
    joint_components,
    variance_components,
    variances,
)
from perbench.metrics.analysis.decision_model import MC_DRAWS, MC_NULL_DRAWS, DecisionModel, decision, decision_text
from perbench.metrics.analysis.sizing import (
    LEADER,
    MAX_CELLS,
    POWER,
    RANDOM_PICK,
    VS_RANDOM,
    paired_cells,
    plan,
    plan_comparison,
    plan_text,
    power_beats,
    power_equivalent,
    power_separate,
    sizes,
)

__all__ = [
    "LEADER",
    "MAX_CELLS",
    "MC_DRAWS",
    "MC_NULL_DRAWS",
    "POWER",
    "RANDOM_PICK",
    "VS_RANDOM",
    "Components",
    "DecisionModel",
    "Joint",
    "bootstrap_factors",
    "decision",
    "decision_text",
    "joint_components",
    "paired_cells",
    "plan",
    "plan_comparison",
    "plan_text",
    "power_beats",
    "power_equivalent",
    "power_separate",
    "sizes",
    "variance_components",
    "variances",
]

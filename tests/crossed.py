"""Cells of a crossed users × prompts design with known effects, for simulation tests of the analysis.

A method m's value in cell (u, p) is μ_m + a_u + b_p + c_mu + d_mp + e_mup: a_u and b_p are shared by every
method (they cancel in a paired difference), c (method × user), d (method × prompt) and e (residual) are the
method's own, so the difference of two methods has variance components 2σ²_c (users), 2σ²_d (prompts) and 2σ²_e
(residual).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from perbench.metrics.analysis.estimates import Estimates

METRIC = "best_of_n:quality"


def crossed_cells(
    means: Mapping[str, float],
    rng: np.random.Generator,
    users: int = 20,
    prompts: int = 15,
    *,
    user_sd: float = 0.1,
    prompt_sd: float = 0.1,
    method_user_sd: float = 0.05,
    method_prompt_sd: float = 0.05,
    noise_sd: float = 0.2,
    metric: str = METRIC,
    group: str = "synth|policy|seed0",
) -> list[dict[str, Any]]:
    a = rng.normal(0, user_sd, users)
    b = rng.normal(0, prompt_sd, prompts)
    out = []
    for m, mu in means.items():
        c = rng.normal(0, method_user_sd, users)
        d = rng.normal(0, method_prompt_sd, prompts)
        e = rng.normal(0, noise_sd, (users, prompts))
        v = mu + a[:, None] + b[None, :] + c[:, None] + d[None, :] + e
        out += [
            {"group": group, "method": m, "metric": metric, "user": f"u{i}", "prompt": f"p{j}", "value": float(v[i, j])}
            for i in range(users)
            for j in range(prompts)
        ]
    return out


def estimates(cells: list[dict[str, Any]], n_boot: int = 200, seed: int = 0) -> Estimates:
    return Estimates(cells, None, None, "global_bt", n_boot, seed, 0.95, None)

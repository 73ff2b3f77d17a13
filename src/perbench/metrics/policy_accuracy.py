"""Policy accuracy (Rezk et al.): does the reward-guided policy prefer the user's chosen response?

Teacher-forced RGD score S_u(y) = Σ_t [log π(y_t | x, y_<t) + w · r_u(x, y_≤t)]; PA = mean 1[S(y_w) > S(y_l)]
(``sum``); ``mean`` divides each S by its length T. The exact formula is not public: this is our
documented reading. r_u(x, y_≤t) for every t comes from one forward over the full response.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def rgd_scores(logprobs: Sequence[np.ndarray], rewards: Sequence[np.ndarray], w: float) -> tuple[np.ndarray, np.ndarray]:
    """-> (sum variant, length-normalised variant) of S_u(y) per response."""
    s = np.array([float(np.sum(lp) + w * np.sum(r)) for lp, r in zip(logprobs, rewards, strict=True)])
    T = np.array([max(len(lp), 1) for lp in logprobs], dtype=np.float64)
    return s, s / T

"""Estimates and roles (perbench.metrics.analysis.estimates, .roles): what each CI says about itself, paired
differences on shared cells, and where a method's role comes from."""

from typing import Any

import pytest

from perbench.metrics.analysis import analyze
from perbench.metrics.analysis.estimates import binomial_bound
from perbench.metrics.analysis.roles import method_roles, registry_role

G = "b|p|seed0"


def _rows(method: str, metric: str, values: Any, users: int = 6, prompts: int = 5) -> list[dict[str, Any]]:
    return [
        {
            "group": G,
            "method": method,
            "metric": metric,
            "user": f"u{u}",
            "prompt": f"p{p}",
            "value": values(u, p) if callable(values) else values,
        }
        for u in range(users)
        for p in range(prompts)
    ]


def test_a_constant_value_says_its_resamples_never_vary() -> None:
    res = analyze(_rows("mpu", "args:rubric_satisfaction", 0.5), n_boot=50)
    e = res["table"]["mpu"]["args:rubric_satisfaction"]
    assert e["ci"] == [0.5, 0.5] and "no variation in the resamples" in e["ci_note"]


def test_exact_binomial_bound_for_all_zero_or_all_one() -> None:
    lo, hi = binomial_bound(0.0, 30, 0.95)
    assert lo == 0.0 and hi == pytest.approx(0.1157, abs=1e-4)  # 1 − 0.025^(1/30)
    assert binomial_bound(1.0, 30, 0.95) == pytest.approx((1 - hi, 1.0))


def test_paired_differences_say_when_they_use_the_shared_cells_only() -> None:
    a = _rows("mpu", "rm_acc_seen", lambda u, p: float((u + p) % 2))
    b = [r for r in _rows("global_bt", "rm_acc_seen", 0.5) if r["user"] in ("u0", "u1", "u2")]
    res = analyze(a + b, n_boot=50, reference_method="global_bt")
    [e] = res["paired"]["rm_acc_seen"]
    assert e["a"] == "mpu" and e["partial"] and e["cells"] == 15
    both = analyze(a + _rows("global_bt", "rm_acc_seen", 0.5), n_boot=50)["paired"]["rm_acc_seen"][0]
    assert not both["partial"] and both["cells"] == 30


def test_roles_from_the_registry_and_from_the_caller() -> None:
    assert registry_role("random") == "baseline" and registry_role("length") == "baseline"
    assert registry_role("icl_judge_oracle(profile_k=3)") == "oracle"
    assert registry_role("lore(rank=4)") == "deployable" and registry_role("my_hub_model") is None
    roles = method_roles(["mpu", "random", "zero_shot", "custom"], {"zero_shot"}, {"custom": "oracle"})
    assert roles == {"mpu": "deployable", "random": "baseline", "zero_shot": "decoder", "custom": "oracle"}
    with pytest.raises(ValueError, match="expected one of"):
        method_roles(["x"], set(), {"x": "winner"})

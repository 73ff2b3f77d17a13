"""Which methods saw the users' profiles: equal information is on record, not assumed.

On a benchmark whose users have profile items, the methods that read a user's text (GenARM's conditioning, the
ICL judge: the first ``profile_k`` items through :func:`~perbench.data.user_context.user_text`) see the profile,
while a frozen-feature RM sees it only where the loader puts profile items into every prompt (Personalized
RewardBench's ``include_profile``). When some methods of a run saw it and others did not, the accuracies compare
methods given different information; :func:`profile_access` records what each one saw, and the report marks
the ones that saw none.
"""

from __future__ import annotations

from typing import Any

from perbench.data.records import Benchmark


def method_notes(h: Any, bench: Benchmark) -> dict[str, Any]:
    """What results.json records of a method handle ``h`` beside its accuracies: ``profile`` (what it saw of the
    users' profiles; not for baselines) and ``fit_notes`` (what the method says of its own fit, e.g. lore_reg's α
    and its degenerate label)."""
    out: dict[str, Any] = {}
    seen = None if h.baseline else profile_access(h.probe, bench)
    if seen is not None:
        out["profile"] = seen
    if callable(getattr(h.cls, "fit_notes", None)):  # only then the fitted model: reloading one may load weights
        out["fit_notes"] = h.fitted().fit_notes()  # type: ignore[attr-defined]
    return out


def profile_access(method: Any, bench: Benchmark) -> dict[str, Any] | None:
    """What ``method`` (an unfitted instance) sees of the users' profiles on ``bench`` (None: no user has one)."""
    if not any(u.profile for u in bench.users.values()):
        return None
    in_prompt = int(bench.meta.get("include_profile") or 0)
    k = getattr(method, "profile_k", None)
    reads = isinstance(k, int) and k > 0 and getattr(method, "user_context", "auto") != "none"
    if reads:
        how = f"the first {k} profile items of each user, beside the prompt"
    elif in_prompt:
        how = f"the top {in_prompt} profile items in every prompt (the benchmark's include_profile)"
    else:
        how = None
    out: dict[str, Any] = {"saw_profile": how is not None, "how": how}
    if how is None:
        out["note"] = (
            "this method saw no profile item while methods that read the user's text did"
            " (set the benchmark's include_profile to put profile items into every prompt)"
        )
    return out

"""What a run derives from its stored units alone, memoized by content, and the record of what computing them cost.

- :func:`analysis_of`: the selection analysis of a run's cells (``analyze``: thousands of bootstrap replicates) is a
  pure function of the cells, the analysis options the config decides (:func:`~perbench.runner.results.
  analysis_options`), the adaptive rounds' summaries, the systems' traits and the code. It is kept in the shared
  cache's ``derived.sqlite`` under the digest of all of them (:func:`perbench.cache.memo_key`), so a rerun whose units
  are all found finished reads it back instead of recomputing it. The first run's analysis goes through the same
  JSON form the memo keeps (what results.json holds anyway), so a run and its rerun hand the same values on.
- :func:`compute_record`: results.json ``provenance.compute``, what this run spent beside what the run that computed
  its units spent (``first_run``: read from the results.json this run replaces), so a rerun that only read finished
  units does not hide the cost of computing them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perbench.io import dumps

if TYPE_CHECKING:
    from perbench.config import RunConfig


def analysis_of(
    cells: list[dict[str, Any]],
    cells_sha256: str,
    cfg: RunConfig,
    adaptive: Mapping[str, Any] | None,
    systems: Mapping[str, Mapping[str, Any]] | None,
    invalid: Mapping[str, int] | None = None,
    roles: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The analysis of ``cells`` (``cells_sha256``: a digest of their content, e.g. of their ``cells.jsonl`` text and
    the map of the ids in it), and whether it was read
    from the memo (``invalid``, ``roles``: see :func:`~perbench.runner.results.analyze_cells`)."""
    from perbench.memo import derived_store, memo_key
    from perbench.runner.results import analysis_options, analyze_cells

    options = analysis_options({c["metric"] for c in cells}, cfg, invalid, roles)
    key = memo_key("analysis", cells_sha256, options, adaptive, systems, dict(sorted((invalid or {}).items())))
    store = derived_store()
    if store is not None:
        try:
            got = store.get_json(key)
        finally:
            store.close()
        if isinstance(got, dict):
            return got, True
    analysis: dict[str, Any] = json.loads(dumps(analyze_cells(cells, cfg, adaptive, systems, invalid, roles)))
    store = derived_store()
    if store is not None:
        try:
            store.put_json(key, analysis)
        finally:
            store.close()
    return analysis, False


def compute_record(run_dir: Path, results: Mapping[str, Any]) -> dict[str, Any]:
    """``provenance.compute`` of a run about to write ``results``: this run's seconds and units, and the first run's
    (the run that computed units in this folder: its record is carried over from the results.json being replaced;
    this run itself when it computed units and nothing earlier did)."""
    this = _record(results)
    first = _earlier_first_run(run_dir / "results.json")
    if first is None and this["units_computed"]:
        first = this
    return {
        "this_run": this,
        "first_run": first,
        "note": "first_run: the run of this folder that computed its units (its phases' seconds); this_run: the run "
        "that wrote this file (a rerun that finds every unit finished reads them and spends seconds)",
    }


def _earlier_first_run(path: Path) -> dict[str, Any] | None:
    """The first run's record from an earlier results.json of the folder: its own ``first_run``, or (a file written
    before the record existed) the earlier run itself when it computed units."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(earlier, dict):
        return None
    compute = (earlier.get("provenance") or {}).get("compute") or {}
    if isinstance(compute.get("first_run"), dict):
        return dict(compute["first_run"])
    record = _record(earlier)
    return record if record["units_computed"] else None


def _record(results: Mapping[str, Any]) -> dict[str, Any]:
    """One run's entry of ``provenance.compute``: when it ran, its phases' seconds and its units."""
    units = (results.get("work") or {}).get("units") or {}
    return {
        "created": results.get("created"),
        "timing_s": dict(results.get("timing_s") or {}),
        "units_computed": int(units.get("computed") or 0),
        "units_found_finished": int(units.get("found_finished") or 0),
    }

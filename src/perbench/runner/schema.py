"""The results schema's version, and the fields of a results.json that the readers (report, compare, plan) use,
checked as they are read.

Each problem is a :class:`~perbench.data.rows.DataError` naming the file and the field (``results.json: field
'config.bootstrap': expected an integer in [0, 100000], got 1000000000``). The schema version must be one this
version knows; a results.json without one was written before versions were recorded (noted, not refused).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from perbench.config import MAX_BOOTSTRAP, margin_problem
from perbench.data.rows import DataError

#: 2: results.json always records the count and digest of its cells file (``cells``); 1: not always
SCHEMA_VERSION = 2
#: top-level sections the readers index into: each, when present, is a JSON object
SECTIONS = ("config", "analysis", "systems", "upstream", "downstream", "benchmark", "provenance")


def _show(v: Any) -> str:
    return json.dumps(v)[:40] if not isinstance(v, float) or math.isfinite(v) else repr(v)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def check_results(path: Path, results: dict[str, Any], notes: list[str]) -> bool:
    """Check ``results`` (read from ``path``); True when it is of the current schema."""

    def bad(key: str, why: str) -> DataError:
        return DataError(path, None, key, why)

    version = results.get("schema_version")
    current = False
    if version is None:
        notes.append(f"{path.name}: no schema_version (written by an older version): read as version 1")
    elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad("schema_version", f"expected a schema version (an integer ≥ 1), got {_show(version)}")
    elif version > SCHEMA_VERSION:
        raise bad(
            "schema_version",
            f"{version} is a schema this version does not know (it reads up to {SCHEMA_VERSION}): the run was "
            "written by a newer perbench; read it with that version",
        )
    else:
        current = version == SCHEMA_VERSION
    for key in SECTIONS:
        if key in results and not isinstance(results[key], dict):
            raise bad(key, f"expected a JSON object, got {_show(results[key])}")
    record = results.get("cells")
    if record is not None:
        if not isinstance(record, dict):
            raise bad("cells", f"expected the cells file's record (an object), got {_show(record)}")
        count, digest = record.get("count"), record.get("sha256")
        if "count" in record and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise bad("cells.count", f"expected a count of rows, got {_show(count)}")
        if "sha256" in record and not isinstance(digest, str):
            raise bad("cells.sha256", f"expected a hex digest, got {_show(digest)}")
    _check_config(results.get("config") or {}, bad)
    _check_analysis(results.get("analysis") or {}, bad)
    members = (results.get("systems") or {}).get("members")
    if members is not None and not (isinstance(members, dict) and all(isinstance(v, dict) for v in members.values())):
        raise bad("systems.members", "expected an object of systems, each an object")
    return current


def _check_config(config: dict[str, Any], bad: Any) -> None:
    boot = config.get("bootstrap")
    if boot is not None and (isinstance(boot, bool) or not isinstance(boot, int) or not 0 <= boot <= MAX_BOOTSTRAP):
        raise bad("config.bootstrap", f"expected an integer in [0, {MAX_BOOTSTRAP}], got {_show(boot)}")
    margin = config.get("equivalence_margin")
    if margin is not None:
        problem = margin_problem(float(margin)) if _number(margin) else f"expected a number, got {_show(margin)}"
        if problem:
            raise bad("config.equivalence_margin", problem)
    fraction = config.get("equivalence_fraction")
    if fraction is not None and not (_number(fraction) and 0 < fraction <= 1):
        raise bad("config.equivalence_fraction", f"expected a number in (0, 1], got {_show(fraction)}")
    for key in ("verdict_metric", "reference_method", "verdict_predictor"):
        v = config.get(key)
        if v is not None and not isinstance(v, str):
            raise bad(f"config.{key}", f"expected a string or null, got {_show(v)}")


def _check_analysis(analysis: dict[str, Any], bad: Any) -> None:
    roles = analysis.get("roles")
    if roles is not None and not (isinstance(roles, dict) and all(isinstance(r, str) for r in roles.values())):
        raise bad("analysis.roles", "expected an object of method → role (strings)")
    verdict = analysis.get("verdict")
    if verdict is not None:
        if not isinstance(verdict, dict):
            raise bad("analysis.verdict", f"expected a JSON object, got {_show(verdict)}")
        if verdict.get("metric") is not None and not isinstance(verdict["metric"], str):
            raise bad("analysis.verdict.metric", f"expected a string, got {_show(verdict['metric'])}")
    ranking = analysis.get("ranking")
    if ranking is None:
        return
    if not isinstance(ranking, dict):
        raise bad("analysis.ranking", f"expected a JSON object, got {_show(ranking)}")
    for metric, entry in ranking.items():
        if not isinstance(entry, dict):
            raise bad(f"analysis.ranking.{metric}", f"expected a JSON object, got {_show(entry)}")
        crit = entry.get("critical_value")
        if crit is not None and not (_number(crit) and crit > 0):
            raise bad(f"analysis.ranking.{metric}.critical_value", f"expected a number > 0, got {_show(crit)}")

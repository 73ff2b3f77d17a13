"""The run as a plan of units keyed by content: the local and Ray executors give the same results.json, on a
two-node Ray cluster whose workers share no folder with the driver, also when a worker is killed in the middle of
a unit and when a node leaves mid-run; a changed decoder parameter recomputes only that decoder's generations and
what depends on them, whichever executor runs it."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perbench.api import run
from tests.conftest import empty_cache
from tests.test_end_to_end import tiny_config, tiny_pool  # noqa: F401 - tiny_pool is a fixture

GRID = {
    "methods": ["global_bt", "mpu"],
    "decoders": ["zero_shot", {"name": "args", "k": 3, "w": 1.0}, {"name": "best_of_n", "n": 2}],
    "bertscore": False,
}
#: the grid with ARGS's k changed
OTHER_K = {**GRID, "decoders": ["zero_shot", {"name": "args", "k": 2, "w": 1.0}, {"name": "best_of_n", "n": 2}]}


def comparable(results: dict[str, Any]) -> dict[str, Any]:
    """results.json without what legitimately differs between two executions: timing, provenance, paths,
    and the work counters (which process computed what)."""
    drop = {"created", "timing_s", "provenance", "work", "plan", "config", "config_hash", "batching"}
    return {k: v for k, v in results.items() if k not in drop}


def assert_same(a: Any, b: Any, where: str = "results") -> None:
    """Equal trees, floats to 1e-6 relative: a reward summed in float32 in a batch of another shape (a worker
    scores its own unit's texts together; the local run scores them beside others) moves in the 7th digit."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b)), (where, a, b)
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), (where, sorted(set(a) ^ set(b)))
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def _without_k(upstream: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for label, up in upstream.items():
        pa = {
            g: {k: v for k, v in r.items() if k not in ("k", "w_source", "decoder")} if isinstance(r, dict) else r
            for g, r in up.get("policy_accuracy", {}).items()
        }
        out[label] = {**up, "policy_accuracy": pa}
    return out


def _run(pool: Path, out: Path, grid: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return run(tiny_config(pool, out).override(**grid, **extra)).results


@pytest.fixture(scope="module")
def local(tiny_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:  # noqa: F811
    """A cache and an out_dir for local runs of the grid (the cache is this module's for as long as it runs)."""
    base = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERBENCH_CACHE", str(empty_cache(base / "cache")))
        yield base / "runs", base / "cache"


@pytest.fixture(scope="module")
def first(tiny_pool: Path, local: tuple[Path, Path]) -> dict[str, Any]:  # noqa: F811
    return _run(tiny_pool, local[0], GRID)


@pytest.fixture(scope="module")
def other_k(tiny_pool: Path, local: tuple[Path, Path], first: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """The grid with ARGS's k changed, run after ``first`` into the same cache."""
    return _run(tiny_pool, local[0], OTHER_K)


def test_local_plan_lists_every_unit(tiny_pool: Path, local: tuple[Path, Path], first: dict[str, Any]) -> None:  # noqa: F811
    units = first["plan"]["units"]
    # features of the train and of the test responses; fit + upstream per method and baseline; generation per
    # (decoder, RM); one Best-of-N pool shared by every RM
    assert units["features"] == 2 and units["fit"] == units["upstream"] == 4
    # zero_shot, args and Best-of-N × 2 feature RMs (Best-of-N × the baselines too: they score any text)
    assert units["pool"] == 1 and units["generate"] == 1 + 2 + 4
    assert first["work"]["units"]["computed"] == sum(units.values()) and first["work"]["units"]["found_finished"] == 0
    again = _run(tiny_pool, local[0], GRID)
    assert again["work"]["computed"] == {} and again["work"]["units"]["found_finished"] == sum(units.values())


def test_changed_decoder_parameter_recomputes_only_its_generations(
    first: dict[str, Any], other_k: dict[str, Any], local: tuple[Path, Path]
) -> None:
    """A new k for ARGS is a new run folder, yet every unit that does not depend on ARGS's generations comes from
    the shared unit cache: only the two ARGS generation units run, and only their generations, the quality of
    their texts and their win rates are computed."""
    assert other_k["config_hash"] != first["config_hash"]
    assert (
        other_k["work"]["units"]["computed"] == 2
        and other_k["work"]["units"]["found_finished"] == sum(first["plan"]["units"].values()) - 2
    )
    work = other_k["work"]
    assert set(work["computed"]) == {"generate", "quality", "win_rate"}, work["computed"]
    assert work["computed"]["win_rate"] == work["computed"]["quality"] == 2  # one per RM that guides ARGS
    assert work["assembly"] == {}
    assert 0 < work["computed"]["generate"] < first["work"]["computed"]["generate"]
    # everything else is the first run's, number for number (policy accuracy names the deployed ARGS's k)
    assert _without_k(other_k["upstream"]) == _without_k(first["upstream"])
    for label, value in first["downstream"].items():
        if not label.startswith("args"):
            assert other_k["downstream"][label] == value, label
    # the new run's folder keeps its own copy of what it read: the finished markers and units it found
    run_dir = local[0] / f"rubrics-{other_k['config_hash']}"
    assert (run_dir / "units.sqlite").stat().st_size > 0


# ----------------------------------------------------------------------------------------------------- Ray
class Chaos:
    """Kills one Ray worker of the head node in the middle of a unit, then makes node 1 leave while one of its
    workers computes its second unit (so node 1 has finished one, and the driver has it); records what it did."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.killed: list[int] = []
        self.killed_units: list[str] = []  # the labels of the units whose workers it killed
        self.left = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seen_on_1: set[str] = set()
        while not self.stop.is_set() and not self.left:
            busy = self.cluster.busy_workers()
            on_0 = [pid for pid, (node, _) in busy.items() if node == 0]
            if not self.killed and on_0:
                time.sleep(0.3)  # let it get into the unit
                try:
                    os.kill(on_0[0], signal.SIGKILL)
                    self.killed.append(on_0[0])
                    self.killed_units.append(busy[on_0[0]][1].removeprefix("ray::perbench:"))
                except ProcessLookupError:
                    pass
            seen_on_1 |= {task for node, task in busy.values() if node == 1}
            if self.killed and len(seen_on_1) >= 2:
                time.sleep(1.0)
                self.cluster.leave(1)
                self.left = True
            time.sleep(0.05)

    def __enter__(self) -> Chaos:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_two_node_ray_cluster_without_shared_disk_matches_local(
    tiny_pool: Path,  # noqa: F811
    first: dict[str, Any],
    other_k: dict[str, Any],
    local: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ray")
    from tests.ray_cluster import LocalCluster

    driver = tmp_path / "driver"  # the driver's run folders and cache: no worker may touch them
    monkeypatch.setenv("PERBENCH_CACHE", str(empty_cache(driver / "cache")))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    from perbench.models import loader

    monkeypatch.setattr(loader, "_LOADED", {})  # the local runs' models: the driver must not need them
    with LocalCluster([driver], nodes=2, cpus=1) as cluster:
        with Chaos(cluster) as chaos:
            remote = _run(tiny_pool, driver / "runs", GRID, executor="ray")
        assert chaos.killed, "no Ray worker was seen computing a unit"
        assert chaos.left, "node 1 was never seen computing a unit"
        # a changed decoder parameter on what is left of the cluster: the finished units' results (fits, features)
        # are handed to the workers from the driver's stores, only the ARGS generations are computed
        changed = _run(tiny_pool, driver / "runs", OTHER_K, executor="ray")
        node_files = [p.name for i in range(2) for p in (cluster.node_dir(i) / "cache").rglob("*")]
    assert loader._LOADED == {}, "the driver loaded a model (every unit ran on a worker, the assembly reads them)"
    assert remote["plan"]["executor"] == "ray" and remote["work"]["remote"]["nodes"] == 2
    assert_same(comparable(remote), comparable(first))
    # nothing recomputed by the driver: every computation is a unit, and every unit ran on a worker
    assert remote["work"]["computed"] == {} and remote["work"]["assembly"] == {}
    # nothing lost and nothing computed twice: the workers' results, counted once each, make exactly what the
    # local run computed
    assert remote["work"]["computed_total"] == first["work"]["computed"] == remote["work"]["remote"]["computed"]
    assert remote["work"]["units"]["computed"] == sum(remote["plan"]["units"].values())
    # the workers computed exactly the local run's feature values: no unit re-extracts what a features unit holds
    assert_no_repeated_features(remote, first, local[0] / f"rubrics-{first['config_hash']}" / "samples.jsonl")
    assert_object_store_estimate(remote)
    # the unit whose worker was killed mid-unit was computed again, and that second attempt is counted
    retried = remote["work"]["remote"]["retried"]
    assert set(chaos.killed_units) <= set(retried), (chaos.killed_units, retried)
    assert all(n >= 1 for n in retried.values()), retried
    assert set(retried) <= set(remote["work"]["calls_by_unit"])
    # a worker fetches only the results whose keys its unit reads: ARGS guided by global_bt reads its fit and the
    # zero-shot outputs, not the train features its fit read; an upstream unit reads those through its fit (what
    # a task is handed references to is its whole closure)
    read, made = remote["work"]["remote"]["read_mb"], remote["work"]["remote"]["result_mb"]
    args = next(label for label in read if label.startswith("generate:args(k=3,w=1.0)[global_bt]"))
    assert 0 < read[args] < made["features:train"], (read, made)
    assert read["upstream:global_bt"] >= made["features:test"] + made["features:train"] - 0.002, (read, made)
    assert_same(comparable(changed), comparable(other_k))
    assert changed["work"]["units"]["computed"] == 2
    assert changed["work"]["remote"]["computed"] == other_k["work"]["computed"]
    assert changed["work"]["computed"] == {} and changed["work"]["assembly"] == {}
    # the nodes' own caches hold converted models only: no store of a run, no feature, sample or unit cache
    assert node_files and not [f for f in node_files if f.endswith(".sqlite")]


def assert_object_store_estimate(results: dict[str, Any]) -> None:
    """The object-store size the plan printed before the run against what the units' results measured: the largest
    result within a factor 1.5 either way, the total and the per-node figure never under the measurement, every
    unit at least half its measurement (docs/cluster.md states these factors)."""
    est, made = results["plan"]["object_store"], results["work"]["remote"]["result_mb"]
    big = max(made, key=made.__getitem__)
    assert est["largest"] == big, (est["largest"], big)
    assert made[big] / 1.5 <= est["largest_mb"] <= 1.5 * made[big], (est["largest_mb"], made[big])
    assert est["total_mb"] >= sum(made.values()) and est["per_node_mb"] >= 2 * made[big]
    pairs = {k: (est["units_mb"][k], v) for k, v in made.items()}
    assert all(e >= v / 2 for e, v in pairs.values()), pairs


def _features(calls: dict[str, int]) -> int:
    return calls.get("features.last", 0) + calls.get("features.tokens", 0)


def assert_no_repeated_features(remote: dict[str, Any], local: dict[str, Any], local_samples: Path) -> None:
    """The workers extracted the local run's feature values, unit by unit: no unit re-extracts what a unit it
    depends on holds. The one allowed difference: two guided generation units (ARGS under two RMs) that run side by
    side and generate the same text for a cell each extract its φ, where the local run's second one finds the
    first one's; so the guided units may exceed the local run's counts by at most the texts they share."""
    mine, theirs = remote["work"]["calls_by_unit"], local["work"]["calls_by_unit"]
    assert set(mine) == set(theirs)
    guided = {label for label in mine if label.startswith("generate:") and "[" in label.partition("@")[0]}
    differ = {u: (_features(mine[u]), _features(theirs[u])) for u in mine if _features(mine[u]) != _features(theirs[u])}
    assert set(differ) <= guided, differ
    assert all(r >= loc for r, loc in differ.values()), differ
    owners: dict[tuple[str, str], set[str]] = {}
    for line in local_samples.read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") == "generation" and "[" in row["decoder"]:
            owners.setdefault((row["prompt_id"], row["text"]), set()).add(row["decoder"])
    shared = sum(len(o) - 1 for o in owners.values())
    assert sum(r - loc for r, loc in differ.values()) <= shared, (differ, shared)


def test_resources_per_kind_reach_the_plan(tiny_pool: Path, tmp_path: Path) -> None:  # noqa: F811
    from perbench.runner.plan import Needs, needs_of
    from perbench.runner.state import RunState, load_benchmark
    from perbench.runner.stores import Stores
    from perbench.runner.work import Work

    resources = {"fit": {"num_gpus": 1}, "decode": {"num_cpus": 2, "memory_gb": 6}}
    cfg = tiny_config(tiny_pool, tmp_path).override(**GRID, resources=resources)
    state = RunState(cfg, None, load_benchmark(cfg), Stores.in_memory())
    state.load_models()
    needs = {u.kind: u.needs for u in Work(state, state.method_handles()).plan().units}
    assert needs["fit"] == Needs(1.0, 1.0, 2.0) and needs["upstream"] == needs["features"] == Needs(1.0, 0.0, 2.0)
    assert needs["generate"] == needs["pool"] == Needs(2.0, 0.0, 6.0)
    # the defaults fit one node with one GPU: on CUDA every kind takes the GPU, so units on it run in turn
    assert {needs_of(k, None, cuda=True) for k in ("features", "fit", "score", "decode")} == {Needs(1.0, 1.0, 2.0)}
    assert needs_of("rl", None, cuda=True) == Needs(1.0, 1.0, 4.0) and needs_of("fit", None, cuda=False).gpus == 0
    # resources never change where results go
    assert cfg.result_hash() == tiny_config(tiny_pool, tmp_path).override(**GRID).result_hash()


def test_a_unit_no_node_can_take_is_a_config_error() -> None:
    from perbench.errors import ConfigError
    from perbench.runner.executors import check_feasible
    from perbench.runner.plan import Unit, needs_of

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 1.0}}]
    check_feasible([Unit("fit", "global_bt", "k", needs=needs_of("fit", {"fit": {"num_cpus": 2}}, cuda=False))], nodes)
    fit = Unit("fit", "global_bt", "k", needs=needs_of("fit", None, cuda=True))
    with pytest.raises(ConfigError, match=r"resources\.fit: a fit unit \(fit:global_bt\) needs 1 CPU\(s\), 1 GPU"):
        check_feasible([fit], nodes)


class FakeRay:
    """Ray as the driver's loop uses it, without a cluster: each task returns a prepared result; records what each
    task was handed and the order of submissions and results."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results = results
        self.events: list[tuple[str, str]] = []
        self.handed: dict[str, tuple[Any, Any]] = {}

    def remote(self, fn: Any) -> Any:
        ray = self

        class Task:
            def options(self, *, name: str, **_: Any) -> Any:
                self.label = name.removeprefix("perbench:")
                return self

            def remote(self, config: Any, bench: Any, unit: Any, threads: int, held: Any, results: Any) -> str:
                ray.events.append(("submit", self.label))
                ray.handed[self.label] = (held, results)
                return self.label

        return Task()

    def put(self, value: Any) -> tuple[str, Any]:
        return ("put", value)

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"CPU": 8.0, "memory": 64.0 * 2**30}}]

    def wait(self, refs: list[str], num_returns: int, timeout: float) -> tuple[list[str], list[str]]:
        return refs[:1], refs[1:]

    def get(self, ref: str) -> Any:
        self.events.append(("result", ref))
        return self.results[ref]

    def cancel(self, ref: str, force: bool) -> None:
        pass

    def get_runtime_context(self) -> Any:
        import types

        return types.SimpleNamespace(gcs_address="127.0.0.1:1")


def _chain_work(pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[Any]]:
    """A run's work on a tiny config (in-memory stores) and a three-unit chain: features -> fit -> upstream."""
    from perbench.runner.plan import Unit
    from perbench.runner.state import RunState, load_benchmark
    from perbench.runner.stores import Stores
    from perbench.runner.work import Work

    monkeypatch.setenv("PERBENCH_QUIET", "1")
    cfg = tiny_config(pool, tmp_path)
    work = Work(RunState(cfg, None, load_benchmark(cfg), Stores.in_memory()), [])
    return work, [
        Unit("features", "train", "ka"),
        Unit("fit", "m", "kb", ("ka",)),
        Unit("upstream", "m", "kc", ("kb",)),
    ]


def test_a_task_is_handed_its_closures_keys_after_they_finished_and_every_attempt_is_counted(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver's loop over a fake Ray: a unit is submitted once its dependencies' results are in, handed the
    keys each result of its closure holds and references to them (nested in a dict, so Ray does not fetch them
    before the task starts); a result that came from a retry (attempt 1) and a dependency's result that a unit read
    at attempt 2 (rebuilt by Ray after a node loss) are both counted in ``work.remote.retried``."""
    from perbench.cache import encode_json
    from perbench.runner.executors import RayExecutor
    from perbench.runner.plan import Plan
    from perbench.runner.stores import UnitResult

    work, units = _chain_work(tiny_pool, tmp_path, monkeypatch)
    results = {
        "features:train": UnitResult("ka", {"features": {"phi": b"1"}}),
        "fit:m": UnitResult("kb", {"units": {"w": encode_json(1)}}, attempt=1, read={"ka": 0}),
        "upstream:m": UnitResult("kc", {"units": {"s": encode_json(2)}}, read={"ka": 2}),
    }
    fake = FakeRay(results)
    RayExecutor()._run(fake, Plan(units), work)
    labels = ["features:train", "fit:m", "upstream:m"]
    assert fake.events == [(e, label) for label in labels for e in ("submit", "result")]
    held, refs = fake.handed["upstream:m"]
    assert held == {"ka": {"features": ["phi"]}, "kb": {"units": ["w"]}}
    assert refs == {"ka": "features:train", "kb": "fit:m"}
    assert fake.handed["features:train"] == ({}, {})
    assert work.retried == {"fit:m": 1, "features:train": 2}
    assert work.executed == labels and work.s.stores.units.store.get_json("s") == 2


def test_a_unit_another_run_finished_after_the_plan_is_not_submitted_once_its_lease_is_claimed(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two runs share a cache: the other finishes ``fit:m`` and releases its lease after this run planned it as
    missing. Claiming the free lease, the driver looks again and reuses the unit instead of computing it twice."""
    from perbench.cache import encode_json
    from perbench.runner.executors import RayExecutor
    from perbench.runner.plan import Plan
    from perbench.runner.stores import UnitResult

    work, units = _chain_work(tiny_pool, tmp_path, monkeypatch)
    results = {
        "features:train": UnitResult("ka", {"features": {"phi": b"1"}}),
        "upstream:m": UnitResult("kc", {"units": {"s": encode_json(2)}}),
    }
    claim = work.leases.claim

    def finished_meanwhile(key: str) -> bool:
        if key == "kb":  # the other run stored it, and released the lease, just before this claim
            work.s.stores.absorb(units[1], UnitResult("kb", {"units": {"w": encode_json(1)}}))
        return claim(key)

    monkeypatch.setattr(work.leases, "claim", finished_meanwhile)
    fake = FakeRay(results)
    RayExecutor()._run(fake, Plan(units), work)
    assert ("submit", "fit:m") not in fake.events and work.executed == ["features:train", "upstream:m"]
    assert work.skipped == ["fit:m"] and fake.handed["upstream:m"][0]["kb"] == {"units": ["w"]}


def test_the_object_store_line_asks_twice_the_largest_result_plus_the_benchmark() -> None:
    from perbench.runner.footprint import describe

    mb = 2**20
    got = describe({"features:test": 3 * mb, "fit:mpu": mb, "features:train": None}, bench=mb // 2)
    assert got["largest"] == "features:test" and got["total_mb"] == 4 and got["per_node_mb"] == 6.5
    assert got["not_estimated"] == ["features:train"]
    assert got["text"].startswith("object store (estimated): the largest unit result 3 MB (features:test), 4 MB in all")
    assert "at least 6.5 MB" in got["text"] and "not estimated: features:train" in got["text"]


def test_two_configs_started_together_on_one_cache_compute_each_shared_unit_once(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two configs that share every unit but ARGS's generations, started at once as two ``perbench run``
    processes on one empty ``PERBENCH_CACHE``: each shared unit is computed by one of them (the other holds off on
    its lease, waits and reuses it), so together they compute the union of their plans once."""
    import subprocess
    import sys

    import yaml

    cache = empty_cache(tmp_path / "cache")
    env = {**os.environ, "PERBENCH_CACHE": str(cache), "PERBENCH_QUIET": "1"}
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    procs = []
    for name, grid in (("a", GRID), ("b", OTHER_K)):
        cfg = tiny_config(tiny_pool, tmp_path / "runs").override(**grid, run_name=name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        cmd = [sys.executable, "-m", "perbench.cli", "run", str(path)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    a, b = (json.loads((tmp_path / "runs" / n / "results.json").read_text()) for n in ("a", "b"))
    units_a, units_b = sum(a["plan"]["units"].values()), sum(b["plan"]["units"].values())
    assert units_a == units_b
    shared = units_a - 2  # all but the two ARGS generation units
    computed = a["work"]["units"]["computed"] + b["work"]["units"]["computed"]
    assert computed == units_a + 2, (a["work"]["units"], b["work"]["units"])
    waited = a["work"]["units"]["waited_for_another_run"] + b["work"]["units"]["waited_for_another_run"]
    found = a["work"]["units"]["found_finished"] + b["work"]["units"]["found_finished"]
    assert found == shared and 0 < waited <= shared
    assert _without_k(a["upstream"]) == _without_k(b["upstream"])

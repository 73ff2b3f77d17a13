"""The run: one config from data to report.

1. load and check the benchmark (before any model loads), then the models;
2. build the plan of units (``plan.py``) and let the configured executor compute them;
3. assemble: upstream per method, downstream per policy, the analysis, ``results.json``; then the caller's
   ``finish`` (``perbench.run`` and ``perbench run`` write the report with it, :mod:`perbench.api`).
Every expensive result is keyed by content (``units.py``), so step 3 only reads what step 2 left and a
rerun of the same config recomputes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perbench.config import RunConfig
from perbench.data.checks import skip_line
from perbench.data.isolation import TRACE_META, Sealed
from perbench.data.records import Benchmark
from perbench.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, jsonl_text, run_lock, writing_inside
from perbench.runner.cells import cells_record as cells_record_of
from perbench.runner.derived import analysis_of, compute_record
from perbench.runner.estimate import check_cpu_time
from perbench.runner.methods import MethodHandle
from perbench.runner.outcome import RunResult as RunResult  # also importable from here
from perbench.runner.preflight import check_config, check_models, check_paths, check_setup
from perbench.runner.results import attach_analysis, build_results, fit_reference_lines, systems_section
from perbench.runner.state import RunState, load_benchmark, load_upstream_benchmarks, log, needs_models
from perbench.runner.stores import Stores
from perbench.runner.summary import print_verdict
from perbench.runner.tables import write_samples_parquet
from perbench.runner.work import Work
from perbench.specs.endpoint import Endpoint

#: what a caller makes of a finished run (its report), called in the run directory while the run still holds it
Finish = Callable[[RunResult], object]


def run(config: RunConfig | str | Path | None = None, *, finish: Finish | None = None, **overrides: Any) -> RunResult:
    """Run a config (a RunConfig, a YAML path, or None for the embedded default) end to end: results.json,
    cells.jsonl and samples.jsonl. ``finish`` gets every finished run (each seed's, then the pooled one):
    :func:`perbench.run` passes the report writer, so the report is written by the room above."""
    if config is None:
        cfg = RunConfig.default()
    elif isinstance(config, RunConfig):
        cfg = config
    else:
        cfg = RunConfig.from_yaml(config)
    if overrides:
        cfg = cfg.override(**overrides)
    cfg = benchmark_tie_policy(cfg)
    check_config(cfg)  # here too: a seed's run is a copy that no longer knows the config's lines
    if cfg.seeds:
        from perbench.runner.seeds import run_seeds

        return run_seeds(cfg, lambda one: Runner(one, finish).run(), finish)
    return Runner(cfg, finish).run()


def benchmark_tie_policy(cfg: RunConfig) -> RunConfig:
    """The benchmark's own tie rule (its registry default ``tie_policy``, e.g. RewardBench 2's ``half``) when the
    config does not set one."""
    from dataclasses import fields

    from perbench import registry

    if "tie_policy" in cfg._origins or cfg.benchmark.name not in registry.benchmarks.names():
        return cfg
    rule = registry.benchmarks.entry(cfg.benchmark.name).defaults.get("tie_policy")
    default = next(f.default for f in fields(RunConfig) if f.name == "tie_policy")
    if rule is None or cfg.tie_policy != default or rule == cfg.tie_policy:
        return cfg
    return cfg.override(f"benchmark {cfg.benchmark.name}'s default", tie_policy=rule)


class Runner:
    def __init__(self, cfg: RunConfig, finish: Finish | None = None) -> None:
        self.cfg = cfg
        self.run_dir = cfg.run_dir()
        self.finish = finish

    def run(self) -> RunResult:
        from perbench.device import set_threads

        set_threads()
        t0 = time.perf_counter()
        check_config(self.cfg)
        check_setup(self.cfg)
        bench = load_benchmark(self.cfg)
        extras = load_upstream_benchmarks(self.cfg)
        if needs_models(self.cfg):  # what would fail mid-run fails here, before any weights load
            for b in (bench, *extras.values()):  # every system scores the upstream benchmarks' pairs too
                check_models(self.cfg, b)
            check_cpu_time(self.cfg, bench)  # a GPU-sized run on a CPU: refused with its estimate (allow_slow)
        check_paths(self.run_dir)
        # methods see opaque ids and stripped pairs from here on; ``sealed`` (grader side) maps the ids they see to
        # the ids results record, applied only as results are written, once every method has finished
        bench, extras, self.sealed = seal_run(bench, extras)
        from perbench import registry

        executor = registry.executors.get(self.cfg.executor)()
        executor.open()  # a Ray cluster joined and its nodes probed: its failures come before the run directory
        try:
            load_s = time.perf_counter() - t0
            self.run_dir.mkdir(parents=True, exist_ok=True)  # only once the config, the data and the cluster are good
            # nothing is written through a link inside the run directory; a second run of this config waits
            # the stores are closed when the run ends: its units.sqlite is left whole, with no -wal / -shm beside it
            with writing_inside(self.run_dir), run_lock(self.run_dir), Stores.of_run(self.run_dir) as stores:
                return self._run(bench, extras, t0, load_s, executor, stores)
        finally:
            executor.close()

    def _run(
        self, bench: Benchmark, extras: dict[str, Benchmark], t0: float, load_s: float, executor: Any, stores: Stores
    ) -> RunResult:
        import yaml

        cfg = self.cfg
        atomic_write_text(self.run_dir / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        log(f"run directory: {self.run_dir}")
        # a driver whose units compute elsewhere (Ray) plans under the units' device and dtype, and loads no model
        # weights for them
        remote = getattr(executor, "remote", False)
        state = RunState(cfg, self.run_dir, bench, stores, extras, computes_units=not remote)
        state.timing["benchmark"] = load_s
        log(
            f"benchmark {bench.name}: {bench.summary()['pairs']} pairs, {len(bench.seen_users)} seen / "
            f"{len(bench.unseen_users)} unseen users; {skip_line(bench)}"
        )
        for name, extra in state.extras.items():  # every benchmark the run loads reports what it skipped
            log(f"upstream benchmark {name}: {len(extra.pairs)} pairs, {len(extra.users)} users; {skip_line(extra)}")
        if state.needs_models():
            with state.timed("models"):
                state.load_models()
        handles = state.method_handles()
        work = Work(state, handles)
        from perbench import calls

        before_units = calls.snapshot()
        with state.timed("units"):
            plan = work.plan()
            store_need = None
            if cfg.executor != "local":  # what the cluster's object stores must hold, before any unit runs
                from perbench.runner.footprint import benchmark_bytes, describe, estimate

                store_need = describe(estimate(work, plan), benchmark_bytes(work))
                log(store_need.pop("text"))
            try:
                executor.execute(plan, work)
            finally:
                work.leases.close()
        log(
            f"plan: {len(plan.units)} units, {len(work.executed)} computed ({cfg.executor}), "
            f"{len(work.skipped)} found finished"
        )
        units_calls = calls.since(before_units)
        before, before_calls = state.stores.work(), calls.snapshot()
        with state.timed("upstream"):
            upstream = {h.label: work.up.run(h) for h in handles}
        with state.timed("downstream"):
            downstream = _downstream_all_policies(work, handles) if state.policy is not None else {}
        assembly = state.stores.work()
        assembly.subtract(before)
        assembly.update(calls.since(before_calls))  # model forwards and metric evaluations, as well as writes
        for label, by_policy in state.pa_by_policy.items():
            upstream[label]["policy_accuracy_by_policy"] = by_policy
        state.timing["total"] = time.perf_counter() - t0
        # cells.jsonl as written, once: the ids recorded as the text is made (the rows keep the ids methods saw until
        # the analysis is done); its digest with the map's keys the analysis, results.json records it
        ids = self.sealed.recorder()
        cells_text = state.cells.text(ids)
        cells_record = cells_record_of(cells_text.encode("utf-8"), len(state.cells.rows))
        with state.timed("analysis"):
            adaptive = {rec["metric"]: rec["summary"] for rec in state.adaptive.values()}
            members = systems_section(state)["members"]
            from perbench.metrics.rm_accuracy import invalid_pairs

            # read back when an earlier run analysed the same cells the same way (runner/derived.py)
            analysis, memo = analysis_of(
                state.cells.rows,
                f"{cells_record['sha256']}:{ids.digest()}",
                cfg,
                adaptive,
                members,
                invalid_pairs(upstream),
                fit_reference_lines(upstream),
            )
        results = build_results(state, upstream, downstream)
        results["plan"] = {"executor": cfg.executor, "units": plan.summary()}
        if store_need is not None:
            results["plan"]["object_store"] = store_need
        # which units this run computed (here or on workers) and which it found finished by an earlier run
        results["work"]["units"] = {
            "computed": len(work.executed),
            "found_finished": len(work.skipped),
            # of those found finished: computed meanwhile by another run sharing the cache, while this one waited
            "waited_for_another_run": len(work.waited),
        }
        # what the assembly pass computed itself: nothing, when every computation is in the plan
        results["work"]["assembly"] = {k: v for k, v in sorted(assembly.items()) if v}
        # the model forwards and metric evaluations of this process's units (the plan and the units it ran)
        results["work"]["calls"] = units_calls
        results["work"]["calls_by_unit"] = work.unit_calls  # here or on the worker that computed it
        if cfg.executor != "local":
            results["work"]["remote"] = {
                **{k: dict(v) for k, v in work.remote.items()},
                "nodes": len(work.nodes),
                "seconds": work.remote_seconds,
                # the object store held each result until its dependants finished: size it from the largest
                "result_mb": {k: round(v / 2**20, 3) for k, v in work.remote_bytes.items()},
                # what each unit's worker fetched of its dependencies' results (only those whose keys it read)
                "read_mb": {k: round(v / 2**20, 3) for k, v in work.read_bytes.items()},
                # units Ray computed more than once (a worker or node died; a lost result rebuilt): extra attempts
                "retried": dict(sorted(work.retried.items())),
            }
        attach_analysis(results, analysis)  # one CI per number: the analysis's
        results["timing_s"]["analysis"] = round(state.timing["analysis"], 2)
        results["work"]["derived"] = {"analysis": "read from the cache" if memo else "computed"}
        results["provenance"]["compute"] = compute_record(self.run_dir, results)
        # every method has finished: what is written names the recorded ids, never the ones methods saw
        record = self.sealed.record
        self.sealed.record_rows(state.cells.rows)
        self.sealed.record_rows(state.samples)
        results["cells"] = state.cells.record(cells_text)
        results = record(results)
        results["benchmark"]["pair_sources"] = write_pair_sources(self.run_dir, self.sealed)
        atomic_write_json(self.run_dir / "results.json", results)
        samples_text = jsonl_text(state.samples)
        atomic_write_text(self.run_dir / "samples.jsonl", samples_text)
        write_samples_parquet(self.run_dir / "samples.parquet", state.samples, samples_text)
        state.cells.write(self.run_dir / "cells.jsonl", cells_text)
        print_verdict(analysis)
        log_work(results["work"])
        log(f"results: {self.run_dir / 'results.json'}")
        result = RunResult(self.run_dir, results, state.samples, state.cells.rows)
        if self.finish is not None:
            self.finish(result)
        return result


def seal_all(bench: Benchmark, extras: dict[str, Benchmark]) -> tuple[Benchmark, dict[str, Benchmark]]:
    """The run's benchmark and its upstream benchmarks as methods may see them (:func:`perbench.data.isolation.seal`);
    the map back to the source's user ids goes to ``meta["source_user_ids"]`` (keyed by the ids methods see)."""
    got = seal_run(bench, extras)
    return got[0], got[1]


def seal_run(bench: Benchmark, extras: dict[str, Benchmark]) -> tuple[Benchmark, dict[str, Benchmark], Sealed]:
    """:func:`seal_all` and, for the grader's side, one :class:`~perbench.data.isolation.Sealed` whose ``recorded``
    maps the ids methods see (of every benchmark) to the ids results record and whose ``trace`` says where each
    of the run's pairs was read."""
    from perbench.data.isolation import seal

    every = [seal(b) for b in (bench, *extras.values())]
    recorded: dict[str, str] = {}
    for sealed in every:
        sealed.bench.meta["source_user_ids"] = dict(sorted(sealed.users.items(), key=lambda kv: kv[1]))
        recorded.update(sealed.recorded)
    main = every[0]
    whole = Sealed(main.bench, main.users, main.pairs, recorded, main.trace)
    return main.bench, {n: s.bench for n, s in zip(extras, every[1:], strict=True)}, whole


#: the run directory's file that maps each recorded pair id back to the row it was read from
PAIR_SOURCES = "pair_sources.jsonl"


def write_pair_sources(run_dir: Path, sealed: Sealed) -> dict[str, Any]:
    """``pair_sources.jsonl``: one line per pair of the run's benchmark, its recorded id and where it came from (the
    source's pair id; the file or row label, line and dataset index where the loader kept them). Written with
    results, after every method has finished; results.json names the file."""
    rows = [{"pair_id": rid, **where} for rid, where in sorted(sealed.trace.items())]
    atomic_write_jsonl(run_dir / PAIR_SOURCES, rows)
    return {"file": PAIR_SOURCES, "pairs": len(rows), "fields": ["pair_id", "source_pair_id", *TRACE_META]}


def log_work(work: dict[str, Any]) -> None:
    """The run's work counters, one line each: what this process computed and reused, what Ray workers did."""

    def text(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing"

    log(f"work: computed {text(work['computed'])}; reused {text(work['reused'])}")
    if work.get("assembly"):
        log(f"work outside the plan (the assembly pass): {text(work['assembly'])}")
    if "remote" in work:
        log(
            f"work on Ray workers: computed {text(work['remote']['computed'])}; reused {text(work['remote']['reused'])}"
        )
        sizes = work["remote"].get("result_mb") or {}
        if sizes:
            big = max(sizes, key=sizes.__getitem__)
            log(
                f"object store: the largest unit result was {sizes[big]:g} MB ({big}), {sum(sizes.values()):g} MB in "
                "all; give each node's object store at least twice the largest (docs/cluster.md)"
            )


def _downstream_all_policies(work: Work, handles: list[MethodHandle]) -> dict[str, Any]:
    """Decoders × reward models × policies: each policy's labels get an ``@policy`` suffix when the config
    lists more than one. Generation units are keyed by the policy fingerprint either way."""
    s = work.s
    main: list[str | Endpoint] = [s.cfg.policy]
    specs: list[str | Endpoint] = [*(s.cfg.policies or main)]
    out: dict[str, Any] = {}
    upstream_rows = list(s.cells.rows)
    main_group = s.cells.group
    for spec in specs:
        s.policy = work.policy_model(spec)
        if spec != s.cfg.policy:
            # a (policy, method) system pairs the method's upstream numbers with its downstream under that
            # policy; policy accuracy is the one upstream number that depends on the policy: computed anew
            s.cells.group = f"{s.bench.name}|{spec}|seed{s.cfg.seed}"
            s.cells.rows += [{**r, "group": s.cells.group} for r in upstream_rows if not r["metric"].startswith("pa")]
            work.up.policy_accuracy_under(str(spec), handles)
        s.downstream_policies.append(s.policy)
        first_sample = len(s.samples)
        part = work.down.run(handles)
        for sys in work.down.systems(handles)[0]:
            if sys.label not in part:
                continue
            if sys.method is not None:  # a guided row next to the policy accuracy at its decoder's own weight
                pa = work.up.decoder_policy_accuracy(sys.method, sys.spec.label())
                if pa is not None:
                    part[sys.label]["policy_accuracy"] = pa
            else:  # a decoder that shows users their own data: how much each prompt really held
                _record_context(work, sys.spec, sys.label, part[sys.label], s.samples[first_sample:])
        suffix = "" if len(specs) == 1 else f"@{spec}"
        for row in s.samples[first_sample:]:
            row["policy"] = str(spec)  # a served policy: its model's name
            if "decoder" in row:
                row["decoder"] += suffix
        out.update({f"{label}{suffix}": v for label, v in part.items()})
    s.policy = work.policy_model(s.cfg.policy)
    s.cells.group = main_group
    return out


def _record_context(work: Work, spec: Any, label: str, result: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The effective context of a decoder that shows users their own pairs and profile items (ICL, ICL-RAG):
    per generation in samples.jsonl (``context_pairs``, ``context_profile_items``) and summarised in its
    results (``effective_context``), beside the shot count the reward models adapt from."""
    decoder = work.down._decoder(spec)
    shown = getattr(decoder, "shown", None)
    if shown is None:
        return
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.get("kind") == "generation" and row.get("decoder") == label:
            got = counts.setdefault(row["user_id"], shown(row["user_id"]))
            row["context_pairs"], row["context_profile_items"] = got["pairs"], got["profile_items"]
    if not counts:
        return
    summary: dict[str, Any] = {"users": len(counts), "shots": work.s.cfg.shots}
    for kind in ("pairs", "profile_items"):
        vals = [c[kind] for c in counts.values()]
        summary[kind] = {"mean": float(sum(vals) / len(vals)), "min": min(vals), "max": max(vals)}
    result["effective_context"] = summary

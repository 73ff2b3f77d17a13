"""What ``perbench export`` reads of a run directory, checked: the config, the system, the benchmark as the run's
methods saw it (reloaded and sealed, then compared with the fingerprint results.json recorded), the map from the
run's opaque user ids to the source's, and the backbone's recorded identity (its weights are never loaded here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perbench.config import RunConfig
from perbench.data.records import Benchmark
from perbench.errors import ConfigError, PerbenchError
from perbench.runner.stores import Stores
from perbench.systems import SystemDef


@dataclass
class RunSource:
    run: Path
    cfg: RunConfig
    results: dict[str, Any]
    system: SystemDef
    bench: Benchmark  # sealed: opaque user and pair ids, as the run's methods saw it
    source_of: dict[str, str]  # the id inside the fitted state -> the source's id
    report_of: dict[str, str]  # the id the run's files and report name a user by -> the source's id
    stores: Stores

    @classmethod
    def open(cls, run: Path, label: str) -> RunSource:
        from perbench.config import Where
        from perbench.systems import SystemsSpec, expand

        config = run / "config.yaml"
        if not config.is_file():
            raise ConfigError(f"{config} does not exist (is {run} a run directory?)")
        if not (run / "units.sqlite").is_file():
            raise ConfigError(f"{run / 'units.sqlite'} does not exist: the run's fitted systems live there")
        results = _results(run / "results.json")
        cfg = RunConfig.from_yaml(config)
        spec = None if cfg.systems is None else SystemsSpec.from_dict(cfg.systems, Where("systems"))
        systems = expand(cfg.methods, cfg.baselines, spec, seed=cfg.seed, shots=cfg.shots)
        by_label = {sd.label: sd for sd in systems}
        if label not in by_label:
            import difflib

            close = difflib.get_close_matches(label, list(by_label), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"export: {run} has no system {label!r}.{hint} Its systems: {', '.join(by_label)}")
        sd = by_label[label]
        from perbench import registry
        from perbench.rewards.base import FeatureRM

        if not issubclass(registry.reward_models.get(sd.method.name), FeatureRM) and not sd.baseline:
            raise ConfigError(
                f"export: {label} ({sd.method.name}) is not a frozen-feature reward model; this version exports "
                "frozen-feature methods (global_bt, mpu, lore, pal, vpl, pref, …) and baselines"
            )
        bench = _sealed_bench(run, cfg, results)
        return cls(run, cfg, results, sd, bench, *_source_ids(run, bench, results), Stores.of_run(run))

    @property
    def results_bench_fingerprint(self) -> str:
        return str(self.results["benchmark"]["fingerprint"])

    def _backbone_record(self) -> dict[str, Any]:
        models = _get(self.results, "provenance", "models")
        rec = models.get("rm_backbone") if isinstance(models, dict) else None
        if not isinstance(rec, dict) or not isinstance(rec.get("fingerprint"), str):
            raise ConfigError(
                f"export: {self.run / 'results.json'}: provenance.models.rm_backbone.fingerprint: missing; the run "
                "recorded no backbone for its frozen-feature systems (rerun it with this version)"
            )
        return rec

    def backbone(self) -> dict[str, Any]:
        """The backbone as the manifest records it: how to load it, and the fingerprint the run recorded."""
        rec = self._backbone_record()
        return {
            "model": self.cfg.rm_backbone,
            "fingerprint": rec["fingerprint"],
            "max_length": self.cfg.max_length,
            "feature_batch_size": self.cfg.feature_batch_size,
            "dtype": rec.get("dtype") or "float32",
            "device": rec.get("device"),
        }

    def extractor(self) -> Any:
        """A feature extractor over the run's feature store whose backbone loads only if a feature is missing
        (the run computed every one the export reads); its identity checked against the recorded fingerprint."""
        from perbench.runner.state import needs_models

        if not needs_models(self.cfg):
            return None
        from perbench.device import DevicePolicy, resolve_device
        from perbench.models.lazy import LazyLM
        from perbench.rewards.features import FeatureExtractor

        rec = self._backbone_record()
        dtype = str(rec.get("dtype") or "float32")
        planned = DevicePolicy(str(rec.get("device") or "cpu"), dtype)
        lm = LazyLM(self.cfg.rm_backbone, planned, DevicePolicy(resolve_device().device, dtype))
        if lm.fingerprint != rec["fingerprint"]:
            raise ConfigError(
                f"export: {self.cfg.rm_backbone} has fingerprint {lm.fingerprint} here, but {self.run / 'results.json'}"
                f" records {rec['fingerprint']} (provenance.models.rm_backbone): the backbone's files changed since "
                "the run; export needs the backbone the systems were fit on"
            )
        return FeatureExtractor(
            lm, self.stores.features, batch_size=self.cfg.feature_batch_size, max_length=self.cfg.max_length
        )


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _results(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(
            f"export: {path} does not exist: the run has not finished (its results record the backbone's "
            "fingerprint and the users' ids)"
        )
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"export: {path}: not JSON ({e})") from None
    if not isinstance(got, dict) or not isinstance(_get(got, "benchmark", "fingerprint"), str):
        raise ConfigError(f"export: {path}: benchmark.fingerprint: missing (rerun the run with this version)")
    return got


def _sealed_bench(run: Path, cfg: RunConfig, results: dict[str, Any]) -> Benchmark:
    from perbench.runner.run import seal_all
    from perbench.runner.state import load_benchmark

    try:
        source = load_benchmark(cfg)
    except (PerbenchError, OSError) as e:
        detail = " ".join(str(e).split())
        raise ConfigError(
            f"export: {run}: the run's benchmark does not load here ({detail}); paths in {run / 'config.yaml'} "
            f"that are relative are read from the current folder ({Path.cwd()}): run export from the folder the "
            "run was started in"
        ) from None
    bench = seal_all(source, {})[0]
    want = results["benchmark"]["fingerprint"]
    if bench.fingerprint() != want:
        raise ConfigError(
            f"export: {run}: the benchmark loads with fingerprint {bench.fingerprint()} now, but "
            f"{run / 'results.json'} records {want} (benchmark.fingerprint): its data changed since the run, "
            "so the fitted systems no longer match it; export needs the data the run used"
        )
    return bench


def _source_ids(run: Path, bench: Benchmark, results: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(the id each user has inside the fitted state -> the source's id, from sealing the benchmark again; the id
    the run's files and report name each user by -> the source's id, the map results.json records once the run's
    methods finished). Both must name the same source users."""
    recorded = _get(results, "benchmark", "meta", "source_user_ids")
    sealed = {str(k): str(v) for k, v in dict(bench.meta.get("source_user_ids") or {}).items()}
    missing = [u for u in bench.users if u not in sealed]
    if missing:
        raise ConfigError(f"export: {run}: sealing the benchmark gave no source id for {missing[0]}")
    if recorded is None:
        return sealed, {}
    if not (isinstance(recorded, dict) and all(isinstance(v, str) for v in recorded.values())):
        raise ConfigError(
            f"export: {run / 'results.json'}: benchmark.meta.source_user_ids: expected a map of user ids to strings"
        )
    lost = sorted(set(sealed.values()) - set(recorded.values()))
    if lost:
        raise ConfigError(
            f"export: {run / 'results.json'}: benchmark.meta.source_user_ids: no recorded id for {len(lost)} of "
            f"the run's users (e.g. {lost[0]}); the file does not belong to this run's data"
        )
    return sealed, {str(k): v for k, v in recorded.items() if str(k) not in sealed}

"""What every phase of a run shares: the config, the benchmark, the models, the unit store, the cells and
per-sample rows, plus the few rules every phase applies the same way (who is not applicable, seeds)."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perbench.config import Component, RunConfig, Where
from perbench.data.records import Benchmark, PreferencePair
from perbench.data.user_context import method_inputs
from perbench.device import DevicePolicy
from perbench.models.batching import AdaptiveBatcher
from perbench.runner.cells import Cells
from perbench.runner.methods import MethodHandle
from perbench.runner.stores import Stores
from perbench.specs.endpoint import Endpoint
from perbench.systems import SystemDef, pooled_fits


def log(msg: str) -> None:
    if os.environ.get("PERBENCH_QUIET") != "1":
        print(f"[perbench] {msg}", flush=True)


class RunState:
    """Mutable state of one run; the phases (upstream, downstream, scoring) read and extend it. ``run_dir`` is
    None in a Ray worker, which computes into in-memory ``stores`` and sees no run folder. ``computes_units``:
    False in the driver of a run whose units compute elsewhere (Ray): its models are planned under the units'
    device and dtype (``unit_device`` / ``unit_dtype``), not its own."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path | None,
        bench: Benchmark,
        stores: Stores,
        extras: dict[str, Benchmark] | None = None,
        *,
        computes_units: bool = True,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.computes_units = computes_units
        self._models: dict[str | Endpoint, Any] = {}
        self._unit_policy: DevicePolicy | None = None
        self.bench = bench
        self.stores = stores
        self.units = stores.units
        #: the config's ``upstream_benchmarks`` by name (see :func:`load_upstream_benchmarks`)
        self.extras = load_upstream_benchmarks(cfg) if extras is None else extras
        self.cells = Cells(f"{bench.name}|{cfg.policy}|seed{cfg.seed}", pooled_fits(self.systems()))
        #: the order items reach a method in (``rewards.base.scores_in_order``): drawn from a secret of this
        #: process's own, in no config, file or environment a method is handed
        self.order_rng = np.random.default_rng(secrets.randbits(128))
        self.samples: list[dict[str, Any]] = []
        self.timing: dict[str, float] = {}
        self.skipped_combos: list[dict[str, str]] = []
        self.pa_by_policy: dict[str, dict[str, dict[str, Any]]] = {}
        #: downstream label -> (decoder family, method) as cells name them
        self.families: dict[str, tuple[str, str]] = {}
        self.downstream_policies: list[Any] = []
        self.batchers: dict[str, AdaptiveBatcher] = {}
        #: the rl phase's training record per label (see ``training.py``)
        self.rl_info: dict[str, Any] = {}
        #: the adaptive rounds' record per per-cell decoder label (see ``adaptive.py``)
        self.adaptive: dict[str, Any] = {}
        # models (see load_models: LazyLM, weights on first use); None in a run that needs no model (baselines only,
        # no decoders)
        self.policy: Any = None
        self.rm_lm: Any = None
        self.extractor: Any = None
        self.policy_extractor: Any = None
        self.feature_store: Any = None
        self.judge: Any = None
        self.judge_lm: Any = None
        from perbench.rewards.base import RMContext

        # methods are handed user views (profile, seen), never the records that hold the answer keys
        self.ctx = RMContext(seed=cfg.seed, extra=method_inputs(bench.users))

    def bench_fingerprint(self) -> str:
        """The run's benchmark's :meth:`~perbench.data.records.Benchmark.fingerprint`, computed once per benchmark
        object (every unit key names it; a run's benchmark does not change once sealed)."""
        got = self.__dict__.get("_bench_fp")
        if got is None or got[0] is not self.bench:
            got = self._bench_fp = (self.bench, self.bench.fingerprint())
        return str(got[1])

    def batcher(self, kind: str) -> AdaptiveBatcher:
        """The run's adaptive batch size for ``kind`` (``generate``), shared by every call of the run."""
        from perbench.models.endpoint import is_served, request_batcher

        if kind not in self.batchers and is_served(self.policy):
            self.batchers[kind] = request_batcher(self.policy, self.cfg.batch_size)
        if kind not in self.batchers:
            device = str(self.policy.policy.device) if self.policy is not None else "cpu"
            fit = None
            if self.policy is not None and not device.startswith("cpu"):
                from perbench.models.memory import estimate_rows

                policy = self.policy
                fit = lambda seq: estimate_rows(policy, seq, "generate")  # noqa: E731
            self.batchers[kind] = AdaptiveBatcher(self.cfg.batch_size, device, fit)
        return self.batchers[kind]

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timing[name] = self.timing.get(name, 0.0) + time.perf_counter() - t

    def needs_models(self) -> bool:
        return needs_models(self.cfg)

    @property
    def unit_policy(self) -> DevicePolicy:
        """The device and dtype the run's units compute under (``unit_device`` / ``unit_dtype``, else ``device`` /
        ``dtype``): every fingerprint the plan keys units by is made with this dtype. Checked against this machine
        only where the units compute here."""
        if self._unit_policy is None:
            from perbench.device import resolve_device

            cfg = self.cfg
            device, dtype = cfg.unit_device or cfg.device, cfg.unit_dtype or cfg.dtype
            self._unit_policy = resolve_device(device, dtype, here=self.computes_units, hub_kernels=cfg.hub_kernels)
        return self._unit_policy

    def here(self) -> DevicePolicy:
        """Where this process loads a model: the units' policy where they compute here; in a driver whose units
        compute elsewhere, its own ``device`` with the units' dtype (so a model it loads has the planned
        fingerprint)."""
        if self.computes_units:
            return self.unit_policy
        from perbench.device import resolve_device

        return resolve_device(self.cfg.device, self.unit_policy.dtype, hub_kernels=self.cfg.hub_kernels)

    def model(self, spec: str | Endpoint) -> Any:
        """The model ``spec`` of this run (a :class:`~perbench.models.lazy.LazyLM`: its fingerprint, name and
        tokenizer at once, its weights when something first reads them; for a model an inference server serves, an
        :class:`~perbench.models.endpoint.EndpointLM`), one per spec."""
        if spec not in self._models:
            if isinstance(spec, Endpoint):
                from perbench.models.endpoint import EndpointLM

                self._models[spec] = EndpointLM(spec, self.here())
            else:
                from perbench.models.lazy import LazyLM

                self._models[spec] = LazyLM(spec, self.unit_policy, self.here())
        return self._models[spec]

    def worker_config(self) -> dict[str, Any]:
        """The config a unit computes under on another machine: the planned dtype pinned (a worker resolving
        ``auto`` for itself could compute under other fingerprints than the plan's keys)."""
        return {
            **self.cfg.to_dict(),
            "unit_device": self.cfg.unit_device or self.cfg.device,
            "unit_dtype": self.unit_policy.dtype,
        }

    def load_models(self) -> None:
        """The run's models by identity (no weights load here: see :meth:`model`), the feature extractors over
        them and the methods' context."""
        from perbench.rewards.base import RMContext

        cfg = self.cfg
        if not self.computes_units and (cfg.unit_device or cfg.device) == "auto" and self.unit_policy.device == "cpu":
            log(
                f"units planned on cpu ({self.unit_policy.dtype}): unit_device is auto and this machine has no "
                "GPU; for GPU workers set unit_device: cuda (docs/cluster.md)"
            )
        self.policy = self.model(cfg.policy)
        self.rm_lm = self.model(cfg.rm_backbone)
        self.feature_store = self.stores.features
        self.extractor = self.features_of(self.rm_lm)
        # the policy's own log-probs (policy accuracy): none for a policy served by an inference endpoint
        served = isinstance(cfg.policy, Endpoint)
        self.policy_extractor = (
            None if served else self.extractor if self.policy is self.rm_lm else self.features_of(self.policy)
        )
        self.ctx = RMContext(
            features=self.extractor,
            seed=cfg.seed,
            device=self.policy.policy.device,
            extra={**method_inputs(self.bench.users), "policy": self.policy},
        )
        if cfg.judge:
            from perbench.metrics.judge import RubricJudge

            self.judge_lm = self.model(cfg.judge)
            self.judge = RubricJudge(self.judge_lm)

    def features_of(self, lm: Any) -> Any:
        """A feature extractor over ``lm`` sharing the run's feature cache."""
        from perbench.rewards.features import FeatureExtractor

        cfg = self.cfg
        return FeatureExtractor(lm, self.feature_store, batch_size=cfg.feature_batch_size, max_length=cfg.max_length)

    def systems(self) -> list[SystemDef]:
        """Every system of the run: each method (crossed with the ``systems:`` grid), then the baselines."""
        from perbench.systems import SystemsSpec, expand

        cfg = self.cfg
        spec = None if cfg.systems is None else SystemsSpec.from_dict(cfg.systems, Where("systems"))
        return expand(cfg.methods, cfg.baselines, spec, seed=cfg.seed, shots=cfg.shots)

    def method_handles(self) -> list[MethodHandle]:
        """One handle per system (the config has refused duplicates and unknown parameters)."""
        return [
            MethodHandle(
                sd.method,
                self.bench,
                self.ctx,
                self.units,
                baseline=sd.baseline,
                system=sd,
                bench_fp=self.bench_fingerprint(),
            )
            for sd in self.systems()
        ]

    # ------------------------------------------------------------------ rules every phase shares
    def unfittable(self, h: MethodHandle) -> bool:
        return h.cls.needs_train_pairs and not self.bench.train_pairs()

    def not_applicable(self, h: MethodHandle) -> set[str]:
        """Unseen users a method cannot score: it adapts from shots and the user has no train pairs."""
        if h.user_agnostic or not h.uses_shots or getattr(h.cls, "scores_without_shots", False):
            return set()
        return {u for u in self.bench.unseen_users if not self.bench.fewshot(u, 1)}

    def test_groups(self, not_applicable: set[str]) -> dict[str, list[PreferencePair]]:
        """Test pairs by group (seen, unseen) without the users a method cannot score."""
        return {
            g: [p for p in self.bench.test_pairs(seen=g == "seen") if p.user_id not in not_applicable]
            for g in ("seen", "unseen")
        }

    def guides(self, d: Component, h: MethodHandle) -> bool:
        """Whether decoder ``d`` is steered by method ``h`` in this run (the downstream phase builds that system)."""
        from perbench import registry

        cls = registry.decoders.get(d.name)
        if not cls.uses_rm or self.unfittable(h):
            return False
        if self.cfg.guide_with is not None and h.label not in self.cfg.guide_with:
            return False
        return guide_problem(cls, h.cls) is None

    def pa_weights(self, h: MethodHandle) -> list[PAWeight]:
        """The weights policy accuracy puts on ``h``'s reward: one per decoder that ``h`` guides and that applies
        a weight (ARGS's w; GenARM's α on log π_r, α/β on r), in config order — the first is the headline's.
        Without such a decoder: the config's ``pa_weight``, or none when it is None (the headline is then not
        applicable, see :meth:`pa_headline`). k (the top-k RGD-induced policy's) is the decoder's
        own ``k`` (ARGS), else ``pa_rgd_k``, else the first ARGS decoder's, else 10 (the ARGS default)."""
        from perbench import registry

        args_k = next((int(d.params.get("k", 10)) for d in self.cfg.decoders if d.name == "args"), None)
        default_k = self.cfg.pa_rgd_k or args_k or 10
        out: list[PAWeight] = []
        for d in self.cfg.decoders:
            if not self.guides(d, h):
                continue
            decoder = registry.decoders.get(d.name)(**d.params)
            w = decoder.reward_weight(h.probe)
            if w is None:
                continue
            k = getattr(decoder, "k", None)
            out.append(PAWeight(float(w), int(k) if isinstance(k, int) else default_k, d.label()))
        if out or self.cfg.pa_weight is None:
            return out
        return [PAWeight(float(self.cfg.pa_weight), default_k, None)]

    def pa_headline(self, h: MethodHandle) -> PAWeight | None:
        """The weight of ``h``'s headline policy accuracy: the first weighted decoder it guides, else ``pa_weight``;
        None when neither exists (a run with no weighted decoder: the headline is not applicable)."""
        got = self.pa_weights(h)
        return got[0] if got else None


@dataclass(frozen=True)
class PAWeight:
    """The weight w policy accuracy puts on a method's reward, the top-k of its RGD-induced-policy variant, and
    the decoder that applies that weight (None: no weighted decoder is guided by the method; ``pa_weight``)."""

    w: float
    k: int
    decoder: str | None

    def source(self) -> str:
        return f"the weight of decoder {self.decoder}" if self.decoder else "pa_weight (set in the config)"


def guide_problem(decoder_cls: type, rm_cls: type) -> str | None:
    """Why a reward-model class cannot steer a decoder class (None: it can): the decoder's own ``rm_problem``,
    else the default rule (a frozen-feature RM)."""
    from perbench.rewards.base import FeatureRM

    check = getattr(decoder_cls, "rm_problem", None)
    if check is not None:
        problem: str | None = check(rm_cls)
        return problem
    return None if issubclass(rm_cls, FeatureRM) else "needs per-prefix rewards (a FeatureRM)"


def needs_models(cfg: RunConfig) -> bool:
    """Whether anything in the config reads a model: a learned or LM-based method, a decoder, a judge."""
    return bool(cfg.methods or cfg.decoders or cfg.judge)


def has_prefix_reward(h: MethodHandle) -> bool:
    """The method defines r(x, y_≤t) for every prefix (policy accuracy, ARGS-style guidance)."""
    return h.cls.no_prefix_reward is None or callable(getattr(h.cls, "candidate_rewards", None))


def outcomes(scores: dict[str, np.ndarray], judge: bool, tie: str) -> np.ndarray:
    """Per-pair outcome (1 / 0 / ½ under the tie policy) from scores or a pairwise judge's preferences."""
    from perbench.metrics.rm_accuracy import pair_outcomes, preference_outcomes

    if judge:
        return preference_outcomes(scores["chosen"], tie)  # type: ignore[arg-type]
    return pair_outcomes(scores["chosen"], scores["rejected"], tie)  # type: ignore[arg-type]


def seed_for(base: int, key: str) -> int:
    """A per-unit seed from the run seed and a content key (independent of batching and order)."""
    return (base * 1_000_003 + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)) % (2**31)


def load_benchmark(cfg: RunConfig) -> Benchmark:
    import warnings

    from perbench import registry
    from perbench.data.checks import check_benchmark
    from perbench.data.loaders import NoTrainPairsWarning
    from perbench.data.rows import DataError
    from perbench.errors import ConfigError

    loader = registry.benchmarks.get(cfg.benchmark.name)
    try:
        with warnings.catch_warnings():  # the checks below say what a file without train pairs means for the run
            warnings.simplefilter("ignore", NoTrainPairsWarning)
            bench: Benchmark = loader(**cfg.benchmark.params)
    except DataError:
        raise  # located in the data
    except (ConfigError, ValueError, TypeError) as e:  # a parameter the loader refuses: located in the config
        raise ConfigError(f"{cfg.where('benchmark')}: {cfg.benchmark.name}: {e}") from None
    if "|" in bench.name:  # a file's own name (a `name:` with one is refused with the config)
        raise ConfigError(
            f"{cfg.where('benchmark')}: the benchmark is named {bench.name!r} (after its file, without `name:`): '|' "
            "separates the parts of a cell's group (benchmark|policy|seed); give it a name without one (name: …)"
        )
    # before any model loads: no pairs, no test pairs, or nothing to train on are errors, not zeros
    needs_train = any(registry.reward_models.get(m.name).needs_train_pairs for m in cfg.methods)
    check_benchmark(bench, needs_train=needs_train)  # its notes land in bench.meta["notes"]
    return bench


#: what a benchmark's name may hold once it names a metric (``rm_acc_on_NAME``); anything else becomes ``_``
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def load_upstream_benchmarks(cfg: RunConfig) -> dict[str, Benchmark]:
    """The config's ``upstream_benchmarks``, loaded and checked like the run's benchmark (before any model loads),
    by name: the loaded benchmark's name with anything but letters, digits, ``_ . -`` replaced by ``_``. Two
    entries with one name are a config error (give a file its own ``name:``)."""
    from perbench import registry
    from perbench.config import Where
    from perbench.data.checks import check_benchmark
    from perbench.data.rows import DataError
    from perbench.errors import ConfigError

    out: dict[str, Benchmark] = {}
    first: dict[str, int] = {}
    for i, comp in enumerate(cfg.upstream_benchmarks or []):
        try:
            bench: Benchmark = registry.benchmarks.get(comp.name)(**comp.params)
        except DataError:
            raise  # located in the data
        except (ConfigError, ValueError, TypeError) as e:  # a parameter the loader refuses: located in the config
            raise ConfigError(f"{cfg.where('upstream_benchmarks')}[{i}]: {comp.name}: {e}") from None
        check_benchmark(bench, needs_train=False)
        name = _NAME.sub("_", bench.name).strip("_") or comp.name
        if name in out:
            raise Where("config", None, f"upstream_benchmarks[{i}]").error(
                f"benchmark name {name!r} is also upstream_benchmarks[{first[name]}]'s; each names a metric "
                f"(rm_acc_on_{name}), so give each entry its own name (e.g. name: {name}_2 for a file)"
            )
        out[name] = bench
        first[name] = i
    return out

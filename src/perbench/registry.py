"""One generic registry per extensible concept (benchmarks, reward models, decoders, metrics, executors).

Entries may be lazy ``"module:attr"`` strings so that importing :mod:`perbench` never imports torch.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from perbench.errors import PerbenchError

T = TypeVar("T")


class UnknownNameError(PerbenchError, KeyError):
    """An unknown registry name; the message suggests the closest known names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text.
        return str(self.args[0])


@dataclass(frozen=True)
class Param:
    """One keyword parameter of a registered class or loader."""

    name: str
    #: the resolved annotation; None where it names something only importable for type checkers
    annotation: Any
    required: bool


def _hints(fn: Callable[..., Any], params: list[inspect.Parameter]) -> dict[str, Any]:
    """Resolved annotations of ``fn`` (postponed, i.e. strings), one by one where some cannot be resolved."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # a name imported under TYPE_CHECKING only: resolve the others one by one
        out: dict[str, Any] = {}
        namespace = getattr(fn, "__globals__", {})
        for p in params:
            if isinstance(p.annotation, str):
                try:
                    out[p.name] = typing.get_type_hints(
                        _OneAnnotation(p.annotation), globalns=namespace, include_extras=True
                    )["x"]
                except Exception:
                    continue
        return out


class _OneAnnotation:
    """A stand-in object whose only annotation is one string, so ``get_type_hints`` resolves just that."""

    def __init__(self, annotation: str) -> None:
        self.__annotations__ = {"x": annotation}


def _own_params(fn: Callable[..., Any], skip_first: bool) -> tuple[list[inspect.Parameter], bool]:
    """-> (keyword parameters, whether ``fn`` also takes ``**kwargs``)."""
    sig = inspect.signature(fn)
    ps = list(sig.parameters.values())[1 if skip_first else 0 :]
    named = [p for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return named, any(p.kind is p.VAR_KEYWORD for p in ps)


def accepted_params(target: Any) -> dict[str, Param] | None:
    """The keyword parameters a registered target accepts, for checking a config before anything loads.

    A class accepts the named parameters of its ``__init__`` and, where that ``__init__`` takes ``**params``
    (which every method and decoder forwards to ``super().__init__``), those of its bases' ``__init__``; only the
    class's own required parameters are required. A loader function accepts its named parameters; one that
    takes ``**kwargs`` accepts anything (None).
    """
    out: dict[str, Param] = {}
    if isinstance(target, type):
        first = True
        for klass in target.__mro__:
            init = vars(klass).get("__init__")
            if klass is object or init is None:
                continue
            named, more = _own_params(init, skip_first=True)
            hints = _hints(init, named)
            for p in named:
                if p.name not in out:
                    out[p.name] = Param(p.name, hints.get(p.name), first and p.default is p.empty)
            first = False
            if not more:
                break
        return out
    named, more = _own_params(target, skip_first=False)
    if more:
        return None
    hints = _hints(target, named)
    return {p.name: Param(p.name, hints.get(p.name), p.default is p.empty) for p in named}


@dataclass
class Entry(Generic[T]):
    name: str
    target: T | str
    help: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    #: a reward model's role in a verdict: "" (a deployable candidate), "baseline" or "oracle" (reference lines,
    #: never recommended; see :mod:`perbench.metrics.analysis.roles`)
    role: str = ""


class Registry(Generic[T]):
    """Maps names to objects or lazy ``"module:attr"`` targets."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self,
        name: str,
        target: T | str,
        *,
        help: str = "",
        defaults: dict[str, Any] | None = None,
        role: str = "",
    ) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = Entry(name, target, help, dict(defaults or {}), role)

    def decorator(self, name: str, *, help: str = "") -> Callable[[T], T]:
        def wrap(obj: T) -> T:
            self.register(name, obj, help=help)
            return obj

        return wrap

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._entries), n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            known = ", ".join(sorted(self._entries))
            raise UnknownNameError(f"unknown {self.kind} {name!r}.{hint} Known: {known}") from None

    def get(self, name: str) -> T:
        entry = self.entry(name)
        if isinstance(entry.target, str):
            module_name, _, attr = entry.target.partition(":")
            obj: T = getattr(importlib.import_module(module_name), attr)
            entry.target = obj
        return entry.target  # type: ignore[return-value]

    def params(self, name: str) -> dict[str, Param] | None:
        """The keyword parameters of ``name``'s target (see :func:`accepted_params`); imports it."""
        return accepted_params(self.get(name))

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())


# The registries. Targets are lazy strings: adding a method/benchmark/decoder = one file + one line here.
benchmarks: Registry[Any] = Registry("benchmark")
reward_models: Registry[Any] = Registry("reward model")
decoders: Registry[Any] = Registry("decoder")
metrics: Registry[Any] = Registry("metric")
executors: Registry[Any] = Registry("executor")

benchmarks.register(
    "rubrics",
    "perbench.data.rubrics.benchmark:load_rubrics",
    help="built-in benchmark with checkable per-user rubrics (exact downstream ground truth)",
    defaults={"rm_backbone": "smollm2", "policy": "smollm2", "k": 10, "w": 1.0},
)
benchmarks.register(
    "file",
    "perbench.data.loaders:load_benchmark_file",
    help="any JSON/JSONL/CSV/Parquet file or HF dataset with a field mapping: "
    "{name: file, source: PATH_OR_HUB_ID, mapping: ...}",
)
benchmarks.register(
    "prb",
    "perbench.data.benchmarks.prb:load_prb",
    help="Personalized RewardBench (one user per row; rubric/narrative never reach a pair)",
    defaults={
        "rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct",
        "policy": "Qwen/Qwen2.5-0.5B-Instruct",
        "k": 10,
        "w": 1.0,
    },
)
benchmarks.register(
    "pref_lamp",
    "perbench.builders.pref_lamp:load_pref_lamp",
    help="Pref-LaMP built from LaMP-5 files: real title vs mined hard-negative title",
    defaults={
        "rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct",
        "policy": "Qwen/Qwen2.5-0.5B-Instruct",
        "k": 10,
        "w": 1.0,
    },
)
benchmarks.register(
    "prism",
    "perbench.data.benchmarks.prism:load_prism",
    help="PRISM survey + conversations, LoRe's per-turn pairs and split",
    defaults={
        "rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct",
        "policy": "Qwen/Qwen2.5-0.5B-Instruct",
        "k": 10,
        "w": 1.0,
    },
)
benchmarks.register(
    "tldr",
    "perbench.data.benchmarks.tldr:load_tldr",
    help="Personalized TL;DR from summarize_from_feedback (protocol 'pal' or 'lore')",
    defaults={
        "rm_backbone": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "policy": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "k": 10,
        "w": 1.0,
    },
)
benchmarks.register(
    "persona",
    "perbench.data.benchmarks.persona:load_persona",
    help="persona-style rows (persona = user id and rubric; history pairs = train)",
    defaults={"rm_backbone": "smollm2", "policy": "smollm2", "k": 10, "w": 1.0},
)
benchmarks.register(
    "domain_styles",
    "perbench.data.benchmarks.persona:load_domain_styles",
    help="domain-style rows: each style is a user; user-agnostic scorers get exactly 0.5",
    defaults={"rm_backbone": "smollm2", "policy": "smollm2", "k": 10, "w": 1.0},
)

benchmarks.register(
    "synthesizeme",
    "perbench.data.benchmarks.synthesizeme:load_synthesizeme",
    help="SynthesizeMe's PersonalRewardBench (PRISM / Chatbot Arena, per-user splits); not Ma et al.'s prb",
    defaults={"rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct", "policy": "Qwen/Qwen2.5-0.5B-Instruct", "k": 10, "w": 1.0},
)
benchmarks.register(
    "rewardbench2",
    "perbench.data.benchmarks.rewardbench2:load_rewardbench2",
    help="RewardBench 2: best-of-4 lists over six domains, Ties by its own composite (one general user)",
    defaults={
        "rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct",
        "policy": "Qwen/Qwen2.5-0.5B-Instruct",
        "k": 10,
        "w": 1.0,
        "tie_policy": "half",  # RewardBench 2's rule since v2: a tie at the top scores 1/#max
    },
)
benchmarks.register(
    "rmgap",
    "perbench.data.benchmarks.rmgap:load_rmgap",
    help="RMGAP: four styled responses per instance, prompt groups of paraphrases (Pair, BoN, Consistency)",
    defaults={"rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct", "policy": "Qwen/Qwen2.5-0.5B-Instruct", "k": 10, "w": 1.0},
)
benchmarks.register(
    "personalllm",
    "perbench.data.benchmarks.personalllm:load_personalllm",
    help="PersonalLLM: simulated users as Dirichlet mixtures of reward models' scores; best-of-8 lists",
    defaults={"rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct", "policy": "Qwen/Qwen2.5-0.5B-Instruct", "k": 10, "w": 1.0},
)
benchmarks.register(
    "lamp_gen",
    "perbench.data.benchmarks.lamp_gen:load_lamp_gen",
    help="LaMP-4 headlines or LongLaMP long-form writing: gold output vs the most similar train gold",
    defaults={"rm_backbone": "Qwen/Qwen2.5-0.5B-Instruct", "policy": "Qwen/Qwen2.5-0.5B-Instruct", "k": 10, "w": 1.0},
)

reward_models.register(
    "global_bt", "perbench.rewards.global_bt:GlobalBT", help="Bradley-Terry linear head on frozen features"
)
reward_models.register(
    "length",
    "perbench.rewards.baselines:LengthRM",
    help="baseline: longer is better, counted in whitespace words (unit: words) or characters (unit: chars)",
    role="baseline",
)
reward_models.register(
    "random",
    "perbench.rewards.baselines:RandomRM",
    help="baseline: random scores seeded by the run's seed",
    role="baseline",
)
reward_models.register(
    "global_bt_v2",
    "perbench.rewards.global_bt_v2:GlobalBTv2",
    help="global BT with the backbone LoRA-fine-tuned (our reading of Global RM-v2)",
)
reward_models.register(
    "mpu",
    "perbench.rewards.mpu:MPU",
    help="one BT head per user; unseen users: head fit on their shots (our reading)",
)
reward_models.register(
    "mpu_avg",
    "perbench.rewards.mpu:MPUAvg",
    help="one BT head per user; unseen users: average of seen heads (our interpretation)",
)
reward_models.register("lore", "perbench.rewards.lore:LoRe", help="LoRe low-rank reward basis, joint Adam")
reward_models.register(
    "lore_reg",
    "perbench.rewards.lore:LoReReg",
    help="LoRe, alternating steps + cosine pull to the global RM + unused-column drop",
)
reward_models.register("lore_alt", "perbench.rewards.lore:LoReAlt", help="LoRe, alternating block minimisation")
reward_models.register("pal_a", "perbench.rewards.pal:PALA", help="PAL ideal-point form, K prototypes")
reward_models.register("pal_b", "perbench.rewards.pal:PALB", help="PAL cosine form, K prototypes")
reward_models.register("vpl", "perbench.rewards.vpl:VPL", help="variational preference learning (set encoder)")
reward_models.register(
    "pref",
    "perbench.rewards.pref:PReF",
    help="PReF reward factorisation (SVD init, logistic user vectors, active selection)",
)
reward_models.register(
    "isolated",
    "perbench.rewards.isolated:Isolated",
    help="runs another method (method: 'module:Class' or a name, params: {...}) in a child process",
)
reward_models.register("pdpo", "perbench.rewards.pdpo:PDPO", help="personalized DPO with user soft tokens (LoRA)")
reward_models.register(
    "genarm",
    "perbench.rewards.genarm:GenARM",
    help="GenARM autoregressive RM (LoRA), user text in the system prompt",
)
reward_models.register(
    "icl_judge",
    "perbench.rewards.icl_judge:ICLJudge",
    help="pairwise LLM judge with the user's profile and few-shot pairs in context",
)
reward_models.register(
    "icl_judge_oracle",
    "perbench.rewards.icl_judge:ICLJudgeOracle",
    help="ORACLE upper bound, not deployable: icl_judge told the user's answer key",
    role="oracle",
)
reward_models.register(
    "hub_rm",
    "perbench.rewards.hub_rm:HubRM",
    help="any one-logit sequence-classifier RM (safetensors; trust_remote_code needs --trust-remote-code)",
)
reward_models.register(
    "dpo_implicit",
    "perbench.rewards.hub_rm:DPOImplicit",
    help="DPO implicit reward log pi - log pi_ref (sum / mean / ref_free)",
)
reward_models.register(
    "token_ranker",
    "perbench.decoding.token_ranker:TokenRanker",
    help="token-level ranker on the policy's hidden states (no extra forward in ARGS)",
)
reward_models.register(
    "factorized_ranker",
    "perbench.rewards.factorized_ranker:FactorizedRanker",
    help="small MLP on the policy's hidden states with per-user embeddings",
)

decoders.register("zero_shot", "perbench.decoding.greedy:ZeroShot", help="the policy alone (greedy or sampled)")
decoders.register("args", "perbench.decoding.args:ARGS", help="ARGS reward-guided decoding (top-k, weight w)")
decoders.register(
    "genarm",
    "perbench.decoding.genarm:GenARMDecoder",
    help="GenARM: log pi_base + (1/beta) log pi_r over the whole vocabulary",
)
decoders.register(
    "best_of_n",
    "perbench.decoding.best_of_n:BestOfN",
    help="Best-of-N: N cached samples (T=1.0, top_p=0.9) re-ranked by each RM",
)
decoders.register(
    "icl",
    "perbench.decoding.icl:ICL",
    help="policy with k of the user's items in the prompt (random; chosen-only or pairs)",
)
decoders.register(
    "icl_rag",
    "perbench.decoding.icl:ICLRAG",
    help="ICL with retrieved items (bm25 default, or dense with the bundled encoder)",
)

metrics.register("rm_accuracy", "perbench.metrics.rm_accuracy:rm_accuracy", help="pairwise RM accuracy with tie policy")
metrics.register(
    "policy_accuracy",
    "perbench.metrics.policy_accuracy:policy_accuracy",
    help="teacher-forced RGD score accuracy",
)
metrics.register("rubric", "perbench.metrics.rubric:rubric_satisfaction", help="exact rubric satisfaction via checkers")
metrics.register("rouge", "perbench.metrics.text:rouge", help="ROUGE-1/ROUGE-L F1 vs the user's reference")
metrics.register(
    "rgd_policy_accuracy",
    "perbench.metrics.policy_accuracy:rgd_policy_accuracy",
    help="PA under the RGD-induced policy (top-k softmax; misses counted)",
)
metrics.register(
    "win_rate",
    "perbench.metrics.win_rate:win_rate",
    help="reward-hacking win rate: own guided output vs zero-shot (ties 1/2)",
)
metrics.register("bertscore", "perbench.metrics.text:bertscore", help="BERTScore F1 with a local encoder")
metrics.register(
    "rubric_judge",
    "perbench.metrics.judge:RubricJudge",
    help="LLM judge, 0/1/2 per rubric aspect, parse failures counted",
)
metrics.register(
    "bon_curve",
    "perbench.decoding.best_of_n:bon_curve",
    help="ground-truth quality of Best-of-n vs n (exact over random n-subsets of a pool)",
)

executors.register("local", "perbench.runner.executors:LocalExecutor", help="in-process, sequential")
executors.register(
    "ray", "perbench.runner.executors:RayExecutor", help="units as Ray tasks (pip install 'perbench[ray]')"
)

"""The key table and its checks: every key of a config (some or all of ``RunConfig``'s fields) against the field's
annotation, components against the registry, and the checks that involve several keys. What needs a room's knowledge
(which names are models, the systems a config expands to, which qualities exist) is the preflight's
(``perbench.runner.preflight.check_config``)."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from typing import Any

from perbench.config.components import check_component
from perbench.config.rules import NAME_MAX
from perbench.specs.adaptive import AdaptiveSpec
from perbench.specs.endpoint import parse_model
from perbench.specs.located import Where
from perbench.specs.resources import parse_resources
from perbench.specs.rl import RLPhase
from perbench.specs.systems import SystemsSpec
from perbench.specs.values import check_value
from perbench.specs.values import show as _show

#: the keys whose model may be an OpenAI-compatible endpoint (``{endpoint: URL, model: NAME}``)
MODEL_KEYS = ("policy", "judge")
#: each config class's fields and annotations, read once
_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """Each field of the config class ``cls`` and its annotation (``Annotated`` metadata kept)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return _HINTS[cls]


def _defaults(cls: type[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def validate(cls: type[Any], data: Mapping[Any, Any], src: Where) -> dict[str, Any]:
    """Check ``data`` (some or all of the keys of the config class ``cls``) -> every field's value, components
    parsed."""
    hints = _hints(cls)
    names = list(hints)
    for key in data:
        if not isinstance(key, str):
            raise src.error(f"config keys are names, got {_show(key)}")
        if key not in hints:
            close = difflib.get_close_matches(key, sorted(names), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise src.at(key, data).error(f"unknown key.{hint}")
    values = {**_defaults(cls), **data}
    try:
        for key in data:
            where, value = src.at(key, data), data[key]
            if key == "benchmark":
                values[key] = check_component(value, where, "benchmark")
            elif key == "resources":
                values[key] = parse_resources(value, where)
            elif key in ("methods", "decoders", "baselines", "upstream_benchmarks"):
                if value is None and key == "upstream_benchmarks":
                    continue
                if not isinstance(value, list | tuple):
                    raise where.error(f"expected a list of {key}, got {_show(value)}")
                kind = {"decoders": "decoder", "upstream_benchmarks": "benchmark"}.get(key, "method")
                values[key] = [check_component(v, where.at(i, value), kind) for i, v in enumerate(value)]
            else:
                if key == "policies" and isinstance(value, list | tuple):  # each entry as ``policy`` is read
                    value = [parse_model(v, where.at(i, value)) for i, v in enumerate(value)]
                elif key in MODEL_KEYS:  # a mapping is a model served by an inference endpoint
                    value = parse_model(value, where)
                check_value(value, hints[key], where)
                values[key] = list(value) if isinstance(value, tuple) else value
    except RecursionError:
        raise src.error("nested too deeply to be a run config") from None
    _cross_checks(values, data, src)
    return values


def _cross_checks(v: dict[str, Any], data: Mapping[Any, Any], src: Where) -> None:
    """Checks that involve several fields or a registry. What needs a room's knowledge (which names are models,
    the systems a config expands to, which qualities exist) is the preflight's (``runner/preflight.py``)."""
    from perbench import registry

    def at(key: str) -> Where:
        return src.at(key, data)

    try:
        registry.executors.entry(v["executor"])
    except registry.UnknownNameError as e:
        raise at("executor").error(str(e)) from None
    _check_benchmark_name(v["benchmark"], data.get("benchmark"), at("benchmark"))
    labels = [m.label() for m in v["methods"] + v["baselines"]]
    seen: set[str] = set()
    for i, label in enumerate(labels):
        if label in seen:
            where = at("methods") if i < len(v["methods"]) else at("baselines")
            raise where.error(f"{label!r} is listed twice (as a method or baseline); list each once")
        seen.add(label)
    if v["systems"] is not None:
        _check_systems_block(v, data, src)
    if v["rl"] is not None:
        RLPhase.from_dict(v["rl"], where=str(at("rl")))
    if v["adaptive"] is not None:
        AdaptiveSpec.from_dict(v["adaptive"], at("adaptive"))
    metric = v["verdict_metric"]
    if metric is not None:
        decoder, sep, quality = metric.partition(":")
        if not sep or not decoder or not quality:
            raise at("verdict_metric").error(
                f"expected DECODER:QUALITY (e.g. args:rubric_satisfaction), got {metric!r}"
            )
        from perbench.specs.metrics import DESCRIPTIVE_QUALITIES

        if quality in DESCRIPTIVE_QUALITIES:
            raise at("verdict_metric").error(
                f"{metric!r} is the answers' length, which the verdict reports beside the pick but never ranks on; "
                "choose a quality (e.g. best_of_n:rubric_satisfaction)"
            )
    names = [str(p) for p in v["policies"] or []]  # a policy's labels end in @NAME (a served one: its model)
    for i, name in enumerate(names):
        if name in names[:i]:
            raise (
                src.at("policies", data)
                .at(i, data["policies"])
                .error(
                    f"{name!r} is already policies[{names.index(name)}]: each policy decodes under its own name (@NAME)"
                )
            )
    seeds = v["seeds"]
    if seeds is not None:
        if not seeds:
            raise at("seeds").error("expected at least one seed (or null for just `seed`)")
        dup = sorted({s for s in seeds if seeds.count(s) > 1})
        if dup:
            raise at("seeds").error(f"seed {dup[0]} is listed twice")
        name = v["run_name"]
        longest = None if name is None else f"{name}-seed{max(seeds)}"
        if longest is not None and len(longest.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise at("run_name").error(
                f"with seeds each seed's run folder is RUN_NAME-seedN: {len(longest.encode('utf-8', 'surrogatepass'))} "
                f"bytes for seed {max(seeds)}; file systems allow at most {NAME_MAX}: choose a shorter run_name"
            )


#: what separates the parts of a cell's group (``benchmark|policy|seedN``): no benchmark name may hold it
GROUP_SEPARATOR = "|"


def _check_benchmark_name(comp: Any, raw: Any, where: Where) -> None:
    """A benchmark's ``name:`` (the file loader's) holds no :data:`GROUP_SEPARATOR`: readers of the cells split
    the group on it, so ``x|y`` would read as benchmark ``x`` of policy ``y|…``."""
    name = comp.params.get("name")
    if not (isinstance(name, str) and GROUP_SEPARATOR in name):
        return
    if isinstance(raw, Mapping) and isinstance(raw.get(comp.name), Mapping):  # {file: {name: …}}
        where = where.at(comp.name, raw).at("name", raw[comp.name])
    elif isinstance(raw, Mapping):
        where = where.at("name", raw)
    raise where.error(
        f"{name!r} holds {GROUP_SEPARATOR!r}, which separates the parts of a cell's group (benchmark|policy|seed); "
        "choose a name without it"
    )


def _check_systems_block(v: dict[str, Any], data: Mapping[Any, Any], src: Where) -> None:
    """The ``systems:`` block parses, and the methods it names are this config's (what it expands to is checked
    in the preflight: ``perbench.systems.check_systems``)."""
    raw = v["systems"]
    where = src.at("systems", data)
    spec = SystemsSpec.from_dict(raw, where)
    names = {m.name for m in v["methods"]} | {m.label() for m in v["methods"]}
    named: list[tuple[str, int | str, str, str]] = [("methods", i, m, "") for i, m in enumerate(spec.methods or ())] + [
        ("params", m, m, ", so its grid would expand nothing") for m in spec.params
    ]
    for key, at, m, why in named:
        if m not in names:
            close = difflib.get_close_matches(m, sorted(names), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            problem = f"{m!r} is not one of this config's methods{why}.{hint}"
            raise where.at(key, raw).at(at, raw.get(key)).error(problem)

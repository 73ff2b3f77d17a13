"""Components: a registry name plus keyword parameters (a benchmark, a method, a decoder), parsed from any front door
and checked against the registered class's or loader's signature, the decoders' parameter ranges and each
constructor's own checks."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perbench.config.rules import NON_NEGATIVE
from perbench.errors import ConfigError, ParamError
from perbench.specs.endpoint import Endpoint
from perbench.specs.located import Where
from perbench.specs.values import Bound, check_value
from perbench.specs.values import show as _show

#: ranges of decoder parameters (by parameter name; ``_DECODER_OVERRIDES`` for decoders that differ)
_DECODER_BOUNDS: dict[str, Bound] = {
    "k": Bound(1),
    "n": Bound(1),
    "alpha": Bound(0),
    "temperature": Bound(0, lo_open=True),
    "top_p": Bound(0, 1, lo_open=True),
    "sample_batch": Bound(1),
    "pool": Bound(1),
    "max_item_chars": Bound(1),
}
_DECODER_OVERRIDES: dict[str, dict[str, Bound]] = {"icl": {"k": Bound(0)}, "icl_rag": {"k": Bound(0)}}


def _method_bound(name: str) -> Bound | None:
    """The range of a method parameter by its name: a penalty weight (``l2``, ``adapt_l2``, ``anchor_ridge``, …)
    is ≥ 0 (a negative one rewards large weights, and the fit diverges or returns nonsense)."""
    return NON_NEGATIVE if name.endswith(("l2", "ridge")) else None


# ------------------------------------------------------------------------------------------------- components
@dataclass(frozen=True)
class Component:
    """A registry name plus keyword parameters, e.g. ``args`` with ``{"k": 10, "w": 1.0}``."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any, where: str | Where) -> Component:
        """A name, ``{name: NAME, <params>}`` or ``{NAME: {<params>}}`` (no registry check)."""
        return _parse_component(value, where if isinstance(where, Where) else Where(where))[0]

    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    def to_dict(self) -> dict[str, Any]:
        """``{name: NAME, <params>}``, or ``{NAME: {<params>}}`` when a parameter is itself called ``name`` (the
        ``file`` loader's): both parse back to the same component."""
        if "name" in self.params:
            return {self.name: dict(self.params)}
        return {"name": self.name, **self.params}


def plain(value: Any) -> Any:
    """``value`` as plain YAML/JSON data: components as mappings, and the located mappings and sequences that a
    config file was parsed into as plain dicts and lists."""
    if isinstance(value, Component | Endpoint):
        return plain(value.to_dict())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _parse_component(value: Any, where: Where) -> tuple[Component, Any, Where]:
    """-> (component, the mapping its parameters came from, the location of those parameters)."""
    form = "expected a name or {name: NAME, <params>}"
    if isinstance(value, Component):
        name, params, container, at = value.name, value.params, value.params, where
    elif isinstance(value, str):
        name, params, container, at = value, {}, None, where
    elif isinstance(value, dict) and "name" in value:
        name = value["name"]
        params = {k: v for k, v in value.items() if k != "name"}
        container, at = value, where
    elif isinstance(value, dict) and len(value) == 1:
        ((name, params),) = value.items()
        at = where.at(str(name), value)
        params = {} if params is None else params
        container = params
        if not isinstance(params, dict):
            raise at.error(f"the parameters of {name!r} must be a mapping, got {_show(params)}")
    else:
        raise where.error(f"{form}, got {_show(value)}")
    if not isinstance(name, str) or not name.strip():
        raise where.error(f"{form}; the name must be a non-empty string, got {_show(name)}")
    bad = [k for k in params if not isinstance(k, str)]
    if bad:
        raise at.error(f"parameter names are strings, got {_show(bad[0])}")
    return Component(name, dict(params)), container, at


def check_component(value: Any, where: Where, kind: str) -> Component:
    """Parse and check one component of ``kind`` (benchmark, method, decoder) against its registry entry: its
    parameters against the registered class's or loader's signature, decoders' ranges, and (not for a benchmark,
    whose loader would load the data) the constructor's own checks."""
    from perbench import registry

    reg = {"benchmark": registry.benchmarks, "method": registry.reward_models, "decoder": registry.decoders}[kind]
    comp, container, at = _parse_component(value, where)
    try:
        reg.entry(comp.name)
        target = reg.get(comp.name)
        accepted = registry.accepted_params(target)
    except registry.UnknownNameError as e:
        raise where.error(str(e)) from None
    except ImportError as e:
        raise where.error(
            f"{kind} {comp.name!r} cannot be imported ({e}); is its optional dependency installed?"
        ) from e
    if accepted is not None:
        _check_params(comp, accepted, at, container, kind)
    if kind in ("decoder", "method"):
        bounds = {**_DECODER_BOUNDS, **_DECODER_OVERRIDES.get(comp.name, {})} if kind == "decoder" else {}
        for k, v in comp.params.items():
            b = bounds.get(k) if kind == "decoder" else _method_bound(k)
            if b is not None and isinstance(v, int | float) and not isinstance(v, bool) and not b.holds(v):
                kind_text = "an integer" if isinstance(v, int) else "a number"
                raise at.at(k, container).error(f"expected {kind_text} {b.text()}, got {v!r}")
    if kind != "benchmark":  # the constructor's own checks; a benchmark loader would load the data
        try:
            target(**comp.params)
        except ParamError as e:  # a parameter the component refuses (remote code without the permission, ...)
            raise at.at(e.param, container).error(e.problem) from None
        except ConfigError as e:
            raise at.error(str(e)) from None
        except (ValueError, TypeError) as e:
            text = str(e)
            raise at.error(text if text.startswith(comp.name) else f"{comp.name}: {text}") from None
    return comp


def _check_params(comp: Component, accepted: Mapping[str, Any], at: Where, container: Any, kind: str) -> None:
    names = list(accepted)
    listed = ", ".join(names) or "none"
    for k in comp.params:
        if k not in accepted:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise at.at(k, container).error(f"{kind} {comp.name!r}: unknown parameter {k!r}.{hint} Accepted: {listed}")
    missing = [p.name for p in accepted.values() if p.required and p.name not in comp.params]
    if missing:
        first = missing[0]
        spec = f"{{name: {comp.name}, {first}: ...}}"
        key, example = {"benchmark": ("benchmark", spec), "method": ("methods", f"[{spec}]")}.get(
            kind, ("decoders", f"[{spec}]")
        )
        raise at.error(
            f"{kind} {comp.name!r} needs {', '.join(missing)}: give it in the config ({key}: {example}) or with "
            f"--set '{key}={example}'. Accepted: {listed}"
        )
    for k, v in comp.params.items():
        check_value(v, accepted[k].annotation, at.at(k, container))

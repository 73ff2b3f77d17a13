"""A model served by an OpenAI-compatible inference server (vLLM, SGLang, …), as a run config names it:
``policy: {endpoint: http://HOST:PORT/v1, model: NAME}`` (``judge:`` takes the same form), each field checked
where it is written. The client is :mod:`perbench.models.endpoint`."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from perbench.specs.located import Where
from perbench.specs.values import Bound, Rule, check_value, show


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server and the model it serves. ``max_concurrency``: requests in flight at once;
    ``timeout_s``: seconds one request may take; ``retries``: further tries of a request after a 429, a 5xx, a
    timeout or a refused connection (with exponential backoff); ``api_key_env``: the environment variable holding
    the bearer token (None: no ``Authorization`` header)."""

    endpoint: str
    model: str
    max_concurrency: int = 8
    timeout_s: float = 60.0
    retries: int = 3
    api_key_env: str | None = None

    def __str__(self) -> str:
        """The served model's name (a cell's group, ``benchmark|MODEL|seedN``, and log lines)."""
        return self.model

    @property
    def base_url(self) -> str:
        return self.endpoint.rstrip("/")

    def to_dict(self) -> dict[str, Any]:
        """The mapping a config writes; what only says how requests are made is left out while at its default."""
        out: dict[str, Any] = {"endpoint": self.endpoint, "model": self.model}
        for name, default in _OPTIONAL.items():
            if getattr(self, name) != default:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, value: Any, where: Where) -> Endpoint:
        """``{endpoint: URL, model: NAME, <options>}``, each key checked at its own line."""
        if not isinstance(value, dict):
            raise where.error(f"expected {{endpoint: URL, model: NAME}}, got {show(value)}")
        allowed = ["endpoint", "model", *_OPTIONAL]
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise where.at(str(key), value).error(f"unknown key.{hint} Accepted: {', '.join(allowed)}")
        for key in ("endpoint", "model"):
            if key not in value:
                raise where.error(f"an endpoint needs {key}: {{endpoint: http://HOST:PORT/v1, model: NAME}}")
            if not isinstance(value[key], str) or not value[key].strip():
                raise where.at(key, value).error(f"expected a non-empty string, got {show(value[key])}")
        url = urlsplit(value["endpoint"])
        if url.scheme not in ("http", "https") or not url.netloc:
            raise where.at("endpoint", value).error(
                f"expected an http(s) URL of an OpenAI-compatible API (http://HOST:PORT/v1), got {value['endpoint']!r}"
            )
        for key, tp in _TYPES.items():
            if key in value:
                check_value(value[key], tp, where.at(key, value))
        fields: dict[str, Any] = {k: float(v) if k == "timeout_s" else v for k, v in value.items()}
        return cls(**fields)


_OPTIONAL: dict[str, Any] = {"max_concurrency": 8, "timeout_s": 60.0, "retries": 3, "api_key_env": None}
_TYPES: dict[str, Any] = {
    "max_concurrency": Annotated[int, Bound(1, 1024)],
    "timeout_s": Annotated[float, Bound(0, lo_open=True)],
    "retries": Annotated[int, Bound(0, 20)],
    "api_key_env": str | None,
}


def _served_problem(value: Endpoint) -> str | None:
    return None  # checked field by field when parsed (:meth:`Endpoint.from_dict`)


#: the rule of a config key's endpoint form, in words for its errors
SERVED = Rule(_served_problem, "an OpenAI-compatible endpoint {endpoint: URL, model: NAME}")


def parse_model(value: Any, where: Where) -> Any:
    """A config's model key (``policy``, ``judge``): a mapping is an :class:`Endpoint`, anything else is left to the
    key's own annotation."""
    if isinstance(value, Endpoint):
        return value
    if isinstance(value, dict):
        return Endpoint.from_dict(value, where)
    return value


def is_endpoint(value: Any) -> bool:
    return isinstance(value, Endpoint)

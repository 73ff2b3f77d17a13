"""A policy (or judge) served by an OpenAI-compatible inference server (vLLM, SGLang, …): :class:`EndpointLM`.

It generates through ``POST {endpoint}/chat/completions`` with the prompt's messages, so the server applies its
own chat template (the run records that it is the server's): perbench renders a template only with a tokenizer
in process, and an endpoint's model need not be on this machine. Each request asks for one completion with its
own ``seed`` (``n: 1``): perbench seeds every sample on its own (Best-of-N's sample j, a zero-shot output), so a
sample is reproducible and cached by itself whatever the batching -- where the server honours seeds (vLLM and
SGLang do per request; a server's outputs are still not guaranteed bit-identical across versions, batch sizes or
hardware). Greedy decoding is ``temperature: 0``.

Requests run ``max_concurrency`` at a time (a thread pool: the work is waiting on sockets); a 408, 429, 500, 502,
503 or 504, a timeout or a refused connection is retried up to ``retries`` times with exponential backoff (a
``Retry-After`` header is honoured, up to 30 s); any other 4xx, or a reply that is not a completion, stops the run
with one line naming the endpoint and the status.

The model's identity (the cache keys of its samples) is the served model's name and what ``GET {endpoint}/models``
says of it (its creation time and vLLM's permission objects left out: servers make them per request), not the URL:
the same model served elsewhere reuses the samples. What needs the policy's weights or logits (ARGS, GenARM, policy
accuracy, RL) needs a policy in process: reading ``model``, ``tokenizer`` or ``eos_ids`` raises
:class:`NeedsWeightsError`."""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeGuard

from perbench.data.records import prompt_messages
from perbench.device import DevicePolicy
from perbench.errors import PerbenchError
from perbench.models.batching import AdaptiveBatcher
from perbench.models.generation import Generation, GenRequest
from perbench.models.loader import LoadedLM
from perbench.specs.endpoint import Endpoint

#: HTTP statuses worth another try: rate limited, or the server's own failure
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: what ``GET /models`` stamps anew on every request (vLLM: the time and permission objects with fresh ids), left out
#: of the model's identity
PER_REQUEST = frozenset({"created", "permission"})
#: the first backoff (doubled per try) and the longest wait between tries, in seconds
BACKOFF_S, MAX_WAIT_S = 0.5, 30.0


class EndpointError(PerbenchError):
    """A server that refused a request (a 4xx), kept failing past the retries, or answered something that is not
    an OpenAI-compatible reply."""


class NeedsWeightsError(PerbenchError):
    """Something that needs the model's weights, logits or tokenizer asked an endpoint for them."""


class EndpointLM(LoadedLM):
    """A :class:`LoadedLM` whose generations come from an OpenAI-compatible server; ``here``: this machine's device
    (what the run's in-process work uses)."""

    no_logprobs: ClassVar[str | None] = (
        "the policy is served by an inference endpoint, which gives no log-probs of given responses"
    )

    def __init__(self, spec: Endpoint, here: DevicePolicy) -> None:
        # LoadedLM's fields are properties here: no dataclass __init__
        self.spec = spec
        self._here = here
        self._served: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"EndpointLM({self.spec.model!r} at {self.spec.base_url})"

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    # ------------------------------------------------------------------ identity
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.spec.model

    @property
    def policy(self) -> DevicePolicy:  # type: ignore[override]
        return self._here

    def served(self) -> dict[str, Any]:
        """What ``GET /models`` says of the model (read once; what it stamps per request left out)."""
        if self._served is None:
            listing = self._call("GET", "/models", None)
            rows = listing.get("data") if isinstance(listing, dict) else None
            if not isinstance(rows, list):
                raise EndpointError(f"{self.spec.base_url}/models: expected {{data: [...]}}, got {_short(listing)}")
            ids = [r.get("id") for r in rows if isinstance(r, dict)]
            row = next((r for r in rows if isinstance(r, dict) and r.get("id") == self.spec.model), None)
            if row is None:
                raise EndpointError(
                    f"{self.spec.base_url}: serves no model {self.spec.model!r} (it serves: "
                    f"{', '.join(map(str, ids)) or 'none'}); set the policy's model: to one of them"
                )
            self._served = {k: v for k, v in row.items() if k not in PER_REQUEST}
        return self._served

    @property
    def fingerprint(self) -> str:  # type: ignore[override]
        digest = hashlib.sha256(json.dumps(self.served(), sort_keys=True, default=str).encode()).hexdigest()[:16]
        return f"endpoint:{self.spec.model}:{digest}"

    @property
    def chat_template_hash(self) -> str:
        return "server"

    def info(self) -> dict[str, Any]:
        """The provenance of the model: where it is served, under which name, and what the server says of it."""
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "endpoint": self.spec.base_url,
            "served_model": self.spec.model,
            "server_model_info": self.served(),
            "chat_template": "the server's (requests send the messages to /chat/completions)",
            "deterministic": "where the server honours per-request seeds; not guaranteed across server versions",
        }

    # ------------------------------------------------------------------ what only a model in process has
    def _needs_weights(self, what: str) -> NeedsWeightsError:
        return NeedsWeightsError(
            f"{what} of the policy {self.spec.model!r} are needed, but it is served by {self.spec.base_url}: what "
            "reads a policy's logits, hidden states or tokenizer (ARGS, GenARM, policy accuracy, RL, methods built on "
            "the policy) needs a policy in process (policy: MODEL)"
        )

    @property
    def model(self) -> Any:  # type: ignore[override]
        raise self._needs_weights("the weights")

    @property
    def tokenizer(self) -> Any:  # type: ignore[override]
        raise self._needs_weights("the tokenizer")

    @property
    def hidden_size(self) -> int:
        raise self._needs_weights("the hidden states")

    @property
    def eos_ids(self) -> list[int]:
        raise self._needs_weights("the stop tokens")

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        requests: Sequence[GenRequest],
        max_new_tokens: int,
        *,
        sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> list[Generation]:
        """One completion per request (greedy: temperature 0), ``max_concurrency`` requests at a time."""

        def one(r: GenRequest) -> Generation:
            body = {
                "model": self.spec.model,
                "messages": prompt_messages(r.prompt),
                "max_tokens": max_new_tokens,
                "temperature": temperature if sample else 0.0,
                "top_p": top_p if sample else 1.0,
                "seed": r.seed,
                "n": 1,
            }
            reply = self._call("POST", "/chat/completions", body)
            try:
                choice = reply["choices"][0]
                text = choice["message"]["content"] or ""
                finish = choice.get("finish_reason")
            except (KeyError, IndexError, TypeError):
                raise EndpointError(
                    f"{self.spec.base_url}/chat/completions: expected {{choices: [{{message: {{content}}}}]}}, got "
                    f"{_short(reply)}"
                ) from None
            return Generation(str(text).strip(), [], finish == "stop")

        if not requests:
            return []
        pool = ThreadPoolExecutor(min(self.spec.max_concurrency, len(requests)))
        try:
            futures = [pool.submit(one, r) for r in requests]
            return [f.result() for f in futures]
        finally:  # a refusal stops the batch: requests not yet sent are not sent
            pool.shutdown(wait=True, cancel_futures=True)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """One API call with the retries and backoff of the module docstring -> the decoded JSON reply."""
        url = self.spec.base_url + path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.spec.api_key_env:
            key = os.environ.get(self.spec.api_key_env)
            if not key:
                raise EndpointError(f"{url}: api_key_env names {self.spec.api_key_env}, which is not set")
            headers["Authorization"] = f"Bearer {key}"
        data = None if body is None else json.dumps(body).encode()
        last = ""
        for attempt in range(self.spec.retries + 1):
            wait = min(BACKOFF_S * 2**attempt, MAX_WAIT_S)
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=self.spec.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    raise EndpointError(f"{url}: the reply is not JSON: {_short(raw)}") from None
            except urllib.error.HTTPError as e:
                detail = _short(e.read())
                if e.code not in RETRY_STATUSES:
                    raise EndpointError(f"{url}: HTTP {e.code} {e.reason}: {detail}") from None
                last = f"HTTP {e.code} {e.reason}: {detail}"
                retry_after = e.headers.get("Retry-After") if e.headers else None
                if retry_after and retry_after.isdigit():
                    wait = min(float(retry_after), MAX_WAIT_S)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = f"{getattr(e, 'reason', e)}; is the server up and serving at {self.spec.base_url}?"
            if attempt < self.spec.retries:
                time.sleep(wait)
        tries = self.spec.retries + 1
        raise EndpointError(f"{url}: no answer after {tries} {'try' if tries == 1 else 'tries'} (last: {last})")


def _short(value: Any, limit: int = 200) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def request_batcher(lm: EndpointLM, size: int | str) -> AdaptiveBatcher:
    """The batches a served model's requests go in (each stored when it ends): ``size``, or for ``auto`` four waves of
    ``max_concurrency`` requests (no memory to estimate here: the server batches on its side)."""
    return AdaptiveBatcher(size, "endpoint", start=4 * lm.spec.max_concurrency)


def is_served(lm: Any) -> TypeGuard[EndpointLM]:
    """Whether ``lm`` generates through an inference server (no weights, logits or tokenizer in process)."""
    return isinstance(lm, EndpointLM)

"""``perbench serve EXPORT``: an exported system as an HTTP reward service (stdlib ``http.server``, one thread per
connection, rows of concurrent requests scored together in one batch).

Request shapes (POST, JSON body; the response is JSON):

- perbench's, ``POST /score``: ``{"prompts": [...], "responses": [...], "users": [...]}`` (or ``"user": ID`` for
  every row) → ``{"rewards": [...], "known": [...]}``; a prompt is a string or a list of ``{role, content}``
  messages, a response a string or a conversation whose last message is the completion; ``known`` says, per
  row, whether the user has parameters of their own.
- OpenRLHF's ``--remote_rm_url``, ``POST /get_reward`` (or ``/``): ``{"query": [...], "prompts": [...],
  "labels": [...]}`` (``queries`` is read as ``query``) → ``{"rewards": [...]}``. Each query is the prompt
  followed by the response, as OpenRLHF sends them: the response is the query with its prompt cut off the front.
  Each row's user is its label (give OpenRLHF ``--label_key`` the dataset's user-id column), else the server's
  ``--user``.

``GET /health`` answers ``{"label", "method", "users"}``. A bad request is a 400 with ``{"error": ...}`` naming
the field; an unknown user is warned about once on stderr (``--strict``: a 400).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from perbench.export.model import ExportedRM

#: the most bytes one request body may have (a batch of long conversations fits many times over)
MAX_BODY = 64 * 2**20


class BadRequest(ValueError):
    """A request the server refuses (400): its message names the field."""


@dataclass
class Job:
    prompts: list[Any]
    responses: list[Any]
    users: list[Any]
    done: threading.Event = field(default_factory=threading.Event)
    rewards: list[float] | None = None
    error: BaseException | None = None


class Batcher:
    """One scoring thread: it takes every job waiting (up to ``max_rows`` rows) and scores them in one call."""

    def __init__(self, rm: ExportedRM, max_rows: int = 256, wait_s: float = 0.005) -> None:
        self.rm, self.max_rows, self.wait_s = rm, max_rows, wait_s
        self.jobs: queue.Queue[Job] = queue.Queue()
        self.batches = 0
        threading.Thread(target=self._loop, name="perbench-serve-batcher", daemon=True).start()

    def score(self, job: Job) -> list[float]:
        self.jobs.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.rewards is not None
        return job.rewards

    def _loop(self) -> None:
        while True:
            batch = [self.jobs.get()]
            rows = len(batch[0].prompts)
            while rows < self.max_rows:
                try:
                    job = self.jobs.get(timeout=self.wait_s)
                except queue.Empty:
                    break
                batch.append(job)
                rows += len(job.prompts)
            self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        try:
            got = self.rm.score(
                [p for j in batch for p in j.prompts],
                [r for j in batch for r in j.responses],
                [u for j in batch for u in j.users],
            ).tolist()
            self.batches += 1
            start = 0
            for j in batch:
                j.rewards = [float(v) for v in got[start : start + len(j.prompts)]]
                start += len(j.prompts)
        except BaseException as e:  # handed to each waiting request, never lost in this thread
            for j in batch:
                j.error = e
        for j in batch:
            j.done.set()


def _list(body: dict[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list):
        raise BadRequest(f"{key}: expected a list, got {type(value).__name__ if key in body else 'nothing'}")
    return value


def perbench_job(rm: ExportedRM, body: dict[str, Any]) -> Job:
    prompts, responses = _list(body, "prompts"), _list(body, "responses")
    if "users" in body:
        users = _list(body, "users")
    elif "user" in body:
        users = [body["user"]] * len(prompts)
    else:
        raise BadRequest("users: missing (a list of one user id per row, or 'user': one id for every row)")
    if not len(prompts) == len(responses) == len(users):
        raise BadRequest(f"prompts, responses, users: {len(prompts)}, {len(responses)}, {len(users)} rows; expected "
                         "one of each per row")  # fmt: skip
    return _checked(rm, Job(prompts, responses, users))


def openrlhf_job(rm: ExportedRM, body: dict[str, Any], default_user: str | None) -> Job:
    key = "query" if "query" in body else "queries"
    queries, prompts = _list(body, key), _list(body, "prompts")
    if len(queries) != len(prompts):
        raise BadRequest(f"{key}, prompts: {len(queries)} and {len(prompts)} rows; expected one prompt per query")
    labels = body.get("labels")
    if labels is None:
        if default_user is None:
            raise BadRequest("labels: missing; each row's user is its label (OpenRLHF --label_key naming the "
                             "dataset's user-id column), or start `perbench serve` with --user")  # fmt: skip
        users: list[Any] = [default_user] * len(queries)
    elif not isinstance(labels, list) or len(labels) != len(queries):
        raise BadRequest(f"labels: expected a list of one user id per query ({len(queries)})")
    else:
        users = labels
    responses = []
    for i, (q, p) in enumerate(zip(queries, prompts, strict=True)):
        if not isinstance(q, str) or not isinstance(p, str):
            raise BadRequest(f"{key}[{i}], prompts[{i}]: expected strings")
        if not q.startswith(p):
            raise BadRequest(f"{key}[{i}]: does not start with prompts[{i}] (a query is the prompt followed by the "
                             "response)")  # fmt: skip
        responses.append(q[len(p) :])
    return _checked(rm, Job(list(prompts), responses, users))


def _checked(rm: ExportedRM, job: Job) -> Job:
    """Every row's input checked before it joins a batch: one bad request never fails another's rows."""
    from perbench.export.format import prompt_from_json, response_text

    try:
        for i, (p, r, u) in enumerate(zip(job.prompts, job.responses, job.users, strict=True)):
            prompt_from_json(p, f"prompts[{i}]")
            response_text(r, f"responses[{i}]")
            rm.check_user(u, f"users[{i}]")
    except (ValueError, LookupError) as e:
        raise BadRequest(str(e)) from None
    return job


def make_server(
    rm: ExportedRM, host: str, port: int, *, user: str | None = None, max_rows: int = 256, log: bool = True
) -> Any:
    """A ``ThreadingHTTPServer`` serving ``rm`` (not started: call ``serve_forever``; ``server_address`` has the
    port, useful with ``port=0``)."""
    batcher = Batcher(rm, max_rows=max_rows)

    class Handler(BaseHTTPRequestHandler):
        server_version = "perbench-serve"

        def log_message(self, format: str, *args: Any) -> None:  # one line per request on stderr, as http.server
            if log:
                sys.stderr.write(f"{self.address_string()} {format % args}\n")

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/health", ""):
                self._reply(200, {"label": rm.label, "method": rm.method, "users": len(rm.users)})
            else:
                self._reply(404, {"error": f"no such path {self.path}; POST /score or /get_reward, GET /health"})

        def do_POST(self) -> None:
            path = self.path.rstrip("/")
            if path not in ("/score", "/get_reward", ""):
                self._reply(
                    404, {"error": f"no such path {self.path}; POST /score (perbench) or /get_reward (OpenRLHF)"}
                )
                return
            try:
                n = int(self.headers.get("Content-Length") or 0)
                if n <= 0 or n > MAX_BODY:
                    raise BadRequest(f"body: expected a JSON object of 1 to {MAX_BODY} bytes, got {n}")
                body = json.loads(self.rfile.read(n))
                if not isinstance(body, dict):
                    raise BadRequest(f"body: expected a JSON object, got {type(body).__name__}")
                job = perbench_job(rm, body) if path == "/score" else openrlhf_job(rm, body, user)
                rewards = batcher.score(job)
            except (BadRequest, json.JSONDecodeError, UnicodeDecodeError) as e:
                self._reply(
                    400, {"error": f"{type(e).__name__ if not isinstance(e, BadRequest) else 'bad request'}: {e}"}
                )
                return
            except Exception as e:  # a failure of the model itself: a 500 that says what, the server keeps serving
                self._reply(500, {"error": f"{type(e).__name__}: {e}"})
                return
            out: dict[str, Any] = {"rewards": rewards}
            if path == "/score":
                out["known"] = [rm.known(str(u)) for u in job.users]
            self._reply(200, out)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.batcher = batcher  # type: ignore[attr-defined]
    return server

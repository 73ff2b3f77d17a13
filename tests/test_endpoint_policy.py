"""A policy (and a judge) served by an OpenAI-compatible inference server: a small server on loopback, backed by the
tiny random model and perbench's own generation code, answers ``/v1/models`` and ``/v1/chat/completions`` over
real HTTP; a run whose policy is that endpoint has the layout and verdict structure of the same run in process."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from perbench.cli import main
from tests.test_end_to_end import tiny_pool  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = "tiny"


class FakeServer:
    """What the loopback server does: ``fail`` statuses answered (in order) before serving again, ``refuse`` a
    status every completion gets; ``posts`` counts the completions asked for."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self.fail: list[int] = []
        self.refuse: int | None = None
        self.posts = 0
        self.lock = threading.Lock()
        self.url = ""


def complete(lm: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One chat completion from the model in process, with the request's seed and sampling (perbench's code)."""
    from perbench.data.records import Message
    from perbench.models.generate import GenRequest, generate_plain

    prompt = tuple(Message(m["role"], m["content"]) for m in body["messages"])
    sample = float(body.get("temperature", 1.0)) > 0
    req = GenRequest(prompt, "*", int(body.get("seed", 0)))
    temperature = float(body["temperature"]) if sample else 1.0
    gen = generate_plain(
        lm, [req], int(body["max_tokens"]), sample=sample, temperature=temperature, top_p=body["top_p"]
    )
    choice = {"index": 0, "message": {"role": "assistant", "content": gen[0].text}}
    return {
        "object": "chat.completion",
        "choices": [{**choice, "finish_reason": "stop" if gen[0].finished else "length"}],
    }


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    from perbench.models.loader import load_lm

    state = FakeServer(load_lm("tiny-random", device="cpu"))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/v1/models":
                return self.reply(404, {"error": {"message": f"no route {self.path}"}})
            # a server stamps `created` and fresh permission ids per request (vLLM does): not the model's identity
            stamp = time.time_ns()
            row = {"id": MODEL, "object": "model", "created": stamp, "permission": [{"id": f"modelperm-{stamp}"}]}
            self.reply(200, {"object": "list", "data": [{**row, "max_model_len": 2048}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.posts += 1
                status = state.fail.pop(0) if state.fail else state.refuse
            if status is not None:
                return self.reply(status, {"error": {"message": "refused by the test server"}})
            if self.path != "/v1/chat/completions" or body.get("model") != MODEL:
                return self.reply(404, {"error": {"message": "unknown route or model"}})
            with state.lock:  # one generation at a time through the shared model
                self.reply(200, complete(state.lm, body))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def reset(server: FakeServer) -> None:
    server.fail, server.refuse, server.posts = [], None, 0


def endpoint(server: FakeServer, **options: Any) -> dict[str, Any]:
    return {"endpoint": server.url, "model": MODEL} | options


def served_lm(server: FakeServer, **options: Any) -> Any:
    from perbench.device import resolve_device
    from perbench.models.endpoint import EndpointLM
    from perbench.specs.endpoint import Endpoint

    return EndpointLM(Endpoint(**endpoint(server, **options)), resolve_device("cpu", "float32"))


# ------------------------------------------------------------------------------------------------ the client
def test_served_samples_are_the_in_process_samples(server: FakeServer) -> None:
    """The request carries the sample's seed, temperature, top-p and token limit: the server's generation code
    then gives exactly perbench's own samples (greedy and sampled), and a judge reads the same text."""
    from perbench.metrics.judge import RubricJudge, lm_judge
    from perbench.models.generate import GenRequest, generate_plain

    lm = served_lm(server)
    reqs = [GenRequest("Give me a tip for sleeping better.", "*", seed) for seed in (3, 11)]
    for sample in (False, True):
        local = [generate_plain(server.lm, [r], 10, sample=sample, top_p=0.9)[0] for r in reqs]
        remote = generate_plain(lm, reqs, 10, sample=sample, top_p=0.9)
        assert [g.text for g in remote] == [g.text for g in local]
        assert [g.finished for g in remote] == [g.finished for g in local]
    assert server.posts == 4
    judge = RubricJudge(lm, max_new_tokens=6)
    assert judge.judge(["Rate this answer from 0 to 2."]) == lm_judge(server.lm, max_new_tokens=6)(
        ["Rate this answer from 0 to 2."]
    )
    assert lm.fingerprint == served_lm(server).fingerprint  # `created` left out: one identity per served model
    assert lm.fingerprint.startswith(f"endpoint:{MODEL}:")


def test_retries_a_503_and_refuses_a_400_in_one_line(server: FakeServer) -> None:
    from perbench.errors import PerbenchError
    from perbench.models.endpoint import NeedsWeightsError
    from perbench.models.generate import GenRequest, generate_plain

    lm = served_lm(server, retries=2)
    server.fail = [503]
    assert len(generate_plain(lm, [GenRequest("Hello?", "*", 0)], 4)) == 1
    assert server.posts == 2  # the 503, then the answer

    server.fail = [503, 503]
    with pytest.raises(PerbenchError, match=r"no answer after 2 tries \(last: HTTP 503"):
        generate_plain(served_lm(server, retries=1), [GenRequest("Hello?", "*", 0)], 4)

    server.refuse = 400
    with pytest.raises(PerbenchError) as e:
        generate_plain(lm, [GenRequest("Hello?", "*", 0)], 4)
    assert f"{server.url}/chat/completions: HTTP 400" in str(e.value) and "\n" not in str(e.value)

    with pytest.raises(PerbenchError, match=r"serves no model 'other' \(it serves: tiny\)"):
        served_lm(server, model="other").fingerprint  # noqa: B018 - reading it asks the server
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    nobody = served_lm(server, retries=0, endpoint=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(PerbenchError, match=r"no answer after 1 try \(last: .*is the server up and serving at http"):
        nobody.fingerprint  # noqa: B018
    with pytest.raises(NeedsWeightsError, match="needs a policy in process"):
        lm.model  # noqa: B018


# ------------------------------------------------------------------------------------------------ a run
def run_config(pool: Path, out: Path, policy: Any, **extra: Any) -> dict[str, Any]:
    return {
        "benchmark": {"name": "rubrics", "pool": str(pool)},
        "policy": policy,
        "rm_backbone": "tiny-random",
        "methods": ["global_bt"],
        "decoders": ["zero_shot", {"name": "best_of_n", "n": 2, "pool": 4}, {"name": "icl", "k": 1}],
        "verdict_metric": "best_of_n:rubric_satisfaction",
        "max_new_tokens": 8,
        "max_test_prompts": 2,
        "max_pool_prompts": 2,
        "max_gen_users": 2,
        "bootstrap": 20,
        "shot_curve": [1],
        "bertscore": False,
        "out_dir": str(out),
        "device": "cpu",
        **extra,
    }


def cli_run(path: Path, data: dict[str, Any]) -> int:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return main(["--quiet", "run", str(path)])


def layout(run_dir: Path) -> tuple[Counter[tuple[Any, ...]], dict[str, set[str]], set[tuple[str, ...]]]:
    """The samples per (kind, decoder, user, prompt), each kind's fields, and the cells' (system, metric, user,
    prompt) -- policy accuracy left out (a served policy has none)."""
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    where = Counter((r.get("kind"), r.get("decoder"), r.get("user_id"), r.get("prompt_id")) for r in samples)
    fields: dict[str, set[str]] = {}
    for r in samples:
        fields.setdefault(str(r.get("kind")), set()).update(r)
    cells = [json.loads(x) for x in (run_dir / "cells.jsonl").read_text().splitlines()]
    keys = {(c["method"], c["metric"], c["user"], c["prompt"]) for c in cells if not c["metric"].startswith("pa")}
    return where, fields, keys


def test_served_run_has_the_in_process_layout(
    server: FakeServer,
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
) -> None:
    local = run_config(tiny_pool, tmp_path, "tiny-random", run_name="local")
    remote = run_config(tiny_pool, tmp_path, endpoint(server, max_concurrency=4), run_name="served")
    assert cli_run(tmp_path / "local.yaml", local) == 0
    assert server.posts == 0
    assert cli_run(tmp_path / "served.yaml", remote) == 0
    a, b = layout(tmp_path / "local"), layout(tmp_path / "served")
    files = {p.name for p in (tmp_path / "local").iterdir()}
    assert {"samples.jsonl", "cells.jsonl", "results.json"} <= files
    assert files == {p.name for p in (tmp_path / "served").iterdir()}
    # every generation of the served run went over HTTP: 4 samples per pool prompt, zero-shot once per prompt, ICL
    # once per (user, prompt)
    pool_prompts = {p for kind, _, _, p in a[0] if kind == "bon_pool_cell"}
    zero_prompts = {p for kind, d, _, p in a[0] if kind == "generation" and d == "zero_shot"}
    icl_cells = [c for c in a[0] if c[0] == "generation" and str(c[1]).startswith("icl")]
    assert len(pool_prompts) == 2 and len(icl_cells) == 4
    assert server.posts == 4 * len(pool_prompts) + len(zero_prompts) + len(icl_cells)
    assert a[0] == b[0] and a[1] == b[1] and a[2] == b[2]
    assert any(kind == "bon_cell" for kind, *_ in a[0]) and any(kind == "generation" for kind, *_ in b[0])

    res_a = json.loads((tmp_path / "local" / "results.json").read_text())
    res_b = json.loads((tmp_path / "served" / "results.json").read_text())
    va, vb = res_a["analysis"]["verdict"], res_b["analysis"]["verdict"]
    assert set(va) == set(vb) and [p["kind"] for p in va["parts"]] == [p["kind"] for p in vb["parts"]]
    assert vb["metric"] == va["metric"] == "best_of_n:rubric_satisfaction" and vb["decision"]
    assert set(res_a["downstream"]) == set(res_b["downstream"]) and set(res_a["analysis"]) == set(res_b["analysis"])
    prov = res_b["provenance"]["models"]["policy"]
    assert prov["endpoint"] == server.url and prov["served_model"] == MODEL
    assert prov["server_model_info"] == {"id": MODEL, "object": "model", "max_model_len": 2048}
    assert "not_applicable" not in res_a["upstream"]["global_bt"]["policy_accuracy"]
    assert "inference endpoint" in res_b["upstream"]["global_bt"]["policy_accuracy"]["not_applicable"]

    # a rerun reuses every sample: they are keyed by the served model's identity, not asked again
    server.posts = 0
    assert cli_run(tmp_path / "served.yaml", remote) == 0
    assert server.posts == 0


def test_refusals_are_one_located_line(
    server: FakeServer,
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a decoder that reads the policy's logits is refused at its line, before any request or model work
    out = tmp_path / "runs"
    cfg = run_config(tiny_pool, out, endpoint(server), decoders=["zero_shot", {"name": "args", "k": 2}])
    assert cli_run(tmp_path / "args.yaml", cfg) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{tmp_path / 'args.yaml'}:" in err and "decoders[1]" in err
    assert "decoder 'args' reads the policy's next-token logits" in err and "zero_shot" in err
    assert server.posts == 0 and not out.exists()

    cfg = run_config(tiny_pool, out, endpoint(server, retrys=2))
    assert cli_run(tmp_path / "typo.yaml", cfg) == 2
    assert "policy.retrys: unknown key. Did you mean 'retries'?" in capsys.readouterr().err

    # a 4xx from the server stops the run with one line naming the endpoint and the status
    server.refuse = 400
    cfg = run_config(tiny_pool, out, endpoint(server), methods=[], baselines=["length"], decoders=["zero_shot"])
    cfg.pop("verdict_metric")
    assert cli_run(tmp_path / "refused.yaml", cfg) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("perbench: error: ") and f"{server.url}/chat/completions: HTTP 400" in err
    assert 1 <= server.posts <= 2  # the zero-shot batch's requests in flight; nothing after the refusal


def test_policies_mix_in_process_and_served(
    server: FakeServer,
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``policies:`` takes endpoints like ``policy:``: each policy decodes (labels ``@NAME``), a served one has its
    policy accuracy reported not applicable (never a number), and a rerun asks the server nothing."""
    from perbench.config import RunConfig
    from perbench.config.hashing import result_hash

    data = run_config(tiny_pool, tmp_path, "tiny-random", policies=["tiny-random", endpoint(server)])
    assert cli_run(tmp_path / "mixed.yaml", data) == 0
    assert server.posts > 0
    res = json.loads(next(tmp_path.glob("*/results.json")).read_text())
    labels = set(res["downstream"])
    assert {"zero_shot@tiny-random", f"zero_shot@{MODEL}"} <= labels
    assert any(x.endswith(f"@{MODEL}") and x.startswith("best_of_n") for x in labels)
    by_policy = res["upstream"]["global_bt"]["policy_accuracy_by_policy"]
    assert set(by_policy) == {MODEL} and "inference endpoint" in by_policy[MODEL]["not_applicable"]
    assert "not_applicable" not in res["upstream"]["global_bt"]["policy_accuracy"]  # the main policy's, in process
    served = [m for m in res["provenance"]["models"]["downstream_policies"] if m.get("served_model") == MODEL]
    assert len(served) == 1 and served[0]["endpoint"] == server.url
    samples = [json.loads(x) for x in next(tmp_path.glob("*/samples.jsonl")).read_text().splitlines()]
    assert {r.get("policy") for r in samples if r.get("kind") == "generation"} == {"tiny-random", MODEL}

    server.posts = 0
    assert cli_run(tmp_path / "mixed.yaml", data) == 0
    assert server.posts == 0

    # the main policy served, another in process: policy accuracy is measured under the in-process one
    flipped = {**data, "policy": endpoint(server), "policies": [endpoint(server), "tiny-random"], "run_name": "flip"}
    assert cli_run(tmp_path / "flipped.yaml", flipped) == 0
    res = json.loads((tmp_path / "flip" / "results.json").read_text())
    up = res["upstream"]["global_bt"]
    assert "inference endpoint" in up["policy_accuracy"]["not_applicable"]
    assert set(up["policy_accuracy_by_policy"]) == {"tiny-random"}
    # (no decoder weighs the reward here, so the headline is n/a by its own rule; the curve over w is measured)
    assert all(g["curve"]["pairs"] > 0 for g in up["policy_accuracy_by_policy"]["tiny-random"].values())

    # how requests are made is not what a result depends on: the same hash with another concurrency
    other = {**data, "policies": ["tiny-random", endpoint(server, max_concurrency=2, retries=0)]}
    assert result_hash(RunConfig.from_dict(data).to_dict()) == result_hash(RunConfig.from_dict(other).to_dict())

    # a decoder that reads logits is refused, naming the served entry of ``policies``
    bad = {**data, "decoders": ["zero_shot", {"name": "args", "k": 2}]}
    assert cli_run(tmp_path / "bad.yaml", bad) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "decoders[1]" in err and f"{MODEL!r} (policies[1])" in err
    typo = {**data, "policies": ["tiny-random", endpoint(server, retrys=1)]}
    assert cli_run(tmp_path / "typo.yaml", typo) == 2
    assert "policies[1].retrys: unknown key" in capsys.readouterr().err
    same = {**data, "policies": ["tiny-random", endpoint(server, model="tiny-random")]}
    assert cli_run(tmp_path / "same.yaml", same) == 2
    assert "policies[1]: 'tiny-random' is already policies[0]" in capsys.readouterr().err

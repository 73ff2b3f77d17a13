"""``perbench serve``: an exported system answers a real HTTP client on loopback with load_rm's scores, in
perbench's shape and OpenRLHF's ``--remote_rm_url`` shape, batching concurrent requests."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import perbench
from tests.fixtures_export import mpu_export, run_dir, tiny_pool  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def served(mpu_export: Path) -> Iterator[tuple[str, Any]]:  # noqa: F811
    from perbench.export.serve import make_server

    rm = perbench.load_rm(mpu_export)
    server = make_server(rm, "127.0.0.1", 0, log=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}", server
    server.shutdown()
    server.server_close()


def post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_serve_scores_as_load_rm_in_both_shapes(served: tuple[str, Any], mpu_export: Path) -> None:  # noqa: F811
    url, _ = served
    rm = perbench.load_rm(mpu_export)
    users = [rm.seen_users[0], rm.manifest["adapted_users"][0], rm.seen_users[1]]
    prompts = ["How do I sleep better?", [{"role": "user", "content": "Any tip for focus?"}], "Best breakfast?"]
    responses = ["Go to bed at the same time.", "Work in 25-minute blocks.", "Oats with fruit."]
    want = rm.score(prompts, responses, users)
    status, got = post(f"{url}/score", {"prompts": prompts, "responses": responses, "users": users})
    assert status == 200 and got["known"] == [True, True, True]
    np.testing.assert_allclose(got["rewards"], want, rtol=1e-5, atol=1e-6)
    # OpenRLHF: query = prompt + response, the user in labels
    plain = [0, 2]
    body = {
        "query": [prompts[i] + responses[i] for i in plain],  # type: ignore[operator]
        "prompts": [prompts[i] for i in plain],
        "labels": [users[i] for i in plain],
    }
    status, got = post(f"{url}/get_reward", body)
    assert status == 200 and set(got) == {"rewards"}
    np.testing.assert_allclose(got["rewards"], rm.score([prompts[i] for i in plain], [responses[i] for i in plain],
                                                        [users[i] for i in plain]), rtol=1e-5, atol=1e-6)  # fmt: skip
    with urllib.request.urlopen(f"{url}/health", timeout=10) as r:
        assert json.loads(r.read())["method"] == "mpu"


def test_serve_batches_concurrent_requests(served: tuple[str, Any], mpu_export: Path) -> None:  # noqa: F811
    url, server = served
    rm = perbench.load_rm(mpu_export)
    user = rm.seen_users[0]
    texts = [f"Answer number {i}." for i in range(24)]
    before = server.batcher.batches
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda t: post(f"{url}/score", {"prompts": ["Q?"], "responses": [t], "user": user}), texts))
    assert all(s == 200 for s, _ in got)
    np.testing.assert_allclose([g["rewards"][0] for _, g in got], rm.score(["Q?"] * 24, texts, user), rtol=1e-5,
                               atol=1e-6)  # fmt: skip
    assert server.batcher.batches - before < len(texts)  # rows of concurrent requests shared batches


def test_serve_refuses_bad_requests_with_the_field(served: tuple[str, Any]) -> None:
    url, _ = served
    cases: list[tuple[str, Any, str]] = [
        ("/score", {"prompts": "Q?", "responses": ["A"], "users": ["u"]}, "prompts: expected a list"),
        ("/score", {"prompts": ["Q?"], "responses": ["A"]}, "users: missing"),
        ("/score", {"prompts": ["Q?"], "responses": [None], "users": ["u01"]}, "responses[0]"),
        ("/score", {"prompts": ["Q?"], "responses": ["A"], "users": [None]}, "users[0]"),
        ("/get_reward", {"query": ["Q?A"], "prompts": ["Q?"]}, "labels: missing"),
        ("/get_reward", {"query": ["other"], "prompts": ["Q?"], "labels": ["u01"]}, "does not start with"),
        ("/nowhere", {}, "no such path"),
    ]
    for path, body, message in cases:
        status, got = post(url + path, body)
        assert status in (400, 404) and message in got["error"], (path, body, got)

"""Ray's failures in perbench's words, through the ``perbench`` command: a wrong ``--ray-address``, ``auto`` with no
cluster, a node without perbench, a lost head mid-run: each one ``perbench: error`` line, exit code 2, and (for
the failures met before any unit) no run directory; a node whose versions differ from the driver's is named by
the start-up probe. Also: the progress text over units, the threads a unit's task takes, and the memory check."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from perbench.cli import main
from tests.test_end_to_end import tiny_pool  # noqa: F401 - a fixture

ROWS = [
    ("u1", "Pet?", "A cat.", "A dog.", "train"),
    ("u1", "Toy?", "Yarn.", "A ball.", "test"),
    ("u2", "Pet?", "A dog.", "A cat.", "train"),
    ("u2", "Toy?", "A ball.", "Yarn.", "test"),
    ("u3", "Tea?", "Green tea.", "Black tea.", "train"),
    ("u3", "Sea?", "Blue.", "Grey.", "test"),
]


def write_run(root: Path, **extra: Any) -> tuple[Path, Path]:
    """A config that needs no model (baselines only), run with the Ray executor: (config file, out_dir)."""
    data = root / "d.jsonl"
    keys = ("user_id", "prompt", "chosen", "rejected", "split")
    data.write_text("".join(json.dumps(dict(zip(keys, r, strict=True))) + "\n" for r in ROWS))
    cfg = {
        "benchmark": {"name": "file", "source": str(data)},
        "methods": [],
        "decoders": [],
        "bootstrap": 20,
        "out_dir": str(root / "runs"),
        "executor": "ray",
        **extra,
    }
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, root / "runs"


def one_error(err: str) -> str:
    """The single ``perbench: error`` line of ``err``, and nothing of Ray's beside it (the progress bars of
    model loading, and the line in which Ray's C++ logging says it heeds ``RAY_BACKEND_LOG_LEVEL``, set aside)."""
    lines = [
        line
        for line in err.replace("\r", "\n").splitlines()
        if line.strip() and "it/s]" not in line and "s/it]" not in line and "logging.cc" not in line
    ]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("perbench: error: "), err
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------- connection failures
def test_wrong_address_is_one_located_line_before_the_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "")  # restored after the test (the CLI sets it from --ray-address)
    config, runs = write_run(tmp_path)
    port = free_port()  # nothing listens there
    t = time.monotonic()
    assert main(["run", str(config), "--ray-address", f"127.0.0.1:{port}"]) == 2
    assert time.monotonic() - t < 30  # Ray itself would retry for ever
    line = one_error(capsys.readouterr().err)
    assert f"--ray-address 127.0.0.1:{port}: no Ray head answers at 127.0.0.1:{port} (connection refused)" in line
    assert "ray start --head" in line
    assert main(["run", str(config), "--ray-address", "head-node"]) == 2
    assert "--ray-address head-node: not a Ray address; give auto or the head's HOST:PORT" in one_error(
        capsys.readouterr().err
    )
    assert not runs.exists()


class Listener:
    """Another service on a loopback port: it answers each connection with ``reply`` (b"": says nothing, holding
    the connection open until the listener closes)."""

    def __init__(self, reply: bytes) -> None:
        self.reply, self.done = reply, threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while not self.done.is_set():
                conn, _ = self.sock.accept()
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(1 << 16)
            if self.reply:
                conn.sendall(self.reply)
            else:
                self.done.wait(30)

    def close(self) -> None:
        self.done.set()
        self.sock.close()


@pytest.mark.parametrize(
    "reply", [b"", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"], ids=["silent", "http"]
)
def test_another_service_at_the_address_is_one_line_before_the_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, reply: bytes
) -> None:
    """Something other than a Ray head listens at the address (Ray itself retries for minutes, in its words): one
    line naming the flag, within the bound the connect timeout sets (3 × 1 + 5 s here, 20 s by default)."""
    pytest.importorskip("ray")
    from perbench.runner import cluster

    monkeypatch.setenv("RAY_ADDRESS", "")
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    config, runs = write_run(tmp_path)
    other = Listener(reply)
    try:
        t = time.monotonic()
        assert main(["run", str(config), "--ray-address", f"127.0.0.1:{other.port}"]) == 2
        assert time.monotonic() - t < 30
    finally:
        other.close()
    line = one_error(capsys.readouterr().err)
    assert line.startswith(f"perbench: error: --ray-address 127.0.0.1:{other.port}: something listens at 127.0.0.1:")
    assert "it is not a Ray head (no Ray cluster id came back within 8 s)" in line and "ray start --head" in line
    assert not runs.exists()


def test_auto_without_a_cluster_is_one_line_before_the_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    from ray._private import services

    # this machine as one without Ray: no address file in Ray's temp folder, no GCS process to find
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray-tmp"))
    monkeypatch.setenv("RAY_ADDRESS", "")
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: [])
    config, runs = write_run(tmp_path)
    assert main(["run", str(config), "--ray-address", "auto"]) == 2
    line = one_error(capsys.readouterr().err)
    assert "--ray-address auto: no running Ray cluster was found on this machine; start one with `ray start" in line
    assert not runs.exists()


# ---------------------------------------------------------------------------------------- the start-up probe
def _report(node: str, **versions: str | None) -> Any:
    from perbench.runner.cluster import NodeReport

    base: dict[str, str | None] = {"perbench": "0.1.0", "perbench source": "abc", "torch": "2.13.0"}
    return NodeReport(node, "host-" + node, {**base, **versions}, "CPU only")


def test_the_probe_names_a_node_whose_versions_differ() -> None:
    from perbench.runner.cluster import ClusterError, check_nodes, local_report

    driver = local_report()  # the driver's own versions, by the code the nodes run
    assert driver.versions["perbench"] and driver.versions["torch"] and driver.versions["perbench source"]
    assert driver.error == ""
    check_nodes(driver, [local_report()])  # a node like the driver passes
    same, other = _report("aaaaaaaaaaaaaaaa"), _report("bbbbbbbbbbbbbbbb", torch="2.12.1", transformers="5.0")
    ref = _report("driver", transformers=None)  # what the driver lacks is not asked of a node
    check_nodes(ref, [same, _report("c", transformers="4.0")])
    with pytest.raises(ClusterError) as e:
        check_nodes(ref, [same, other])
    text = str(e.value)
    assert "node bbbbbbbbbbbb (host-bbbbbbbbbbbbbbbb) has torch 2.12.1 (driver: 2.13.0)" in text
    assert "aaaaaaaaaaaa" not in text and "torch==2.13.0" in text and "no unit was run" in text
    with pytest.raises(ClusterError, match=r"node c \(host-c\) has perbench source def \(driver: abc\)"):
        check_nodes(ref, [_report("c", **{"perbench source": "def"})])
    missing = _report("d", perbench=None)
    with pytest.raises(ClusterError, match=r"node d \(host-d\) cannot import perbench \(not installed\)"):
        check_nodes(ref, [missing])


def test_a_node_without_perbench_stops_the_run_before_any_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nodes, the second without perbench: the probe (sent by value) still answers there and names it; one
    line, exit 2, no run directory, no unit run."""
    pytest.importorskip("ray")
    from tests.ray_cluster import LocalCluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config, runs = write_run(tmp_path)
    with LocalCluster([tmp_path / "runs"], nodes=2, cpus=1, without_perbench=(1,)) as cluster:
        import ray

        bad = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != _head_id(ray, cluster))
        capsys.readouterr()
        assert main(["run", str(config)]) == 2
        line = one_error(capsys.readouterr().err)
    assert f"node {bad[:12]} (" in line and "cannot import perbench (ModuleNotFoundError: No module named" in line
    assert "remove the node from the cluster; no unit was run" in line
    assert not runs.exists()


def _head_id(ray: Any, cluster: Any) -> str:
    """The head's node id: the node whose raylet runs in the head's temp folder."""
    head = str(cluster.root / "rt0")
    return next(str(n["NodeID"]) for n in ray.nodes() if str(n.get("ObjectStoreSocketName", "")).startswith(head))


# ---------------------------------------------------------------------------------------- mid-run
def test_a_lost_head_is_one_line_that_says_a_rerun_resumes(tmp_path: Path, tiny_pool: Path) -> None:  # noqa: F811
    """``perbench run --ray-address`` in its own process; the head leaves while a unit runs: one error line that
    says a rerun resumes, exit 2, well before Ray's own minute."""
    pytest.importorskip("ray")
    from tests.ray_cluster import LocalCluster

    cfg = {
        "benchmark": {"name": "rubrics", "pool": str(tiny_pool)},
        "policy": "tiny-random",
        "rm_backbone": "tiny-random",
        "methods": ["global_bt", "mpu"],
        "decoders": ["zero_shot", {"name": "best_of_n", "n": 2}],
        "bertscore": False,
        "max_new_tokens": 12,
        "max_test_prompts": 2,
        "max_gen_users": 2,
        "bootstrap": 20,
        "out_dir": str(tmp_path / "runs"),
        "device": "cpu",
        "executor": "ray",
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PERBENCH_QUIET": "1"}
    env.pop("RAY_ADDRESS", None)
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    with LocalCluster([], nodes=1, cpus=2, connect=False) as cluster:
        cmd = [sys.executable, "-m", "perbench.cli", "run", str(path), "--ray-address", cluster.address]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if [t for _, t in cluster.busy_workers().values() if "probe" not in t]:  # a unit, not the probe
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
        cluster.leave(0)
        t = time.monotonic()
        try:
            out, err = proc.communicate(timeout=50)
        finally:
            proc.kill()
        waited = time.monotonic() - t
    assert proc.returncode == 2, err
    assert "(raylet" not in out and "[state-dump]" not in out, out  # the messages Ray publishes to the driver
    line = one_error(err)
    assert f"--ray-address {cluster.address}: " in line and "rerun the same command to resume" in line
    assert waited < 45


def test_rays_output_to_the_driver_goes_to_a_file_not_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the cluster publishes to the driver (a raylet's ``[state-dump]`` lines when its node is lost), which
    Ray prints to stdout, and Ray's loggers' lines, which it prints to stderr, go to the driver's log file while
    connected; Ray's own printing comes back once the driver leaves."""
    pytest.importorskip("ray")
    import logging

    from ray._private import worker

    from perbench.runner.ray_output import RayOutput

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # no Ray session: the file goes to the temp folder
    before = worker.print_to_stdstream, list(logging.getLogger("ray").handlers)
    output = RayOutput()
    output.install()
    try:
        # as Ray's listener thread prints a published message, and as its worker module logs a lost connection
        worker.print_to_stdstream({"lines": ["[state-dump] NodeManager:"], "pid": "raylet", "is_err": False}, False)
        logging.getLogger("ray._private.worker").error("listen_error_messages: connection lost")
    finally:
        output.restore()
    assert capsys.readouterr() == ("", "")
    kept = (tmp_path / RayOutput.NAME).read_text()
    assert "(raylet) [state-dump] NodeManager:" in kept and "listen_error_messages: connection lost" in kept
    assert (worker.print_to_stdstream, logging.getLogger("ray").handlers) == before


# ---------------------------------------------------------------------------------------- while units run
def test_progress_text_counts_done_running_pending_by_kind() -> None:
    from perbench.runner.plan import Unit
    from perbench.runner.unit_progress import UnitProgress

    fit = Unit("fit", "m", "k1")
    feats = Unit("features", "train", "k0")
    up = Unit("upstream", "m", "k2", deps=("k1", "k0"))
    bar = UnitProgress([feats, fit, up])
    assert bar.text([feats, fit, up]) == "done 0 | running features 1 fit 1 | pending upstream 1"
    bar.finished(feats, [fit, up])
    assert bar.text([fit, up]) == "done features 1 | running fit 1 | pending upstream 1"
    bar.finished(fit, [up])
    assert bar.text([up]) == "done features 1 fit 1 | running upstream 1 | pending 0"
    bar.close()


def test_a_unit_takes_the_threads_of_its_num_cpus() -> None:
    from perbench.runner.executors import threads_of
    from perbench.runner.plan import Unit, needs_of

    def unit(cpus: float) -> Unit:
        return Unit("fit", "m", "k", needs=needs_of("fit", {"fit": {"num_cpus": cpus}}, cuda=False))

    assert [threads_of(unit(c)) for c in (0.5, 1, 3, 8)] == [1, 1, 3, 8]


def test_a_linear_heads_fit_does_not_depend_on_the_callers_threads() -> None:
    """global_bt's L-BFGS fit runs single-threaded whatever the process's thread count (a Ray worker's 1, a local
    run's 2): with two threads its matrix-vector products sum in another order and 200 steps carry that into the
    weights (about 1e-6 here, 1e-2 in the bundled default's scores)."""
    import numpy as np
    import torch

    from perbench.rewards.global_bt import fit_linear_bt

    diff = np.random.default_rng(0).normal(size=(900, 576)).astype(np.float32)
    before = torch.get_num_threads()
    try:
        weights = []
        for n in (1, 2):
            torch.set_num_threads(n)
            weights.append(fit_linear_bt(diff))
            assert torch.get_num_threads() == n  # restored
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(weights[0], weights[1])


def test_a_units_numbers_do_not_depend_on_the_threads_that_computed_it(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ray task computes a unit with its ``num_cpus`` threads (1), the local executor with every core (2 here):
    the unit's stored values are the same bits either way (``perbench.BLAS_ENV``). The backbone is wide enough
    (hidden 512, MLP 1024) that MKL splits its products by thread: under ``MKL_CBWR=AUTO`` (no policy) the
    features below differ in the 5th digit."""
    import torch

    from perbench.runner.executors import compute_unit, threads_of
    from perbench.runner.state import RunState, load_benchmark
    from perbench.runner.stores import Handed, Stores
    from perbench.runner.work import Work
    from tests.test_end_to_end import tiny_config
    from tests.test_thin_driver import save_tiny

    monkeypatch.setenv("PERBENCH_QUIET", "1")
    folder = save_tiny(tmp_path / "wide", hidden=512, layers=1)
    cfg = tiny_config(tiny_pool, tmp_path).override(
        policy=str(folder), rm_backbone=str(folder), methods=["global_bt"], decoders=[], bertscore=False
    )
    state = RunState(cfg, None, load_benchmark(cfg), Stores.in_memory())
    state.load_models()
    work = Work(state, state.method_handles())
    unit = next(u for u in work.plan().units if u.kind == "features" and not u.deps)
    assert threads_of(unit) == 1
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the local run: every core of this machine
        work.execute(unit)
        marker = state.stores.finished(unit)
        assert marker is not None
        local = state.stores.read({name: set(keys) for name, keys in marker["entries"].items()})

        def nothing_handed(key: str) -> Any:
            raise AssertionError(f"a features unit reads no other unit's result ({key})")

        remote = compute_unit(state.worker_config(), state.bench, unit, threads_of(unit), Handed({}, nothing_handed))
    finally:
        torch.set_num_threads(before)
    assert remote.entries.keys() == local.keys() and remote.entries["features"]
    for name, values in local.items():
        assert remote.entries[name] == values, name


def test_memory_no_node_has_is_a_config_error() -> None:
    from perbench.errors import ConfigError
    from perbench.runner.executors import check_feasible
    from perbench.runner.plan import Unit, needs_of

    nodes = [{"Alive": True, "Resources": {"CPU": 4.0, "memory": 16 * 2**30}}]
    fine = Unit("rl", "x", "k", needs=needs_of("rl", {"rl": {"memory_gb": 12}}, cuda=False))
    check_feasible([fine], nodes)
    huge = Unit("rl", "x", "k", needs=needs_of("rl", {"rl": {"memory_gb": 1000}}, cuda=False))
    with pytest.raises(
        ConfigError,
        match=r"resources\.rl: a rl unit \(rl:x\) needs 1 CPU\(s\), 0 GPU\(s\) and "
        r"1000 GB of memory, but no node .* 16\.0 GB\); lower resources\.rl",
    ):
        check_feasible([huge], nodes)


def test_rays_errors_mid_run_are_one_perbench_error_that_says_a_rerun_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ray")
    from ray import exceptions as rex

    from perbench.errors import ConfigError
    from perbench.runner.cluster import ClusterError, explain

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    crashed = explain(rex.WorkerCrashedError(), "fit:mpu")
    assert isinstance(crashed, ClusterError)
    assert str(crashed).startswith("--ray-address 10.0.0.1:6379: unit fit:mpu failed in Ray (The worker died")
    node = explain(rex.NodeDiedError("node 1 died"), "generate:args[mpu]")
    assert isinstance(node, ClusterError) and "was lost with a node of the cluster (node 1 died)" in str(node)
    for e in (crashed, node):
        assert str(e).endswith("the units finished so far are stored; rerun the same command to resume")
        assert "\n" not in str(e)
    # a unit that raised perbench's own error fails the run with that error; anything else is not Ray's
    mine = ConfigError("benchmark.pool: no such file")
    assert explain(rex.RayTaskError("run_unit", "Traceback ...", mine), "fit:mpu") is mine
    missing = explain(rex.RayTaskError("run_unit", "Traceback ...", ModuleNotFoundError("No module named 'x'")), "u")
    assert isinstance(missing, ClusterError) and "install perbench there or remove the node" in str(missing)
    assert explain(ValueError("a bug"), "fit:mpu") is None

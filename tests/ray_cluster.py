"""A Ray cluster of several nodes on one machine, each node sharing no folder with the driver.

Every node is a ``ray start --block`` process of its own (the first one the head), with its own Ray temp dir, its
own working directory and its own ``PERBENCH_CACHE``; :meth:`LocalCluster.leave` takes one node away mid-run.
Each worker process installs :func:`forbid_driver_files`, an audit hook that fails any open, listing, folder
creation or SQLite connection under the folders the cluster was told belong to the driver, so a run on it
proves that workers need no shared disk. Everything it starts is stopped by process id (never ``ray stop``,
which would stop every Ray instance on the machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parent.parent
#: the folders a worker must never touch (``os.pathsep``-separated), set in every node's environment
FORBIDDEN = "PERBENCH_TEST_DRIVER_DIRS"
#: names the cluster's processes (``<root>:<node>``), so that none is left behind
TAG = "PERBENCH_TEST_RAY_NODE"
#: set on a node whose workers must not find perbench (a node it was never installed on)
NO_PERBENCH = "PERBENCH_TEST_NO_PERBENCH"
_EVENTS = ("open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rename", "sqlite3.connect")


class _NoPerbench:
    """A meta-path finder that refuses perbench, as on a node where it is not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "perbench" or name.startswith("perbench."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def forbid_driver_files() -> None:
    """A Ray worker's setup hook: an audit hook that raises on any file access under the driver's folders (and,
    on a node marked ``NO_PERBENCH``, an import system without perbench)."""
    if os.environ.get(NO_PERBENCH) == "1":
        sys.meta_path.insert(0, _NoPerbench())  # type: ignore[arg-type]
    roots = [r for r in os.environ.get(FORBIDDEN, "").split(os.pathsep) if r]

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in _EVENTS and args and isinstance(args[0], str | os.PathLike):
            path = os.path.abspath(os.fspath(args[0]))
            if any(path == r or path.startswith(r + os.sep) for r in roots):
                raise PermissionError(f"a Ray worker touched the driver's files: {event} {path}")

    if roots:
        sys.addaudithook(hook)


def _ray() -> str:
    return str(Path(sys.executable).with_name("ray"))


class LocalCluster:
    """``nodes`` Ray nodes of ``cpus`` CPUs each on this machine; ``driver_dirs`` are off limits to their workers."""

    def __init__(
        self,
        driver_dirs: list[Path],
        nodes: int = 2,
        cpus: int = 1,
        without_perbench: tuple[int, ...] = (),
        connect: bool = True,
    ) -> None:
        """``without_perbench``: nodes whose workers cannot import perbench; ``connect``: this process joins the
        cluster (False: another process, e.g. ``perbench run --ray-address``, is the only driver)."""
        # short paths: Ray's socket paths must stay under the OS limit (107 bytes)
        self.root = Path(tempfile.mkdtemp(prefix="pbray-", dir="/tmp"))
        self.driver_dirs = [str(Path(d).resolve()) for d in driver_dirs]
        self.n, self.cpus = nodes, cpus
        self.without_perbench, self.connect = without_perbench, connect
        self.procs: list[subprocess.Popen[bytes]] = []
        self.address = ""

    def node_dir(self, i: int) -> Path:
        return self.root / f"n{i}"

    def _env(self, i: int) -> dict[str, str]:
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
        return {
            **os.environ,
            "PYTHONPATH": path,  # the setup hook is imported before the driver's sys.path reaches the worker
            "PERBENCH_CACHE": str(self.node_dir(i) / "cache"),
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            FORBIDDEN: os.pathsep.join(self.driver_dirs),
            TAG: f"{self.root}:{i}",
            NO_PERBENCH: "1" if i in self.without_perbench else "0",
        }

    def _start(self, i: int) -> None:
        d = self.node_dir(i)
        (d / "cache").mkdir(parents=True)
        models = Path(os.environ.get("PERBENCH_CACHE", "")) / "models"
        if models.is_dir():  # converted weights, as a node keeps its own (never a run's or the driver's stores)
            (d / "cache" / "models").symlink_to(models.resolve(), target_is_directory=True)
        where = ["--head", "--port=0", "--include-dashboard=false"] if i == 0 else [f"--address={self.address}"]
        cmd = [_ray(), "start", "--block", *where, f"--num-cpus={self.cpus}", "--num-gpus=0"]
        cmd += ["--object-store-memory=300000000", f"--temp-dir={self.root / f'rt{i}'}", "--disable-usage-stats"]
        log = open(self.root / f"node{i}.log", "wb")  # noqa: SIM115 - kept open by the node's process
        self.procs.append(subprocess.Popen(cmd, cwd=d, env=self._env(i), stdout=log, stderr=subprocess.STDOUT))

    def start(self, timeout: float = 120.0) -> str:
        """Start the nodes; the head's address once every node has joined."""
        import ray

        deadline = time.monotonic() + timeout
        self._start(0)
        current = self.root / "rt0" / "ray_current_cluster"
        while not (current.exists() and current.read_text().strip()):
            self._check(deadline)
            time.sleep(0.1)
        self.address = current.read_text().strip()
        for i in range(1, self.n):
            self._start(i)
        ray.init(
            address=self.address,
            log_to_driver=False,
            runtime_env={"worker_process_setup_hook": f"{__name__}.forbid_driver_files"},
        )
        while len([n for n in ray.nodes() if n["Alive"]]) < self.n:
            self._check(deadline)
            time.sleep(0.2)
        if not self.connect:
            ray.shutdown()
        return self.address

    def _check(self, deadline: float) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                raise RuntimeError(f"Ray node {i} exited ({p.returncode}): {self.log(i)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray cluster did not start in time: {self.log(0)}")

    def log(self, i: int) -> str:
        return (self.root / f"node{i}.log").read_text(errors="replace")[-2000:]

    def node_of(self, pid: int) -> int | None:
        """The node a process of this cluster belongs to (None: not one of its processes)."""
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return None
        prefix = f"{TAG}={self.root}:".encode()
        tag = next((e for e in env if e.startswith(prefix)), None)
        return None if tag is None else int(tag[len(prefix) :])

    def busy_workers(self) -> dict[int, tuple[int, str]]:
        """Worker processes of this cluster computing a perbench unit: pid -> (node, the unit's task name)."""
        out = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith("ray::perbench:"):
                node = self.node_of(int(d.name))
                if node is not None:
                    out[int(d.name)] = (node, cmd.strip())
        return out

    def leave(self, i: int) -> None:
        """Node ``i`` leaves the cluster (its ``ray start`` is stopped, and with it its raylet and workers)."""
        p = self.procs[i]
        p.send_signal(signal.SIGTERM)
        p.wait(60)

    def stop(self) -> None:
        """Disconnect, stop every node (the head last), then kill any process of the cluster still running."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and self.node_of(int(d.name)) is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(d.name), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

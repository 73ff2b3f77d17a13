"""Process isolation for a third-party reward model: fitted, adapted and scored in a child process.

``{name: isolated, method: "my_pkg.rm:MyRM", params: {...}}`` (or a registered method's name) runs the method in a
fresh Python process that receives only what a method may see -- the sealed pairs (opaque ids, no pair metadata,
see :mod:`perbench.data.isolation`), the users' views, and the items to score -- over a pipe. Inside a run the
grader's records (users with their answer keys, the pool's labels, the id map) live in the parent process, so the
routes that in-process code always has -- walking ``gc`` or stack frames, reading the runner's objects -- reach
nothing. The child starts in an empty working folder with ``PERBENCH_CACHE`` pointing at an empty folder (not the
run's caches), and importing perbench's benchmark, runner, metric and report modules fails there.

This is not a sandbox: the child runs with the user's permissions and can read any file it knows the path of.
It gets no feature extractor and no policy (``RMContext.features`` is None): a method that needs the run's
backbone loads its own model, and scores whole responses only (no per-prefix rewards, so no guided decoding by
token and no policy accuracy).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import os
import pickle
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, ClassVar

import numpy as np

from perbench.data.records import PreferencePair
from perbench.errors import PerbenchError
from perbench.rewards.base import FeatureRM, RewardModel, RMContext, ScoreItem

#: modules a child may not import: they define benchmarks, hold the grader's code or read runs
BLOCKED: tuple[str, ...] = (
    "perbench.data.rubrics",
    "perbench.data.benchmarks",
    "perbench.data.loading",
    "perbench.data.loaders",
    "perbench.runner",
    "perbench.metrics",
    "perbench.report",
    "perbench.cli",
)
_HEADER = struct.Struct("!Q")

if TYPE_CHECKING:
    from perbench.config import RunConfig


class IsolatedError(PerbenchError, RuntimeError):
    """An isolated method that failed: the message names the method and the call (``fit``, ``score``, …);
    ``problem`` is what went wrong, without them."""

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


def _send(fh: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(_HEADER.pack(len(data)) + data)
    fh.flush()


def _recv(fh: IO[bytes]) -> Any:
    head = fh.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the isolated method's process closed its pipe")
    (n,) = _HEADER.unpack(head)
    return pickle.loads(fh.read(n))  # our own child's replies


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if any(fullname == b or fullname.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{fullname} is not importable by an isolated method")
        return None


def resolve(method: str) -> type[RewardModel]:
    """A method class from ``module:Class`` or a registered reward model's name."""
    if ":" in method:
        module, attr = method.split(":", 1)
        cls = getattr(importlib.import_module(module), attr)
    else:
        from perbench import registry

        cls = registry.reward_models.get(method)
    if not (isinstance(cls, type) and issubclass(cls, RewardModel)):
        raise TypeError(f"{method!r} is not a RewardModel class")
    if issubclass(cls, FeatureRM):
        raise TypeError(
            f"{method!r} reads the run's backbone features (a FeatureRM), which an isolated process does not get; "
            "run it as a plain method, or load its own model inside the class"
        )
    return cls


_PROBED: dict[str, str | None] = {}


def probe(method: str, params: dict[str, Any] | None = None) -> str | None:
    """What stops ``method`` from running isolated (its module does not import, the class is no ``RewardModel``
    or reads the run's features, its constructor refuses ``params``), found by starting the child once and
    making the method there; None when it starts. Remembered per method and parameters for this process."""
    key = repr((method, sorted((params or {}).items())))
    if key not in _PROBED:
        rm = Isolated(method, params)
        try:
            rm._start()
            _PROBED[key] = None
        except IsolatedError as e:
            _PROBED[key] = e.problem
        finally:
            rm.close()
    return _PROBED[key]


def check_isolated(cfg: RunConfig) -> None:
    """The preflight's probe of each isolated method in ``cfg.methods`` (:func:`probe`): a method that cannot
    start is a ``ConfigError`` at its line, before any data or model loads."""
    for i, m in enumerate(cfg.methods):
        if m.name != Isolated.name or not isinstance(m.params.get("method"), str):
            continue
        problem = probe(m.params["method"], m.params.get("params"))
        if problem is not None:
            raise cfg.locate("methods", i).error(f"isolated method {m.params['method']}: cannot start: {problem}")


class Isolated(RewardModel):
    """A reward model run in a child process (see the module docstring)."""

    name: ClassVar[str] = "isolated"

    def __init__(self, method: str, params: dict[str, Any] | None = None) -> None:
        if not isinstance(method, str) or not method:
            raise ValueError("isolated: name the method to run ('module:Class' or a registered name)")
        super().__init__(method=method, params=dict(params or {}))
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def _call(self, op: str, *args: Any) -> Any:
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        try:
            _send(self._proc.stdin, (op, args))
            ok, value = _recv(self._proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as e:
            raise self._error(op, self._exited(e)) from None
        if not ok:
            raise self._error(op, str(value) if op == "init" else f"raised {value}")
        return value

    def _error(self, op: str, problem: str) -> IsolatedError:
        call = "cannot start" if op == "init" else op
        return IsolatedError(f"isolated method {self.params['method']}: {call}: {problem}", problem)

    def _exited(self, e: BaseException) -> str:
        """Why the child stopped answering: its exit code (its own output went to stderr, above)."""
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            return f"its process stopped answering ({e}); killed it"
        self._proc = None
        what = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return f"its process exited ({what}) before replying; its own messages, if any, are on stderr above"

    def _start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="perbench-isolated-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERBENCH_")}
        env["PERBENCH_CACHE"] = os.path.join(self._tmp.name, "cache")
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "perbench.rewards.isolated"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self._tmp.name,
            env=env,
        )
        self._call("init", self.params["method"], self.params["params"])

    def close(self) -> None:
        if self._proc is not None:
            proc = self._proc
            with contextlib.suppress(EOFError, OSError, RuntimeError):
                self._call("close")
            proc.wait(timeout=30)
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __del__(self) -> None:
        if getattr(self, "_proc", None) is not None:
            self._proc.kill()  # type: ignore[union-attr]

    def fit(self, pairs: Sequence[PreferencePair], ctx: RMContext) -> None:
        child = RMContext(seed=ctx.seed, extra={"users": dict(ctx.extra.get("users", {}))})
        self._call("fit", list(pairs), child)

    def adapt(self, user_id: str, shots: Sequence[PreferencePair]) -> None:
        self._call("adapt", user_id, list(shots))

    def score(self, items: Sequence[ScoreItem]) -> np.ndarray:
        out = np.asarray(self._call("score", list(items)), dtype=np.float64)
        if out.shape != (len(items),):
            got = "a scalar" if out.ndim == 0 else f"an array of shape {out.shape}"
            raise self._error("score", f"returned {got} for {len(items)} items; return one number per item")
        return out

    def state(self) -> dict[str, np.ndarray]:
        return dict(self._call("state"))

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self._call("load_state", dict(state))


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The child's loop: one request, one reply ``(ok, value)``, until ``close``."""
    sys.meta_path.insert(0, _Blocker())
    for name in [m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED)]:
        del sys.modules[name]
    rm: RewardModel | None = None
    while True:
        try:
            op, args = _recv(inp)
        except EOFError:
            return
        try:
            if op == "close":
                _send(out, (True, None))
                return
            if op == "init":
                rm = resolve(args[0])(**args[1])
                value: Any = None
            elif rm is None:
                raise RuntimeError("no method (init first)")
            else:
                value = getattr(rm, op)(*args)
                if op == "score":
                    value = np.asarray(value, dtype=np.float64)
            _send(out, (True, value))
        except Exception as e:  # every failure goes back to the parent, which raises it
            _send(out, (False, f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the method's prints go to stderr, not into the pipe
    serve(sys.stdin.buffer, stdout)

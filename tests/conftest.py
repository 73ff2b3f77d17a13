from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("PERBENCH_QUIET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each test session gets its own cache: fits, features and sample pools left by an earlier session (or an
    older checkout) must not decide what a test sees. Only the converted model weights, which depend on nothing
    but the model file's digest, are shared with the user's cache."""
    from perbench.io import cache_dir

    user_cache = cache_dir()
    path = tmp_path_factory.mktemp("perbench-cache")
    (user_cache / "models").mkdir(exist_ok=True)
    (path / "models").symlink_to(user_cache / "models", target_is_directory=True)
    os.environ["PERBENCH_CACHE"] = str(path)
    return path


def empty_cache(path: Path) -> Path:
    """A new cache folder at ``path`` that shares only the converted model weights with the session's cache: a test
    that counts what a run computes must not find units another test left in the shared unit cache."""
    path.mkdir(parents=True)
    (path / "models").symlink_to(Path(os.environ["PERBENCH_CACHE"]) / "models", target_is_directory=True)
    return path


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own cache (see :func:`empty_cache`), as ``PERBENCH_CACHE``."""
    path = empty_cache(tmp_path / "own-cache")
    monkeypatch.setenv("PERBENCH_CACHE", str(path))
    return path


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures("one_thread")``): tiny-model
    tests that compare exact tokens or rewards run them single-threaded."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_lm():  # type: ignore[no-untyped-def]
    from perbench.models.loader import load_lm

    return load_lm("tiny-random:0", device="cpu")


@pytest.fixture(scope="session")
def tiny_lm_b():  # type: ignore[no-untyped-def]
    from perbench.models.loader import load_lm

    return load_lm("tiny-random:1", device="cpu")


@pytest.fixture
def store(tmp_path):  # type: ignore[no-untyped-def]
    from perbench.cache import Store

    return Store(tmp_path / "features.sqlite")


def random_linear_rm(extractor, seed: int = 0, scale: float = 1.0):  # type: ignore[no-untyped-def]
    """A GlobalBT with a random direction (no training) bound to ``extractor``."""
    from perbench.rewards.global_bt import GlobalBT

    rm = GlobalBT()
    rng = np.random.default_rng(seed)
    d = extractor.dim
    rm.load_state(
        {
            "w": (scale * rng.standard_normal(d)).astype(np.float32),
            "mu": np.zeros(d, np.float32),
            "sd": np.ones(d, np.float32),
        }
    )
    rm.bind(extractor)
    return rm


#: the browser binaries the layout tests can drive (Debian's, Chrome's, Chromium's upstream names)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """A headless Chromium or Chrome binary on PATH (``PERBENCH_CHROMIUM`` names another), or None."""
    named = os.environ.get("PERBENCH_CHROMIUM")
    if named:
        found = shutil.which(named)
        if not found:
            pytest.fail(f"PERBENCH_CHROMIUM={named!r} is not an executable on PATH")
        return found
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


#: why the layout tests are skipped on a machine without a browser
NO_BROWSER = (
    "no headless Chromium on PATH (looked for " + ", ".join(BROWSERS) + "): the report's layout tests need one; "
    "install it (Debian: `apt-get install -y chromium`; `.ci/run` does so as root) or set PERBENCH_CHROMIUM"
)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser the report's layout tests drive (:func:`find_browser`). The tests never install one: `.ci/run`
    does (``apt-get install -y chromium`` where it runs as root on Debian); without one they are skipped, saying
    why."""
    found = find_browser()
    if found is None:
        pytest.skip(NO_BROWSER)
    return found

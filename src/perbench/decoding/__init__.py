"""Decoders: zero-shot (greedy/sampled) and reward-guided decoding, all batched over prompts."""

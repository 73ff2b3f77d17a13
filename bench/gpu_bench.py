"""The steps of ``bench/gpu.sh``, each adding its figures to one JSON file, and the page they make.

    python bench/gpu_bench.py anchors    --figures F [--device cuda] [--smoke]
    python bench/gpu_bench.py shapes     --figures F [--device cuda] [--smoke]
    python bench/gpu_bench.py run NAME   --figures F --out-dir D [--set KEY=VALUE ...] [--rerun]
    python bench/gpu_bench.py render     --figures F --out docs/benchmarks-gpu.md

- ``anchors``: what the plain libraries do on this device, the figures perbench's own are read against: ``transformers``
  ``generate`` (greedy, 64-token prompts, 56 new tokens) at batch 64 / 256 / 1,024 and a bf16 forward (192 tokens)
  at batch 16 / 256, on SmolLM2-135M-shaped random weights;
- ``shapes``: the same generation and forward on random-weight Llama-3.2-1B- and Llama-3.1-8B-shaped models (the
  real models' shapes, hence their FLOPs per token; random weights, labelled as such);
- ``run``: ``perbench.run`` of an embedded config in this process (from an empty cache when ``PERBENCH_CACHE`` is
  empty), its wall time, its phases (results.json ``timing_s``) and the peak GPU memory
  (``torch.cuda.max_memory_allocated``); ``--rerun`` runs it again and records the rerun beside it;
- ``render``: the page, each figure beside its anchor, every figure this run did not produce marked "not measured".

``--smoke`` shrinks every shape to tiny sizes, so the whole script is exercised on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

#: (hidden, layers, heads, kv heads, intermediate, vocab) of the shapes measured
SHAPES: dict[str, tuple[int, int, int, int, int, int]] = {
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152),
    "llama-3.2-1b": (2048, 16, 32, 8, 8192, 128256),
    "llama-3.1-8b": (4096, 32, 32, 8, 14336, 128256),
    "tiny": (64, 2, 4, 2, 128, 512),
}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _save(path: Path, key: str, value: Any) -> None:
    figs = _load(path)
    figs[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figs, indent=2))


def _model(shape: str, device: str) -> Any:
    """A random-weight Llama of ``shape`` in bf16 (fp32 on a CPU), built without a slow initialisation."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv, inter, vocab = SHAPES[shape]
    cfg = LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=shape == "smollm2-135m",
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device=device).to(dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    with torch.device(device):  # the rotary buffers were left empty on meta: made again on the device
        model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    return model.eval()


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def generate_tps(model: Any, batch: int, device: str, prompt: int = 64, new: int = 56) -> float:
    """Greedy ``generate`` tokens per second (new tokens of every row), the second of two calls."""
    import torch

    ids = torch.randint(3, model.config.vocab_size, (batch, prompt), device=device)
    mask = torch.ones_like(ids)
    for _ in range(2):
        _sync(device)
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=0,
            )
        _sync(device)
        dt = time.perf_counter() - t
    return batch * new / dt


def forward_tps(model: Any, batch: int, device: str, seq: int = 192) -> float:
    """One forward's tokens per second (the last position's logits), median of three after a warm-up."""
    import torch

    ids = torch.randint(3, model.config.vocab_size, (batch, seq), device=device)
    times = []
    with torch.no_grad():
        for _ in range(4):
            _sync(device)
            t = time.perf_counter()
            model(input_ids=ids, logits_to_keep=1)
            _sync(device)
            times.append(time.perf_counter() - t)
    return batch * seq / sorted(times[1:])[1]


def _speeds(shape: str, device: str, gen_batches: list[int], fwd_batches: list[int]) -> dict[str, Any]:
    import torch

    model = _model(shape, device)
    out: dict[str, Any] = {"shape": shape, "weights": "random (the real model's shape: its FLOPs per token)"}
    out["generate_tok_s"] = {str(b): round(generate_tps(model, b, device), 1) for b in gen_batches}
    out["forward_tok_s"] = {str(b): round(forward_tps(model, b, device), 1) for b in fwd_batches}
    if device.startswith("cuda"):
        out["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def anchors(args: argparse.Namespace) -> None:
    shape = "tiny" if args.smoke else "smollm2-135m"
    gens, fwds = ([2, 4], [2]) if args.smoke else ([64, 256, 1024], [16, 256])
    _save(args.figures, "anchors", _speeds(shape, args.device, gens, fwds))


def shapes(args: argparse.Namespace) -> None:
    out = {}
    for shape, gen_batches in (("llama-3.2-1b", [64, 256, 1024]), ("llama-3.1-8b", [64, 256])):
        gens, fwds = ([2], [2]) if args.smoke else (gen_batches, [16, 256])
        out[shape] = _speeds("tiny" if args.smoke else shape, args.device, gens, fwds)
    _save(args.figures, "shapes", out)


def run(args: argparse.Namespace) -> None:
    import torch
    import yaml

    from perbench.api import run as perbench_run
    from perbench.cli.shared import config_path

    changes = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    record: dict[str, Any] = {}
    for label in ("first", "rerun") if args.rerun else ("first",):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        result = perbench_run(config_path(args.name), out_dir=str(args.out_dir), **changes)
        wall = time.perf_counter() - t
        res = result.results
        record[label] = {
            "wall_s": round(wall, 1),
            "timing_s": res.get("timing_s"),
            "units": (res.get("work") or {}).get("units"),
            "derived": (res.get("work") or {}).get("derived"),
            "batching": res.get("batching"),
            "peak_gpu_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None,
            "run_dir": str(result.run_dir),
        }
    _save(args.figures, f"run:{args.name}", record)


#: the figures measured once on an offline H200 before this page's code (bf16, torch 2.11, transformers 5.25): what
#: each figure of a run of ``bench/gpu.sh`` stands beside
BEFORE: dict[str, Any] = {
    "generate": {"8": 142, "64": 1232, "256": 4883, "1024": 19063},
    "forward": {"16": 157_000, "256": 689_000},
    "greedy": 305,  # perbench greedy at batch 8
    "args_over_greedy": 1.23,
    "pair_scoring": "90 pairs/s, 34k tok/s, 0.91× the sequence-classifier reference (batch 16)",
    "default": {
        "wall_s": 164,
        "rerun_s": 47,
        "peak_gpu_gb": 1.8,
        "phases": "benchmark 14.8, features 28.2, fits "
        "20.5, upstream 25.5, zero-shot 17.2, pool 19.8, analysis 9.2 (then the report)",
    },
    "llama-3.2-1b": {"generate": {"1024": 19446}, "forward": {"16": 162_000, "256": 207_000}},
    "decoders": "a traceback offline: GenARM's LoRA fit kernelized the model from the hub",
}
#: the figures key each step of ``bench/gpu.sh`` writes (a step that wrote its figures in a later run of the script
#: is no longer unfinished once the runs' figures are merged)
STEP_KEYS = {
    "environment": "environment",
    "anchors": "anchors",
    "suite": "suite",
    "default": "run:default",
    "scale": "run:scale",
    "decoders": "run:decoders",
    "shapes": "shapes",
}
NOT_YET = "not yet measured"


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return NOT_YET
    if isinstance(v, float | int):
        return f"{v:,.0f}{unit}" if abs(v) >= 100 else f"{v:,.2f}{unit}"
    return str(v)


def _run_rows(
    key: str,
    record: dict[str, Any] | None,
    before: dict[str, Any] | str | None,
    labels: tuple[str, ...] = ("first", "rerun"),
) -> list[str]:
    rows = []
    for label in labels:
        r = (record or {}).get(label) or {}
        phases = ", ".join(f"{k} {v}" for k, v in (r.get("timing_s") or {}).items()) or NOT_YET
        was = "n/a"
        if isinstance(before, str):
            was = before
        elif before:
            was = (
                f"{before['wall_s']} s; {before['phases']}; {before['peak_gpu_gb']} GB"
                if label == "first"
                else (f"{before['rerun_s']} s")
            )
        rows.append(
            f"| `{key}` ({'empty cache' if label == 'first' else 'rerun, every unit cached'}) | "
            f"{_fmt(r.get('wall_s'), ' s')} | {phases} | {_fmt(r.get('peak_gpu_gb'), ' GB')} | {was} |"
        )
    return rows


def merged(paths: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The figures of several runs of ``bench/gpu.sh`` (earliest first): a later run's figure replaces an earlier
    one's, and a step that finished in any run is not listed as unfinished. Also each run's environment."""
    out: dict[str, Any] = {}
    unfinished: dict[str, str] = {}
    envs = []
    for path in paths:
        figs = _load(path)
        if figs.get("environment"):
            envs.append(figs["environment"])
        unfinished.update(figs.get("unfinished") or {})
        for key, value in figs.items():
            if key != "unfinished":
                out[key] = value
    done = {step for step, key in STEP_KEYS.items() if key in out}
    out["unfinished"] = {k: v for k, v in unfinished.items() if k not in done}
    return out, envs


def render(args: argparse.Namespace) -> None:
    """The figures as a page beside the figures measured before (:data:`BEFORE`); a figure these runs did not produce
    says "not yet measured", never an estimate. ``--merge``: earlier runs' figures files, under this one's."""
    figs, envs = merged([*args.merge, args.figures])
    where = (
        "; ".join(
            f"{e.get('gpu') or 'no GPU yet'}, {e.get('date', 'no date')} (torch {e.get('torch', '-')}, transformers "
            f"{e.get('transformers', '-')})"
            for e in envs
        )
        or "no GPU yet"
    )
    lines = [
        "# perbench on a GPU",
        "",
        "Written by `bench/gpu.sh` (`bench/gpu_bench.py render`); the figures of one run of it, on one machine, beside",
        'those measured once before on an offline H200 ("before": bf16, torch 2.11, transformers 5.25). A figure',
        'the run did not produce says "not yet measured": it is never replaced by an estimate.',
        "",
        f"{'These runs' if len(envs) > 1 else 'This run'}: {where}.",
        "",
        "## Plain-library anchors (SmolLM2-135M-shaped random weights, same GPU, same run)",
        "",
        "| what | batch | tokens/s, this run | before (H200) |",
        "|---|---:|---:|---:|",
    ]
    a = figs.get("anchors") or {}
    for b in ("64", "256", "1024"):
        lines.append(
            f"| `generate`, greedy, 64-token prompts, 56 new tokens | {b} | "
            f"{_fmt((a.get('generate_tok_s') or {}).get(b))} | {_fmt(BEFORE['generate'].get(b))} |"
        )
    for b in ("16", "256"):
        lines.append(
            f"| bf16 forward, 192 tokens | {b} | {_fmt((a.get('forward_tok_s') or {}).get(b))} | "
            f"{_fmt(BEFORE['forward'].get(b))} |"
        )
    suite = figs.get("suite") or {}
    guided = suite.get("guided") or {}
    scoring = suite.get("rm_scoring") or {}
    rates = scoring.get("pairs_per_s") or {}
    lines += [
        "",
        "## perbench's speed pieces (`bench/suite.py --only guided,rm_scoring`, same GPU, same run)",
        "",
        "| piece | this run | before (H200) |",
        "|---|---:|---:|",
        f"| greedy decoding, tokens/s | {_fmt(guided.get('tokens_per_s_greedy'))} | {BEFORE['greedy']} (batch 8) |",
        f"| ARGS (shared backbone), tokens/s | {_fmt(guided.get('tokens_per_s_args_shared'))} | "
        f"{BEFORE['args_over_greedy']}× greedy |",
        f"| RM pair scoring, pairs/s | {', '.join(f'{k}: {_fmt(v)}' for k, v in rates.items()) or NOT_YET} | "
        f"{BEFORE['pair_scoring']} |",
        "",
        "## Runs: phases and peak GPU memory (`torch.cuda.max_memory_allocated`)",
        "",
        "| run | wall | phases (s, results.json `timing_s`) | peak GPU memory | before (H200) |",
        "|---|---:|---|---:|---|",
    ]
    lines += _run_rows("default", figs.get("run:default"), BEFORE["default"])
    lines += _run_rows("scale", figs.get("run:scale"), None, ("first",))
    lines += _run_rows("decoders", figs.get("run:decoders"), BEFORE["decoders"], ("first",))
    lines += [
        "",
        "`scale` is designed to finish within 8 minutes on one H200 from an empty cache. That is an estimate from its",
        'plan (`perbench.runner.estimate`, docs/benchmarks.md "What a run costs before it runs"), not a figure of',
        "this page: the row above is the measurement.",
    ]
    for key, why in (figs.get("unfinished") or {}).items():
        lines.append(f"\nStep `{key}` did not finish: {why}.")
    lines += [
        "",
        "## Larger shapes (random weights, the real models' shapes: the same FLOPs per token; not the real models)",
        "",
        "| shape | `generate` tokens/s (batch 64 / 256 / 1,024) | forward tokens/s (batch 16 / 256) | peak GPU memory "
        "| before (H200) |",
        "|---|---|---|---:|---|",
    ]
    shown = figs.get("shapes") or {}
    for shape in ("llama-3.2-1b", "llama-3.1-8b"):
        s = shown.get(shape) or {}
        batches = ("64", "256", "1024") if shape == "llama-3.2-1b" else ("64", "256")
        gen = " / ".join(_fmt((s.get("generate_tok_s") or {}).get(b)) for b in batches)
        fwd = " / ".join(_fmt((s.get("forward_tok_s") or {}).get(b)) for b in ("16", "256"))
        was = BEFORE.get(shape)
        was_text = (
            "n/a"
            if was is None
            else (f"generate 19,446 at batch 1,024; forward {was['forward']['16']:,} / {was['forward']['256']:,}")
        )
        lines.append(f"| {shape}-shaped | {gen} | {fwd} | {_fmt(s.get('peak_gpu_gb'), ' GB')} | {was_text} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


def environment(args: argparse.Namespace) -> None:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    _save(
        args.figures,
        "environment",
        {
            "gpu": gpu and f"one {gpu}",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["environment", "anchors", "shapes", "run", "render", "unfinished", "suite"])
    ap.add_argument("name", nargs="?", help="run: the embedded config; unfinished: the step; suite: its figures file")
    ap.add_argument("--figures", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes: every step in seconds, on a CPU too")
    ap.add_argument("--out-dir", type=Path, default=Path("runs/gpu-bench/runs"))
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks-gpu.md"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--why", default="")
    ap.add_argument("--merge", type=Path, action="append", default=[], help="render: an earlier run's figures file")
    args = ap.parse_args()
    if args.step == "unfinished":
        figs = _load(args.figures).get("unfinished") or {}
        _save(args.figures, "unfinished", {**figs, args.name: args.why})
    elif args.step == "suite":  # bench/suite.py's raw figures, under "suite"
        _save(args.figures, "suite", _load(Path(args.name)))
    else:
        {"environment": environment, "anchors": anchors, "shapes": shapes, "run": run, "render": render}[args.step](
            args
        )


if __name__ == "__main__":
    main()

"""The exported RM and the run's data frames, on a finished run directory (default: the default run's).

Measures, each in a fresh Python process so that imports and caches count as a user meets them:
``perbench export`` of one system (the backbone's weights never load: its fingerprint comes from results.json, the
shots' features from the feature cache), ``perbench.load_rm`` (wall time with and without importing torch, and
what it writes), and ``read_cells`` from Parquet against JSONL (size and time).

    python bench/perf_export.py RUN_DIR [--system LABEL]

The run directory is copied to a scratch folder first (export opens its unit store).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE_LOAD = """
import time, sys
t0 = time.perf_counter(); import torch, transformers, safetensors; t1 = time.perf_counter()
import perbench
rm = perbench.load_rm(sys.argv[1]); t2 = time.perf_counter()
print(round(t1 - t0, 2), round(t2 - t1, 2), len(rm.users))
"""

PROBE_CELLS = """
import time, sys, perbench
t = time.perf_counter(); c = perbench.read_cells(sys.argv[1]); print(round(time.perf_counter() - t, 2), len(c))
"""


def python(*args: str) -> str:
    return subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True).stdout.strip()


def write_parquet(run: Path) -> None:
    from perbench.runner.cells import Cells, read_cells

    cells = Cells("")
    cells.rows = read_cells(run / "cells.jsonl")
    results = json.loads((run / "results.json").read_text())
    results["cells"] = cells.record()
    (run / "results.json").write_text(json.dumps(results))
    (run / "cells.parquet").write_bytes(cells.parquet())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--system", default="pref")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / a.run_dir.name
        shutil.copytree(a.run_dir, run, ignore=shutil.ignore_patterns("plots", "report.html"))
        if not (run / "cells.parquet").is_file():  # a run from before Parquet: its cells as this version writes them
            write_parquet(run)
        out = Path(tmp) / "rm"
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "perbench", "export", str(run), "--system", a.system, "--out", str(out)], check=True
        )
        export_s = time.perf_counter() - t
        size = sum(f.stat().st_size for f in out.iterdir())
        imports, load, users = python("-c", PROBE_LOAD, str(out)).split()
        rows = [
            f"| `perbench export --system {a.system}` (a fresh process) | {export_s:.1f} s |",
            f"| export folder | {size / 2**20:.2f} MiB |",
            f"| `load_rm`, torch + transformers imported first | {load} s ({users} users with parameters) |",
            f"| importing torch + transformers | {imports} s |",
        ]
        for name in ("cells.jsonl", "cells.parquet"):
            f = run / name
            if f.is_file():
                rows.append(f"| {name} size | {f.stat().st_size / 2**20:.2f} MiB |")
        if (run / "cells.parquet").is_file():
            secs, n = python("-c", PROBE_CELLS, str(run)).split()
            rows.append(f"| `read_cells` from Parquet ({n} cells) | {secs} s |")
            (run / "cells.parquet").unlink()
        secs, n = python("-c", PROBE_CELLS, str(run)).split()
        rows.append(f"| `read_cells` from JSONL ({n} cells) | {secs} s |")
        print("| what | measured |\n|---|---:|\n" + "\n".join(rows))
        print(json.dumps({"export_s": round(export_s, 1), "load_s": float(load), "imports_s": float(imports)}))


if __name__ == "__main__":
    main()

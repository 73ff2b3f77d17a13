"""The report: a small synthetic run directory rendered to report.html, leaderboard.md and plots, then opened in
headless Chromium (installed from Debian when missing) to check it shows and that injected markup stays text."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from markupsafe import escape

from perbench.cli import main
from perbench.report.fmt import metric_label
from perbench.report.html import build_plots, render, write_report
from perbench.report.labels import shorten_text
from perbench.report.leaderboard import render_markdown
from perbench.runner.cells import cells_record

XSS_USER = "<img src=x onerror=\"document.title='pwned';document.body.setAttribute('data-pwned','1')\">"
XSS_TEXT = "<script>document.title='pwned';document.body.setAttribute('data-pwned','2')</script>Hello there."
XSS_METHOD = "evil<b onmouseover=alert(1)>"
USERS = [f"u{i}" for i in range(1, 8)] + [XSS_USER]
PROMPTS = [f"p{j}" for j in range(5)]
# true per-method quality: mpu clearly best downstream; length / random are the baselines; five deployable systems,
# the fewest a rank coefficient is reported over
QUALITY = {"global_bt": 0.45, "mpu": 0.9, "pal_b": 0.5, "vpl": 0.55, XSS_METHOD: 0.4, "length": 0.3, "random": 0.2}
ACCURACY = {"global_bt": 0.6, "mpu": 0.85, "pal_b": 0.65, "vpl": 0.62, XSS_METHOD: 0.55, "length": 0.5, "random": 0.5}


def make_cells(group: str, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []

    def add(method: str, metric: str, user: str, prompt: str, value: float) -> None:
        rows.append(
            {"group": group, "method": method, "metric": metric, "user": user, "prompt": prompt, "value": float(value)}
        )

    for m, acc in ACCURACY.items():
        for u in USERS:
            for p in PROMPTS:
                add(m, "rm_acc_seen", u, p, float(rng.random() < acc))
                # predictors of benchmark validity: one follows the downstream quality, one does not
                add(m, "rm_acc_pers_only", u, p, float(rng.random() < 0.3 + 0.6 * QUALITY[m]))
                add(m, "rm_acc_consensus", u, p, float(rng.random() < 0.5))
                if m not in ("length", "random"):
                    add(m, "fewshot_acc@1", u, p, float(rng.random() < acc - 0.1))
                    add(m, "fewshot_acc@4", u, p, float(rng.random() < acc))
    for m, q in QUALITY.items():
        for u in USERS:
            for p in PROMPTS:
                add(m, "best_of_n:rubric_satisfaction", u, p, np.clip(q + 0.05 * rng.standard_normal(), 0, 1))
                if m not in ("length", "random"):
                    add(m, "args:rubric_satisfaction", u, p, np.clip(q + 0.05 * rng.standard_normal(), 0, 1))
                    add(m, "args:rm_win", u, p, float(rng.random() < 0.7))
    for u in USERS:
        for p in PROMPTS:
            add("zero_shot", "zero_shot:rubric_satisfaction", u, p, np.clip(0.3 + 0.05 * rng.standard_normal(), 0, 1))
    return rows


def make_analysis(cells: list[dict[str, Any]]) -> dict[str, Any]:
    from perbench.metrics.analysis import analyze

    return analyze(cells, verdict_metric="args:rubric_satisfaction", n_boot=60, seed=0)


def make_results(bench: str, analysis: dict[str, Any]) -> dict[str, Any]:
    curve = {
        "n": [1, 2, 4],
        "quality": [0.4, 0.55, 0.7],
        "oracle": [0.4, 0.7, 0.9],
        "sample_mean": [0.4, 0.4, 0.4],
        "ci": [[0.3, 0.5], [0.45, 0.65], [0.6, 0.8]],
        "targets": 40,
    }
    return {
        "schema_version": 2,
        "created": "2026-01-01T00:00:00+00:00",
        "config": {"bootstrap": 60, "seed": 0},
        "config_hash": "abc<i>123</i>",
        "provenance": {
            "git": "deadbeef<script>x</script>",
            "python": "3.11",
            "seed": 0,
            "packages": {"numpy": "2.0"},
            "models": {
                "policy": {"name": "tiny<b>policy</b>", "fingerprint": "fp"},
                "rm_backbone": {"name": "tiny", "fingerprint": "fp"},
            },
        },
        "benchmark": {
            "name": bench,
            "pairs": 280,
            "users_seen": 8,
            "users_unseen": 0,
            "skipped": {"total": 0},
            "weighting": "pair",
        },
        "policies": {"ci": "two-way"},
        "upstream": {
            m: {
                "baseline": m in ("length", "random"),
                "rm_accuracy": {"seen": {"accuracy": a, "ci": [a - 0.1, a + 0.1]}, "all": {"accuracy": a, "ties": 0}},
                **(
                    {}
                    if m in ("length", "random")
                    else {"fewshot_curve": {"1": {"accuracy": a - 0.1, "ci": [a - 0.2, a]}, "4": {"accuracy": a}}}
                ),
            }
            for m, a in ACCURACY.items()
        },
        "downstream": {
            "zero_shot": {"rubric_satisfaction": {"mean": 0.3, "ci": [0.25, 0.35]}},
            "args(k=4)[mpu]": {
                "rubric_satisfaction": {"mean": 0.9, "ci": [0.85, 0.95]},
                "rm_win": {"mean": 0.7, "ci": [0.6, 0.8]},
                "vs": {"zero_shot": {"rubric_satisfaction": {"delta": 0.6, "ci": [0.55, 0.65]}}},
            },
            "best_of_n(n=4)[mpu]": {
                "rubric_satisfaction": {"mean": 0.7, "ci": [0.6, 0.8]},
                "bon_curve": {"rubric_satisfaction": curve},
            },
        },
        "skipped_combinations": [{"decoder": "args", "method": "length", "reason": "no per-token <reward>"}],
        "work": {"computed": {"fit": 1}, "reused": {}},
        "timing_s": {"total": 1.0},
        "analysis": analysis,
    }


def make_samples() -> list[dict[str, Any]]:
    rows = []
    for u in USERS[-2:]:
        for dec, text in (("zero_shot", "A plain answer."), ("args(k=4)[mpu]", XSS_TEXT)):
            rows.append(
                {
                    "kind": "generation",
                    "decoder": dec,
                    "user_id": u,
                    "seen": True,
                    "prompt_id": "p0",
                    "prompt": "How do I <b>cook</b> rice?",
                    "text": text,
                    "rubric_satisfaction": 0.5,
                    "rubric_aspects": [
                        {"aspect": "length", "pole": "concise", "met": True},
                        {"aspect": "format", "pole": "bulleted", "met": False},
                    ],
                    "user_rubric": "length: concise; format: bulleted",
                    "policy": "tiny",
                }
            )
    return rows


def make_run_dir(root: Path, name: str = "run", seed: int = 0, bench: str = "synth") -> Path:
    d = root / name
    d.mkdir(parents=True)
    cells = make_cells(f"{bench}|tiny|seed{seed}", seed)
    text = "".join(json.dumps(c) + "\n" for c in cells)
    (d / "cells.jsonl").write_text(text)
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in make_samples()))
    # as a run records it: the count and digest of the cells file it wrote
    results = {**make_results(bench, make_analysis(cells)), "cells": cells_record(text.encode(), len(cells))}
    (d / "results.json").write_text(json.dumps(results))
    return d


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = make_run_dir(tmp_path_factory.mktemp("report"))
    write_report(json.loads((d / "results.json").read_text()), d / "report.html")
    return d


def test_report_files_verdict_tables_and_plots(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text()
    results = json.loads((run_dir / "results.json").read_text())
    verdict = results["analysis"]["verdict"]
    assert verdict["deploy"] == "mpu"  # the synthetic effect is large: the analysis separates it
    # verdict first: its box comes before every table
    assert html.index('class="verdict') < html.index("<table")
    # the verdict rendered from its parts: the lead sentence, then one line per part, every part's words
    box = html[html.index('class="verdict') : html.index("</section>")]
    parts = verdict["parts"]
    assert len(parts) > 2 and box.count("<li>") == len(parts) - 1
    # in display names (metric labels for their ids), each part's words after the title it may repeat
    shown = {m: metric_label(m) for m in (verdict["metric"], verdict.get("upstream_metric")) if m}
    assert f'<p class="vtext">{escape(shorten_text(parts[0]["text"], shown))}</p>' in box
    assert all(escape(shorten_text(p["text"], shown)[-40:]) in box for p in parts)
    assert "<b>Upstream</b> Upstream" not in box
    for section in (
        "Leaderboard — synth",
        "Methods: upstream and downstream",
        "Does the upstream ranking",
        "Kendall τ-b",
        "weighted τ",
        "Spearman ρ",
        "Pearson r",
        "NDCG",
        "RBO",
        "Win rate next to ground-truth gain",
        "Generations side by side",
        "RM accuracy",
        "Best-of-N",
        "difference to zero-shot",
        "Skipped combinations",
        "Provenance",
        "Which benchmark should you trust for this deployment",
        "RM acc. pers.-only",
        "RM acc. consensus",
        "pairwise differences",
    ):
        assert section in html, section
    validity = results["analysis"]["validity"]["by_downstream"]["args:rubric_satisfaction"]
    assert validity["verdict"]["leader"] == "rm_acc_pers_only"
    assert validity["headline"].replace("'", "&#39;") in html
    for method in ("length", "random", "global_bt", "pal_b"):  # baselines are on the leaderboard
        assert f"<td>{method}</td>" in html
    # best only from the analysis's ranking: mpu on the verdict metric, and no badge for an unseparated metric
    lb = html[html.index("Leaderboard — synth") : html.index('id="methods"')]
    assert re.search(r"<td>mpu</td>.*?badge best", lb, re.S)
    glance, full = lb.split('<details class="more">', 1)  # at a glance: the verdict metric's badge alone
    assert glance.count("badge best") == 1 and full.count("badge best") == len(_leaderboard_bests(results["analysis"]))
    # n/a is a state with a reason, never a 0: length has no ARGS row
    assert 'class="na" title="' in html
    pngs = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)
    assert len(pngs) >= 5  # scatter grid, few-shot, Best-of-N, per-user, win rate vs gain
    assert "http://" not in html and "https://" not in html  # self-contained
    plots = {p.name for p in (run_dir / "plots").iterdir()}
    for stem in ("scatter_main", "fewshot_curves", "best_of_n_curves", "per_user", "win_rate_vs_gain"):
        assert {f"{stem}.png", f"{stem}.svg"} <= plots, stem
    assert any(p.startswith("scatter__args_rubric_satisfaction") for p in plots)  # all pairs as files
    assert (run_dir / "plots" / "scatter_main.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _leaderboard_bests(analysis: dict[str, Any]) -> list[str]:
    """The leaderboard's metrics whose ranking names a best method (one badge each)."""
    from perbench.report.extract import main_downstream, main_upstream

    cols = {*main_downstream(analysis, 3), *main_upstream(analysis, 3)}
    return [k for k, r in analysis["ranking"].items() if k in cols and r["best"]]


def test_injected_markup_is_escaped(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text()
    assert "<script" not in html.lower()  # the page has no script of its own: any would be injected
    assert "onerror=" not in html.replace("onerror=&#34;", "")
    assert "&lt;script&gt;document.title=" in html and "&lt;img src=x onerror=" in html
    assert "evil&lt;b onmouseover=alert(1)&gt;" in html and "<b onmouseover" not in html
    assert "abc&lt;i&gt;123&lt;/i&gt;" in html and "tiny&lt;b&gt;policy&lt;/b&gt;" in html


MARK = '<x-inj title="1">'
ESCAPED_MARK = "&lt;x-inj title=&#34;1&#34;&gt;"
#: mappings keyed by data (method / decoder labels, metric names, packages…), not by the schema
LABEL_MAPS = {"upstream", "downstream", "table", "fairness", "models", "packages", "policies", "computed", "vs"}


def _inject(x: Any, keys: bool, parent: str = "") -> Any:
    """Every string of ``x`` with markup appended (with ``keys``, also the keys of mappings keyed by data)."""
    if isinstance(x, str):
        return x if parent == "kind" else x + MARK  # kind selects sample rows: keep it
    if isinstance(x, list):
        return [_inject(v, keys, parent) for v in x]
    if isinstance(x, dict):
        rename = keys and parent in LABEL_MAPS
        return {(k + MARK if rename else k): _inject(v, keys, str(k)) for k, v in x.items()}
    return x


@pytest.mark.parametrize("keys", [False, True], ids=["values", "values_and_labels"])
def test_every_string_field_of_results_is_escaped(run_dir: Path, tmp_path: Path, keys: bool) -> None:
    """A hand-edited results.json / samples.jsonl: markup in any string (config_hash, labels, verdict, notes,
    provenance, reasons…) or label reaches report.html only as text."""
    results = _inject(json.loads((run_dir / "results.json").read_text()), keys)
    samples = [_inject(r, keys) for r in make_samples()]
    html = render(results, samples=samples, figures={})
    assert "<x-inj" not in html
    assert f"config <code>abc&lt;i&gt;123&lt;/i&gt;{ESCAPED_MARK}</code>" in html
    assert f"Hello there.{ESCAPED_MARK}</div>" in html  # a generation
    assert f"<td>mpu{ESCAPED_MARK}</td>" in html or not keys  # a method label (keys of analysis.table)
    d = tmp_path / "edited"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(results))
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    assert main(["report", str(d)]) == 0  # `perbench report` re-renders a hand-edited run the same way
    assert "<x-inj" not in (d / "report.html").read_text()


def test_leaderboard_markdown(run_dir: Path) -> None:
    md = (run_dir / "leaderboard.md").read_text()
    verdict = json.loads((run_dir / "results.json").read_text())["analysis"]["verdict"]["text"]
    assert md.startswith("# perbench — synth") and verdict.split(" (")[0] in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    names = {r.split("|")[2].strip() for r in rows[1:]}
    assert {"mpu", "global_bt", "length", "random", "zero_shot"} <= names
    assert "**best**" in md and "n/a[1]" in md and "[1] " in md
    assert "<b" not in md  # raw markup from a method label is neutralised
    assert "Kendall τ-b" in md


def test_sections_degrade_without_data() -> None:
    html = render({})
    assert "No verdict" in html and "<table" not in html
    analysis = make_analysis(make_cells("b|p|seed0", 1))
    partial = render({"analysis": {"verdict": analysis["verdict"], "table": analysis["table"]}})
    assert "Leaderboard" in partial and "Does the upstream ranking" not in partial
    broken = render(
        {
            "analysis": {"table": {"m": {"x": None}}, "ranking": {"x": "oops"}},
            "upstream": {"m": 3},
            "downstream": {"d": {"bon_curve": {"q": {"n": [1]}}}},
            "benchmark": None,
        }
    )
    assert "<html" in broken
    assert render_markdown(None, "t").count("n/a") == 1


@pytest.mark.parametrize(("policy", "rule"), [("strict", "as wrong (0)"), ("half", "as half right (½)")])
def test_the_report_states_the_tie_rule(policy: str, rule: str) -> None:
    entry = {"accuracy": 0.5, "ci": [0.4, 0.6], "ties": 2, "tie_policy": policy}
    results = {"config": {"tie_policy": policy}, "upstream": {"length": {"rm_accuracy": {"seen": entry, "all": entry}}}}
    html = render(results)
    assert f"Tie rule: a pair whose chosen and rejected responses score equal counts {rule}" in html
    assert f"(tie_policy: {policy})" in html and "always counts a tie ½" in html


def test_best_is_never_a_point_estimate() -> None:
    analysis = make_analysis(make_cells("b|p|seed0", 2))
    metric = analysis["verdict"]["metric"]
    analysis["ranking"][metric] = {
        **analysis["ranking"][metric],
        "best": None,
        "tied": analysis["ranking"][metric]["order"][:2],
    }
    html = render({"analysis": analysis}, figures={})
    lb = html[html.index("Leaderboard") : html.index('id="methods"')]
    assert "tied: " + ", ".join(analysis["ranking"][metric]["order"][:2]) in lb
    top = analysis["ranking"][metric]["order"][0]
    row = next(r for r in lb.split("<tr>") if f"<td>{top}</td>" in r)
    first_metric_cell = row.split("<td>")[3]  # "#", method, then the verdict metric
    assert "badge best" not in first_metric_cell and "badge tied" in first_metric_cell


def test_plots_are_deterministic(run_dir: Path) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    cells = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    a = build_plots(results["analysis"], results, cells, all_pairs=False)
    b = build_plots(results["analysis"], results, cells, all_pairs=False)
    assert set(a) == {"scatter", "fewshot", "bon", "per_user", "win_gain"}
    for key in a:
        assert a[key].png == b[key].png and a[key].svg == b[key].svg, key


def test_cli_compare_and_report_several_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d1 = make_run_dir(tmp_path, "r1", seed=0)
    d2 = make_run_dir(tmp_path, "r2", seed=1, bench="other")
    out = tmp_path / "cmp"
    assert main(["compare", str(d1), str(d2), "--out", str(out), "--n-boot", "40"]) == 0
    html = (out / "report.html").read_text()
    assert "perbench compare — 2 runs" in html
    assert "Leaderboard — synth" in html and "Leaderboard — other" in html and "all runs pooled" in html
    saved = json.loads((out / "analysis.json").read_text())
    assert set(saved["per_benchmark"]) == {"synth", "other"} and saved["analysis"]["n_boot"] == 40
    # which benchmark to trust, pooled over both runs' systems (benchmarks × policies), printed and in the report
    pooled = saved["analysis"]["validity"]["by_downstream"]["args:rubric_satisfaction"]
    assert {r["n_systems"] for r in pooled["predictors"]} == {2 * 5}  # 5 RMs guide ARGS in each run
    assert "Which benchmark to trust for args:rubric_satisfaction" in capsys.readouterr().out
    assert "Which benchmark should you trust for this deployment" in html
    assert (out / "leaderboard.md").exists() and (out / "plots" / "scatter_main.svg").exists()
    assert main(["report", str(d1), str(d2), "--out", str(tmp_path / "both"), "--n-boot", "30"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[-3:] == [str(d1 / "report.html"), str(d2 / "report.html"), str(tmp_path / "both" / "report.html")]
    # the same run twice would count its cells twice: refused with a clear message
    assert main(["compare", str(d1), str(d1), "--out", str(out)]) == 2
    assert "both hold group" in capsys.readouterr().err


def test_cli_report_one_run_dir(tmp_path: Path) -> None:
    d = make_run_dir(tmp_path)
    assert main(["report", str(d)]) == 0
    assert (d / "report.html").exists() and (d / "leaderboard.md").exists()
    assert not (tmp_path / "compare").exists()


# ------------------------------------------------------------------ headless Chromium

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def _chromium(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *CHROMIUM_FLAGS, *args], capture_output=True, text=True, timeout=120)


def test_report_in_headless_chromium(run_dir: Path, chromium: str, tmp_path: Path) -> None:
    from PIL import Image

    url = (run_dir / "report.html").resolve().as_uri()
    shot = tmp_path / "out.png"
    res = _chromium(chromium, f"--screenshot={shot}", "--window-size=1280,2400", url)
    assert shot.exists(), res.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2400)
    small = img.resize((64, 120))
    colours = {small.getpixel((x, y)) for x in range(64) for y in range(120)}
    assert len(colours) > 20  # text, tables and the verdict box, not a blank page
    assert Image.open(shot).convert("L").getextrema()[0] < 100  # some dark text

    dom = _chromium(chromium, "--dump-dom", url).stdout
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and title.group(1) == "perbench — synth"  # no payload rewrote it
    assert "data-pwned" not in dom.split("<body", 1)[1].split(">", 1)[0]  # no payload touched <body>
    assert '<img src="x"' not in dom and "<script>document.title" not in dom  # never parsed as elements
    assert "&lt;script&gt;document.title=" in dom and "&lt;img src=x onerror=" in dom  # shown as text
    assert 'class="vtext"' in dom and dom.count("data:image/png;base64,") >= 5


def test_report_shows_the_decision_the_planner_and_chance_values() -> None:
    """An undecided verdict: the box names the decision and the contenders, the leaderboard marks the baselines
    as reference lines (never best or tied), the planner's table says what would decide, and NDCG / RBO show
    their chance values. leaderboard.md carries the same decision."""
    from perbench.metrics.analysis import analyze
    from tests.crossed import crossed_cells

    rng = np.random.default_rng(0)
    metric = "best_of_n:rubric_satisfaction"
    # five deployable systems: a rank coefficient (and its chance value) needs 5; baselines are reference lines
    means = {"mpu": 0.56, "pref": 0.54, "lore": 0.3, "vpl": 0.25, "pal_b": 0.2, "length": 0.25, "random": 0.2}
    cells = crossed_cells(means, rng, 12, 8, metric=metric, group="b|p|seed0")
    cells += crossed_cells(means, rng, 12, 8, metric="rm_acc_seen", group="b|p|seed0")
    analysis = analyze(cells, n_boot=100, seed=0)
    v = analysis["verdict"]
    assert v["decision"] == "undecided" and v["contenders"] == ["pref"]
    assert "Against the best baseline, length: mpu − length = " in v["text"]  # with its paired CI
    html = render({"analysis": analysis}, figures={})
    box = html[html.index('class="verdict') : html.index("</section>")]
    assert "badge tied" in box and "undecided" in box and "still in contention: <b>pref</b>" in box
    assert "reference lines (never recommended): length, random" in box and "equivalence margin ±" in box
    lb = html[html.index('id="leaderboard"') : html.index('id="methods"')]
    row = next(r for r in lb.split("<tr>") if "<td>length</td>" in r)
    assert "(reference)" in row and "badge" not in row
    assert "What would decide" in lb and "mpu − pref" in lb and " prompts × " in lb
    assert "(chance 0." in html[html.index('id="selection"') :]
    md = render_markdown(analysis, "t")
    assert "Decision on Best-of-N · rubric sat.: **undecided**" in md and "length" in md
    md_row = next(line for line in md.splitlines() if line.startswith("| – | length |"))
    assert "(reference)" in md_row and "best" not in md_row and "tied" not in md_row

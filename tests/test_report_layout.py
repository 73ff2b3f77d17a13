"""The report fits the reader: rendered in headless Chromium at 1400 px and 900 px, the verdict, the leaderboard
and the method table show whole (no horizontal overflow), with every one of 20 systems in the method table, for a
run shaped like the default one (6 methods × 3 train fractions + 2 baselines, Best-of-N with its random and oracle
picks). Headless Chromium comes from the ``chromium`` fixture (tests/conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perbench.report.html import write_report

FAMILIES = {"global_bt": 0.50, "mpu": 0.55, "lore": 0.52, "pal_b": 0.47, "vpl": 0.45, "pref": 0.58}
FRACTIONS = (0.25, 0.5, 1.0)
BON = "best_of_n:rubric_satisfaction"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]
MEASURE = """<script>(function(){
var W=document.documentElement.clientWidth, out={width:W,page:document.documentElement.scrollWidth,parts:{}};
var sel={verdict:'.verdict',leaderboard:'#leaderboard table.glance',methods:'#methods table.mt'};
for (var k in sel){out.parts[k]=Array.prototype.map.call(document.querySelectorAll(sel[k]),function(e){
 var r=e.getBoundingClientRect();var p=e.parentElement;
 return {left:r.left,right:r.right,sw:e.scrollWidth,cw:e.clientWidth,pw:p.clientWidth,psw:p.scrollWidth};});}
out.rows=Array.prototype.map.call(document.querySelectorAll('#methods table.mt'),
 function(t){return t.tBodies[0].rows.length;});
var pre=document.createElement('pre');pre.id='measure';pre.textContent=JSON.stringify(out);
document.body.appendChild(pre);
})();</script>"""


def systems() -> dict[str, float]:
    out = {}
    for fam, q in FAMILIES.items():
        for f in FRACTIONS:
            out[fam if f == 1.0 else f"{fam}(train_fraction={f})"] = q - 0.04 * (1 - f)
    return {**out, "length": 0.40, "random": 0.42}


def cells(rng: np.random.Generator, users: int = 12, prompts: int = 8) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    group = "rubrics|tiny|seed0"

    def add(m: str, metric: str, u: int, p: int, v: float) -> None:
        rows.append({"group": group, "method": m, "metric": metric, "user": f"user{u}", "prompt": f"p{p}", "value": v})

    for u in range(users):
        for p in range(prompts):
            add("random_pick", BON, u, p, float(np.clip(0.42 + 0.05 * rng.standard_normal(), 0, 1)))
            add("oracle_pick", BON, u, p, float(np.clip(0.62 + 0.05 * rng.standard_normal(), 0, 1)))
            add("zero_shot", "zero_shot:rubric_satisfaction", u, p, float(rng.random() < 0.4))
            for m, q in systems().items():
                add(m, BON, u, p, float(np.clip(q + 0.08 * rng.standard_normal(), 0, 1)))
                add(m, "best_of_n:rougeL", u, p, float(np.clip(0.2 + 0.05 * rng.standard_normal(), 0, 1)))
                add(m, "best_of_n:rm_win", u, p, float(rng.random() < 0.9))
                for metric, acc in (("rm_acc_seen" if u < 9 else "rm_acc_unseen", q + 0.15), ("rm_acc_all", q + 0.1)):
                    add(m, metric, u, p, float(rng.random() < acc))
                if m not in ("length", "random"):
                    for n in (1, 5, 10):
                        add(m, f"fewshot_acc@{n}", u, p, float(rng.random() < q + 0.01 * n))
                    add(m, "pa", u, p, float(rng.random() < q))
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from perbench.metrics.analysis import analyze

    rows = cells(np.random.default_rng(0))
    analysis = analyze(rows, verdict_metric=BON, n_boot=40, seed=0)
    d = tmp_path_factory.mktemp("layout")
    (d / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in rows))
    results = {"schema_version": 1, "benchmark": {"name": "rubrics"}, "analysis": analysis}
    return write_report(results, d / "report.html")


def test_the_report_names_every_system_compactly(report: Path) -> None:
    html = report.read_text()
    glance = html[html.index('class="lb glance"') : html.index('<details class="more">')]
    for label in systems():
        short = label.replace("(train_fraction=0.25)", "@25%").replace("(train_fraction=0.5)", "@50%")
        assert re.search(f">{re.escape(short)}[< ]", glance), short
    assert "random pick" in glance and "oracle pick" in glance and "share of headroom" in glance
    assert "mpu@25%</b> = <code>mpu(train_fraction=0.25)</code>" in html  # the legend maps them back
    assert "RM acc. seen" in glance and "RM acc. unseen" in glance


@pytest.mark.parametrize("width", [1400, 900])
def test_verdict_leaderboard_and_method_table_fit_in_chromium(report: Path, chromium: str, width: int) -> None:
    page = report.with_name(f"measure-{width}.html")
    page.write_text(report.read_text().replace("</body>", MEASURE + "</body>"))
    res = subprocess.run(
        [chromium, *FLAGS, f"--window-size={width},1000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(r'<pre id="measure">(.*?)</pre>', res.stdout, re.S)
    assert found, res.stderr[-2000:]
    m = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert m["width"] <= width and m["page"] <= m["width"], m  # the page itself never scrolls sideways
    for part, boxes in m["parts"].items():
        assert boxes, part
        for b in boxes:
            assert b["left"] >= 0 and b["right"] <= m["width"] + 1, (part, b)
            assert b["sw"] <= b["cw"] + 1 and b["psw"] <= b["pw"] + 1, (part, b)
    # each page of the method table lists every system that has its metrics: all 20 for RM accuracy, the 18
    # deployable ones (no baseline adapts from shots) for the few-shot curve
    assert m["rows"][0] == len(systems()) and min(m["rows"]) >= len(systems()) - 2


def test_generations_show_what_the_top_systems_pick() -> None:
    from perbench.report.picks import picks_section

    dec, pid, metric = "best_of_n(n=2,pool=3)", "p0", "best_of_n:rubric_satisfaction"
    long = " ".join(["This answer keeps going with many more words about the topic."] * 20)
    samples: list[dict[str, Any]] = [
        {"kind": "bon_sample", "decoder": dec, "prompt_id": pid, "sample": i, "text": t}
        for i, t in enumerate(["Sample zero text.", long, "Short and sweet."])
    ]
    samples += [
        {"kind": "bon_cell", "decoder": f"{dec}[mpu(train_fraction=0.25)]", "user_id": "u1", "prompt_id": pid,
         "top": 1},
        {"kind": "bon_pool_cell", "decoder": dec, "user_id": "u1", "prompt_id": pid,
         "oracle_top": {"rubric_satisfaction": 2}},
        {
            "kind": "generation", "decoder": "zero_shot", "user_id": "u1", "prompt_id": pid, "prompt": "How?",
            "text": "Zero-shot says hi.", "user_rubric": "length: concise",
        },
    ]  # fmt: skip
    analysis = {"verdict": {"metric": metric}, "ranking": {metric: {"order": ["mpu(train_fraction=0.25)"]}}}
    html = picks_section(samples, analysis, {"mpu(train_fraction=0.25)": "mpu@25%"})
    assert "mpu@25% pick" in html and "oracle pick" in html and "zero-shot" in html
    assert "Short and sweet." in html and "many more words" in html and "Sample zero" not in html
    cards = html.split('<div class="gh">')[1:]
    assert ["✓" in c for c in cards] == [True, False, True]  # concise met by zero-shot and the oracle, not by mpu
    assert picks_section(samples, {"verdict": {"metric": "args:rubric_satisfaction"}}, {}) == ""

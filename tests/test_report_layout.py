"""The report fits the reader, for a run shaped like the default one (6 methods × 3 train fractions + 2 baselines,
Best-of-N with its random and oracle picks, each system's pooled diagnosis, policy accuracy n/a): rendered in
headless Chromium at 1400 px, no visible table of any section is wider than the box it sits in; at 900 px the
verdict, the leaderboard and the "where the signal is lost" table show whole, and the page never scrolls sideways
(a wider table scrolls inside its own box). No table cell prints a long system label. Headless Chromium comes from
the ``chromium`` fixture (tests/conftest.py): without one these tests are skipped, saying why."""

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
#: The measurement, run in the page. "Fits" for a table: its right edge is inside the page, and its width is at
#: most its container's inner width (the container: the nearest ancestor that is a scroll box, a grid page or
#: main; a table in a closed <details> is not visible and not measured). The named parts must fit at every width.
MEASURE = """<script>(function(){
var W=document.documentElement.clientWidth, out={width:W,page:document.documentElement.scrollWidth,parts:{},tables:[]};
function box(e){var p=e.parentElement;while(p&&!(p.classList.contains('scroll')||p.classList.contains('page')||
 p.tagName==='MAIN'||p.tagName==='DIV'))p=p.parentElement;return p;}
function m(e){var r=e.getBoundingClientRect(),p=box(e),s=e.closest('section');
 return {id:s?s.id||s.className:'',head:(e.tHead?e.tHead.textContent:'').slice(0,60),left:r.left,right:r.right,
  width:r.width,sw:e.scrollWidth,cw:e.clientWidth,pw:p.clientWidth,psw:p.scrollWidth,visible:r.width>0};}
var sel={verdict:'.verdict',leaderboard:'#leaderboard table.glance',methods:'#methods table.mt',
 signal:'#signal table.chain'};
for (var k in sel){out.parts[k]=Array.prototype.map.call(document.querySelectorAll(sel[k]),m);}
out.tables=Array.prototype.map.call(document.querySelectorAll('table'),m).filter(function(t){return t.visible;});
out.cells=Array.prototype.map.call(document.querySelectorAll('td,th'),function(c){return c.textContent;});
out.rows=Array.prototype.map.call(document.querySelectorAll('#methods table.mt'),
 function(t){return t.tBodies[0].rows.length;});
var pre=document.createElement('pre');pre.id='measure';pre.textContent=JSON.stringify(out);
document.body.appendChild(pre);
})();</script>"""
#: what a long system label looks like: a decoder's or a system's full label (the tables use compact ones)
LONG_LABEL = re.compile(r"best_of_n\(|train_fraction=|\w\(\w+=[^)]*\)\[")
DECODER = "best_of_n(n=8,pool=32)"


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
                add(m, "onpolicy_acc", u, p, float(rng.random() < q))
                add(m, "onpolicy_bok_acc@4", u, p, float(rng.random() < q / 2))
                for metric, acc in (("rm_acc_seen" if u < 9 else "rm_acc_unseen", q + 0.15), ("rm_acc_all", q + 0.1)):
                    add(m, metric, u, p, float(rng.random() < acc))
                if m not in ("length", "random"):
                    for n in (1, 5, 10):
                        add(m, f"fewshot_acc@{n}", u, p, float(rng.random() < q + 0.01 * n))
                    add(m, "pa", u, p, float(rng.random() < q))
    return rows


def members() -> dict[str, dict[str, Any]]:
    """results.json's ``systems.members`` for :func:`systems` (as a run writes it)."""
    out = {}
    for label in systems():
        fam, _, rest = label.partition("(")
        tf = float(rest.split("=")[1].rstrip(")")) if rest else 1.0
        out[label] = {"family": fam, "method": fam, "params": {}, "train_fraction": tf, "seed": 0, "shots": 10,
                      "baseline": fam in ("length", "random"), "fit_seeds": [0], "pooled_as": None}  # fmt: skip
    return out


def diagnosis(rng: np.random.Generator, i: int) -> dict[str, Any]:
    """A pooled system's diagnosis of the shape ``perbench.metrics.pool_diagnosis`` writes."""
    users = [{"user": f"user-{h:012x}", "reason": "flat" if h % 2 else "worse than null"} for h in range(i % 7)]
    prompt = json.dumps([{"role": "user", "content": "How do I keep a plant alive in a dark flat? " * 3}])
    poles = {f"{a}={p}": {"rho": float(rng.uniform(-0.5, 0.6)), "cells": 40} for a in ("length", "tone", "format")
             for p in ("concise", "detailed")}  # fmt: skip
    return {"cells": 96, "cells_constant_truth": 12, "rho_truth": {"mean": 0.1 * (i % 5), "ci": [0.0, 0.3]},
            "poles": poles, "collapsed_users": users, "users_without_signal": ["u1", "u2"], "users_tested": 12,
            "hacked_prompts": [{"prompt": prompt, "rho": -0.4}] * (i % 4),
            "rules": {"collapsed": "flat or below the null", "hacked": "ρ < 0 on the prompt"}}  # fmt: skip


def run_results(analysis: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    up, down = {}, {"zero_shot": {"rubric_satisfaction": {"mean": 0.4, "ci": [0.35, 0.45]}}}
    for i, (label, q) in enumerate(systems().items()):
        acc = {g: {"accuracy": q + 0.1, "ci": [q, q + 0.2]} for g in ("seen", "unseen", "pers_only", "consensus")}
        na = "no decoder of this run applies a weight to this reward: see the curve over w"
        curve = {str(n): {"accuracy": q + 0.01 * n, "ci": [q, q + 0.1]} for n in (1, 5, 10)}
        up[label] = {"baseline": label in ("length", "random"), "fewshot_curve": curve,
                     "rm_accuracy": {**acc, "all": {"accuracy": q, "ties": 3}},
                     "policy_accuracy": {g: {"not_applicable": na} for g in ("seen", "unseen")}}  # fmt: skip
        down[f"{DECODER}[{label}]"] = {
            "guide": label, "rubric_satisfaction": {"mean": q, "ci": [q - 0.05, q + 0.05]},
            "rouge1": {"mean": 0.2, "ci": [0.18, 0.22]}, "rougeL": {"mean": 0.2, "ci": [0.18, 0.22]},
            "bertscore_f1": {"mean": 0.8, "ci": [0.79, 0.81]}, "rubric_all": {"mean": 0.1, "ci": [0.05, 0.15]},
            "rm_win": {"mean": 0.8, "ci": [0.7, 0.9], "null": 8 / 9}, "words": {"mean": 120.0},
            "vs": {"zero_shot": {q2: {"delta": q - 0.4, "ci": [q - 0.45, q - 0.35], "excludes_zero": q > 0.45}
                                 for q2 in ("rubric_satisfaction", "rouge1", "rougeL")}},
            "diagnosis": diagnosis(rng, i),
        }  # fmt: skip
    compute = {"first_run": {"created": "2026-12-01T10:00", "timing_s": {"units": 340.2, "total": 360.4}},
               "this_run": {"created": "2026-12-01T11:00", "timing_s": {"units": 0.3, "total": 10.6}}}  # fmt: skip
    return {
        "schema_version": 2, "created": "2026-12-01T11:00:00+00:00", "config_hash": "abc123",
        "config": {"seed": 0, "shots": 10, "tie_policy": "half"},
        "provenance": {"git": "0b90456", "python": "3.11", "seed": 0, "compute": compute,
                       "models": {"policy": {"name": "smollm2", "fingerprint": "f" * 40, "device": "cpu"}}},
        "benchmark": {"name": "rubrics", "pairs": 924, "users_seen": 24, "users_unseen": 8},
        "systems": {"members": members()}, "upstream": up, "downstream": down, "analysis": analysis,
        "skipped_combinations": [{"decoder": "args", "method": "length", "reason": "no per-token reward"}],
        "work": {"computed": {"fit": 20}, "reused": {}}, "timing_s": {"total": 10.6},
    }  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from perbench.metrics.analysis import analyze

    rng = np.random.default_rng(0)
    rows = cells(rng)
    analysis = analyze(rows, verdict_metric=BON, n_boot=40, seed=0, systems=members())
    d = tmp_path_factory.mktemp("layout")
    (d / "cells.jsonl").write_text("".join(json.dumps(c) + "\n" for c in rows))
    return write_report(run_results(analysis, rng), d / "report.html")


def test_the_report_names_every_system_compactly(report: Path) -> None:
    html = report.read_text()
    assert "BoN8[mpu@25%]" in html  # a decoder's output, its guide from systems.members
    policy = html[html.index("Policy accuracy under") :]
    assert policy.index("n/a for every system: no decoder") < policy.index("<h")  # one line, not 40 rows of n/a
    compute = html[html.index("<h3>Compute</h3>") :]  # a rerun keeps the first run's compute beside its own
    assert compute.index("first run") < compute.index(">360<") < compute.index("this run") < compute.index(">10.6<")
    glance = html[html.index('class="lb glance"') : html.index('<details class="more">')]
    for label in systems():
        short = label.replace("(train_fraction=0.25)", "@25%").replace("(train_fraction=0.5)", "@50%")
        assert re.search(f">{re.escape(short)}[< ]", glance), short
    assert "random pick" in glance and "oracle pick" in glance and "share of headroom" in glance
    assert "mpu@25%</b> = <code>mpu(train_fraction=0.25)</code>" in html  # the legend maps them back
    assert "RM acc. seen" in glance and "RM acc. unseen" in glance


def measure(report: Path, chromium: str, width: int) -> dict[str, Any]:
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
    import html

    return dict(json.loads(html.unescape(found.group(1))))


def fits(t: dict[str, Any], page: int) -> bool:
    """Inside the page, and no wider than its container (nothing hidden behind a scroll)."""
    return t["left"] >= 0 and t["right"] <= page + 1 and t["sw"] <= t["cw"] + 1 and t["psw"] <= t["pw"] + 1


@pytest.mark.parametrize("width", [1400, 900])
def test_the_report_fits_in_chromium(report: Path, chromium: str, width: int) -> None:
    m = measure(report, chromium, width)
    assert m["width"] <= width and m["page"] <= m["width"], m  # the page itself never scrolls sideways
    for part, boxes in m["parts"].items():  # at every width: the verdict, the leaderboard, methods, signal
        assert boxes, part
        for b in boxes:
            assert fits(b, m["width"]), (part, b)
    if width >= 1400:  # every visible table of every section
        wide = [t for t in m["tables"] if not fits(t, m["width"])]
        assert not wide, wide
    assert len(m["tables"]) >= 12  # leaderboard, method pages, selection, signal, users, wins, run detail…
    long = [c for c in m["cells"] if LONG_LABEL.search(c)]
    assert not long, long[:5]
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


def test_compact_labels_come_from_systems_members() -> None:
    """Each system's compact label from its record (method, parameters, the axes that differ from the run's own),
    a pooled system's extra fits by their index, a decoder's output from its guide; labels the results do not
    describe stay whole, and two systems that would share a compact label both keep their full one."""
    from perbench.report.labels import report_labels
    from perbench.systems import fit_label

    rec = {"method": "lore", "params": {"K": 2}, "train_fraction": 0.5, "seed": 1, "shots": 10, "fit_seeds": [0, 7]}
    members = {
        "lore(K=2,train_fraction=0.5,seed=1)": {**rec, "pooled_as": "lore(K=2,train_fraction=0.5,seed=1)"},
        fit_label("lore(K=2,train_fraction=0.5,seed=1)", 1): {
            **rec,
            "pooled_as": "lore(K=2,train_fraction=0.5,seed=1)",
        },
        "mpu": {"method": "mpu", "params": {}, "train_fraction": 1.0, "seed": 0, "shots": 10},
        "mpu(shots=5)": {"method": "mpu", "params": {}, "train_fraction": 1.0, "seed": 0, "shots": 5},
        "a(x=1)": {"method": "a", "params": {}, "train_fraction": 0.5, "seed": 0, "shots": 10},
        "a(y=1)": {"method": "a", "params": {}, "train_fraction": 0.5, "seed": 0, "shots": 10},
    }
    results = {"config": {"seed": 0, "shots": 10}, "systems": {"members": members},
               "downstream": {f"{DECODER}[mpu(shots=5)]": {"guide": "mpu(shots=5)"}}}  # fmt: skip
    names = report_labels(results, ["zero_shot", "random_pick"])
    assert names["lore(K=2,train_fraction=0.5,seed=1)"] == "lore@50%·K2·s1"
    assert names["lore(K=2,train_fraction=0.5,seed=1,fit_seed=1)"] == "lore@50%·K2·s1·fit1"
    assert names["mpu"] == "mpu" and names["mpu(shots=5)"] == "mpu·sh5"
    assert names[f"{DECODER}[mpu(shots=5)]"] == "BoN8[mpu·sh5]"
    assert names["a(x=1)"] == "a(x=1)" and names["a(y=1)"] == "a(y=1)"  # both would be a@50%
    assert names["zero_shot"] == "zero_shot" and report_labels({}, ["mpu(train_fraction=0.5)"]) == {
        "mpu(train_fraction=0.5)": "mpu(train_fraction=0.5)"
    }  # results written before systems.members: full labels

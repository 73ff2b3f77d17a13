"""Report sections read from one run's results.json (upstream / downstream detail, provenance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

from perbench.metrics.rm_accuracy import invalid_pairs
from perbench.report import extract
from perbench.report.extract import _d, _l
from perbench.report.fmt import all_na, metric_label, na_span, num, span, table, value_ci
from perbench.report.labels import name_cell
from perbench.report.templating import render

_GROUPS = ("seen", "unseen", "pers_only", "consensus", "all")


def header(results: Mapping[str, Any]) -> str:
    """The page's title, what produced it and the benchmark's size (templates/header.html.j2)."""
    bench = _d(results.get("benchmark"))
    prov = _d(results.get("provenance"))
    models = _d(prov.get("models"))
    bits = [("", str(results["created"]))] if results.get("created") else []
    if results.get("config_hash"):
        bits.append(("config", str(results["config_hash"])))
    if prov.get("git"):
        bits.append(("git", str(prov["git"])))
    for key, name in (("policy", "policy"), ("rm_backbone", "RM backbone")):
        if _d(models.get(key)).get("name"):
            bits.append((name, str(models[key]["name"])))
    facts = []
    if "pairs" in bench:
        facts.append(f"{num(bench.get('pairs'), pct=False)} pairs")
    if "users_seen" in bench:
        seen, unseen = num(bench.get("users_seen"), pct=False), num(bench.get("users_unseen"), pct=False)
        facts.append(f"{seen} seen / {unseen} unseen users")
    skipped = _d(bench.get("skipped")).get("total")
    if skipped is not None:
        facts.append(f"{num(skipped, pct=False)} pairs skipped")
    if bench.get("weighting"):
        facts.append(f"{bench['weighting']}-weighted")
    notes = [str(n) for n in _l(_d(bench.get("meta")).get("notes"))]
    for name, extra in _d(results.get("upstream_benchmarks")).items():  # each extra's skip report too
        extra = _d(extra)
        skipped_extra = _d(extra.get("skipped")).get("total")
        facts.append(
            f"upstream benchmark {name}: {num(extra.get('pairs'), pct=False)} pairs, "
            f"{num(skipped_extra, pct=False) if skipped_extra is not None else '?'} skipped"
        )
        notes += [f"{name}: {n}" for n in _l(extra.get("notes"))]
    bench_name = str(bench.get("name", "run"))
    return str(render("header.html.j2", bench=bench_name, bits=bits, facts=facts, notes=notes))


def upstream_section(results: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    up = _d(results.get("upstream"))
    if not up:
        return ""
    present = {g for r in up.values() for g in _d(_d(r).get("rm_accuracy"))}
    groups = [g for g in _GROUPS if g in present] + sorted(g for g in present if g.startswith("on_"))
    invalid = invalid_pairs(up)
    rows = []
    for label, r in up.items():
        r = _d(r)
        acc = _d(r.get("rm_accuracy"))
        cells = [name_cell(label, names or {}) + (" " + span("muted", "baseline") if r.get("baseline") else "")]
        if _d(r.get("profile")).get("saw_profile") is False:  # others read the users' profiles, this one did not
            cells[0] += " " + span("muted", "(saw no profile)")
        note = _d(r.get("fit_notes")).get("label")
        if note:  # e.g. lore_reg whose users all point along its anchor
            cells[0] += " " + span("muted", f"({note})")

        for g in groups:
            e = _d(acc.get(g))
            cells.append(value_ci(e.get("accuracy"), e.get("ci"), na=e.get("not_applicable") or f"no {g} users"))
        cells.append(num(_d(acc.get("all")).get("ties"), pct=False))
        if invalid:  # pairs a score was NaN for: counted wrong, and the system is never a candidate
            cells.append(num(invalid.get(label, 0), pct=False))
        rows.append(cells)
    head = ["method", *groups, "ties"] + (["invalid scores (pairs, counted wrong)"] if invalid else [])
    policy = _d(results.get("config")).get("tie_policy")  # how a tie counted in these accuracies
    tie = str(policy) if policy in ("strict", "half") else ""
    return _piece("upstream", table=Markup(table(head, rows)), tie_policy=tie)


def _piece(kind: str, **context: Any) -> str:
    """One run-detail piece from templates/details.html.j2 (HTML parts of ``context`` as Markup)."""
    return str(render("details.html.j2", kind=kind, **context))


def fewshot_table(results: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    up = _d(results.get("upstream"))
    curves = {k: _d(_d(v).get("fewshot_curve")) for k, v in up.items() if _d(_d(v).get("fewshot_curve"))}
    if not curves:
        return ""
    shots = sorted({int(n) for c in curves.values() for n in c if str(n).isdigit()})
    rows = [[name_cell(k, names or {})] + [_fewshot_cell(_d(c.get(str(n)))) for n in shots] for k, c in curves.items()]
    return _piece("fewshot", table=Markup(table(["method"] + [f"{n} shots" for n in shots], rows)))


def _fewshot_cell(point: Mapping[str, Any]) -> str:
    cell = value_ci(point.get("accuracy"), point.get("ci"))
    eff = _d(point.get("effective_shots"))
    mean, nominal = eff.get("mean"), eff.get("nominal")
    if isinstance(mean, int | float) and isinstance(nominal, int) and eff.get("users_below_nominal"):
        cell += " " + span("muted", f"(eff. {mean:.1f})")
    return cell


_DOWN_METRICS = (
    ("rubric_satisfaction", "rubric sat. %"),
    ("rubric_all", "all aspects %"),
    ("rouge1", "ROUGE-1"),
    ("rougeL", "ROUGE-L"),
    ("bertscore_f1", "BERTScore-F1"),
    ("judge_score", "judge %"),
    ("rm_win", "RM win rate %"),
    ("words", "words"),
)


def downstream_section(results: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    down = _d(results.get("downstream"))
    if not down:
        return ""
    present = [(m, t) for m, t in _DOWN_METRICS if any(m in _d(d) for d in down.values())]
    rows = []
    for label, d in down.items():
        d = _d(d)
        cells = [name_cell(label, names or {})]
        for m, _ in present:
            e = _d(d.get(m))
            if not e:
                cells.append(na_span("not measured for this output"))
            elif m == "words":
                cells.append(num(e.get("mean"), pct=False))
            else:
                cells.append(value_ci(e.get("mean"), e.get("ci")))
        rows.append(cells)
    return _piece(
        "downstream",
        table=Markup(table(["decoder[guide]"] + [t for _, t in present], rows)),
        deltas=Markup(deltas(down, names)),
        bon=Markup(bon_table(down, names)),
    )


def deltas(down: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    """Paired differences of each output's quality against its references (zero-shot, ICL-RAG where it ran) on the
    same targets; the heading names the references the results hold."""
    refs = sorted({str(r) for d in down.values() for r in _d(_d(d).get("vs"))})
    said = {"rubric_satisfaction": "rubric sat.", "rouge1": "ROUGE-1", "rougeL": "ROUGE-L", "judge_score": "judge"}
    metrics = [m for m in said if any(m in _d(_d(_d(d).get("vs")).get(r)) for d in down.values() for r in refs)]
    if not refs or not metrics:
        return ""
    head = ["decoder[guide]"] + [f"Δ {said[m]} vs {r}" for r in refs for m in metrics]
    rows = []
    for label, d in down.items():
        cells = [name_cell(label, names or {})]
        for r in refs:
            for m in metrics:
                e = _d(_d(_d(_d(d).get("vs")).get(r)).get(m))
                cells.append(value_ci(e.get("delta"), e.get("ci"), signed=True, na="no shared targets") if e else "–")
        rows.append(cells)
    against = " and ".join(metric_label(f"{r}:x").partition(" · ")[0] for r in refs)  # the references it has
    return _piece("deltas", table=Markup(table(head, rows)), against=against)


def bon_table(down: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    curves = {label: _d(_d(d).get("bon_curve")) for label, d in down.items() if _d(_d(d).get("bon_curve"))}
    if not curves:
        return ""
    ns = sorted({int(n) for c in curves.values() for m in c.values() for n in _l(_d(m).get("n"))})
    rows = []
    refs: dict[str, dict[str, Any]] = {}
    for label, c in curves.items():
        for metric, m in c.items():
            m = _d(m)
            vals = dict(zip(_l(m.get("n")), _l(m.get("quality")), strict=False))
            rows.append([name_cell(label, names or {}), escape(metric)] + [num(vals.get(n)) for n in ns])
            refs.setdefault(str(metric), m)
    for metric, m in refs.items():
        for key, name in (("oracle", "oracle (best of n by ground truth)"), ("sample_mean", "random pick")):
            vals = dict(zip(_l(m.get("n")), _l(m.get(key)), strict=False))
            rows.append([span("muted", name), escape(metric)] + [num(vals.get(n)) for n in ns])
    return _piece("bon", table=Markup(table(["RM", "quality"] + [f"N={n}" for n in ns], rows)))


GROUPS = ("seen", "unseen")


def compact(curve: dict[str, Any]) -> str:
    from perbench.metrics.pa_curve import compact as line

    return line(curve) if curve else ""


def policy_accuracy_section(results: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    """The headline (the sequence tilt) beside the policy alone and the labelled variants, with each method's w."""
    rows = []
    for label, r in _d(results.get("upstream")).items():
        for g, e in _d(_d(r).get("policy_accuracy")).items():
            e = _d(e)
            curve = compact(_d(e.get("curve")))
            if e.get("not_applicable"):
                rows.append(
                    [name_cell(label, names or {}), escape(g), na_span(str(e["not_applicable"]))]
                    + [""] * 5
                    + [escape(curve)]
                )
                continue
            head = _d(e.get(str(e.get("headline") or "")))
            if not head:
                continue
            w0 = _d(e.get("w0"))
            variants_na = e.get("variants_not_applicable")

            def variant(name: str, e: dict[str, Any] = e, na: Any = variants_na) -> str:
                got = _d(e.get(name)).get("accuracy")
                return value_ci(got, None, na=str(na) if na else "not computed")

            rows.append(
                [
                    name_cell(label, names or {}),
                    escape(g),
                    value_ci(head.get("accuracy"), head.get("ci")),
                    value_ci(w0.get("accuracy"), w0.get("ci"), na="not reported"),
                    variant("prefix_mean"),
                    variant("prefix_sum"),
                    variant("rgd_mean"),
                    f"{escape(e.get('w', ''))} ({escape(e.get('w_source', ''))})",
                    escape(curve),
                ]
            )
    by_decoder = []
    for label, d in _d(results.get("downstream")).items():
        pa = _d(_d(d).get("policy_accuracy"))
        if pa:
            cells = [value_ci(_d(_d(pa.get(g)).get("tilt")).get("accuracy"), None, na=f"no {g} users") for g in GROUPS]
            by_decoder.append([name_cell(label, names or {}), escape(pa.get("w", "")), *cells])
    if not rows:
        return ""
    why = all_na([r[:3] for r in rows], skip=2)  # the headline n/a for every system: one line, not a table
    heads = ["decoder[method]", "w", *(f"sequence tilt, {g}" for g in GROUPS)]
    cols = [
        "method",
        "group",
        "sequence tilt (headline)",
        "policy alone (w=0)",
        "variant: prefix-sum / length",
        "variant: prefix-sum",
        "variant: top-k RGD policy",
        "w (source)",
        "accuracy over w (%)",
    ]
    return _piece(
        "policy",
        all_na=why or "",
        table=Markup("" if why else table(cols, rows, skip=2)),
        by_decoder=Markup(table(heads, by_decoder) if by_decoder else ""),
    )


def skipped_section(results: Mapping[str, Any]) -> str:
    skipped = [_d(s) for s in _l(results.get("skipped_combinations"))]
    if not skipped:
        return ""
    rows = [[escape(s.get("decoder")), escape(s.get("method")), escape(s.get("reason"))] for s in skipped]
    return _piece("skipped", table=Markup(table(["decoder", "method", "reason"], rows, "text")))


def provenance_section(results: Mapping[str, Any], notes: list[str] | None = None) -> str:
    """Versions, models, compute (the first run's beside this one's), work, policies and the reader's notes
    (templates/provenance.html.j2)."""
    prov = _d(results.get("provenance"))
    work = _d(results.get("work"))
    compute, compute_note = _compute(prov)
    said = None
    if work or results.get("timing_s"):
        timing = "" if compute else _counts(results.get("timing_s"), " s")
        said = {"computed": _counts(work.get("computed")), "reused": _counts(work.get("reused")), "timing": timing}
    return str(
        render(
            "provenance.html.j2",
            facts=[(k, str(prov[k])) for k in ("git", "python", "platform", "seed") if prov.get(k) is not None],
            models=[(str(role), m) for role, m in _d(prov.get("models")).items() if isinstance(m, dict)],
            packages=[(str(k), str(v)) for k, v in _d(prov.get("packages")).items() if v],
            compute=compute,
            compute_note=compute_note,
            work=said,
            policies=[(str(k), str(v)) for k, v in _d(results.get("policies")).items()],
            notes=[str(n) for n in notes or []],
        )
    )


def _compute(prov: Mapping[str, Any]) -> tuple[list[list[str]], str]:
    """Rows of the compute of the run that computed the folder's units (``provenance.compute.first_run``) beside
    this run's (``this_run``: a rerun reads what the first computed), and the results' note on them; no rows for
    results without them."""
    comp = _d(prov.get("compute"))
    said = {"first_run": "first run (computed the units)", "this_run": "this run"}
    rows = []
    for key in ("first_run", "this_run"):
        r = _d(comp.get(key))
        if not r:
            continue
        t = _d(r.get("timing_s"))
        rows.append(
            [
                said[key],
                str(r.get("created") or "–"),
                num(t.get("total"), pct=False) if "total" in t else "–",
                *(num(r.get(k), pct=False) if k in r else "–" for k in ("units_computed", "units_found_finished")),
                _counts(t, " s"),
            ]
        )
    return rows, str(comp.get("note") or "") if rows else ""


def _counts(d: Any, unit: str = "") -> str:
    """``{"fit": 3, "generate": 12}`` as ``fit 3, generate 12`` (``nothing`` when empty), never a raw dict."""
    items = [(str(k), v) for k, v in _d(d).items() if not isinstance(v, dict | list)]
    if not items:
        return "nothing"
    return ", ".join(f"{k} {num(v, pct=False) if isinstance(v, int | float) else v}{unit}" for k, v in items)


def rl_table(results: Mapping[str, Any]) -> str:
    """Per arm of the rl phase: reward gain during training, KL from the base policy, and the paired rubric
    satisfaction gains (95% CI over cells and training seeds) over the untrained policy (greedy and sampled),
    over the placebo and over the KL-matched random update, plus the RM's win rate over the base policy."""
    rows = []
    for r in extract.rl_summary(results):
        rows.append(
            [
                escape(r["label"]),
                escape(r["kind"] or ""),
                str(r["runs"]),
                num(r["reward_gain"], pct=False, signed=True, digits=2)
                if r["reward_gain"] is not None
                else na_span("not trained"),
                num(r["kl"], pct=False) if r["kl"] is not None else na_span("not measured"),
                *(
                    value_ci(r[k].get("delta"), r[k].get("ci"), signed=True, na=why)
                    for k, why in (
                        ("greedy", "not evaluated"),
                        ("sampled", "eval_samples: 0"),
                        ("vs_placebo", "no placebo arm"),
                        ("vs_kl_matched", "no KL-matched update"),
                    )
                ),
                value_ci(r["rm_win"].get("mean"), r["rm_win"].get("ci"), na="not an RM arm"),
            ]
        )
    if not rows:
        return ""
    rl = results.get("rl") or {}
    design = rl.get("design") or {}
    said = {
        "algorithm": str(design.get("algorithm", "")).upper(),
        "group": str(design.get("group")),
        "seeds": len(design.get("seeds") or []),
        "placebo": str(design.get("placebo")),
    }
    head = [
        "arm",
        "kind",
        "runs",
        "reward gain in training (sd units)",
        "KL from base (nats/seq)",
        "rubric gain vs base, greedy (pts)",
        "… sampled",
        "greedy vs placebo",
        "greedy vs KL-matched random",
        "RM win rate vs base",
    ]
    notes = [str(n) for n in rl.get("notes") or []]
    return _piece("rl", design=said, table=Markup(table(head, rows)), notes=notes)

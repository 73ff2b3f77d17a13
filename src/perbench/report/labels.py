"""Compact system labels for the report, read from results.json's ``systems.members`` (each system's method,
parameters and axes): ``mpu(train_fraction=0.25)`` → ``mpu@25%``, ``lore(K=2,seed=1)`` → ``lore·K2·s1``, and a
decoder's output ``best_of_n(n=8,pool=32)[lore(train_fraction=0.5)]`` (its ``downstream`` entry names the system
as ``guide``) → ``BoN8[lore@50%]``. Every table and plot uses them; :func:`legend` maps each back to the full
label. A label the results do not describe (a decoder without an RM, a reference pick, a run written before
``systems.members``) is kept whole; two systems that would share a compact label both keep their full one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

#: short names of a system's parameters and axes
_SHORT_KEYS = {"seed": "s", "shots": "sh", "pool": "p"}
_DECODERS = {"best_of_n": "BoN", "args": "ARGS", "genarm": "GenARM"}


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _pct(v: Any) -> str:
    return f"{100 * float(v):g}%" if isinstance(v, int | float) else str(v)


def _run_value(results: Mapping[str, Any], members: Mapping[str, Any], axis: str) -> Any:
    """The run's own value of an axis (``config.seed`` / ``config.shots``), else the members' most common one."""
    own = _d(results.get("config")).get(axis)
    if own is not None:
        return own
    seen = Counter(str(_d(m).get(axis)) for m in members.values() if _d(m).get(axis) is not None)
    return next((v for v, _ in seen.most_common(1)), None)


def member_label(rec: Mapping[str, Any], seed: Any = None, shots: Any = None) -> str:
    """The compact label of one ``systems.members`` record: the method, its parameters, then each axis that differs
    from the run's own (``seed`` / ``shots``; train fraction 1.0)."""
    bits = [f"{_SHORT_KEYS.get(str(k), k)}{v}" for k, v in sorted(_d(rec.get("params")).items())]
    tf = rec.get("train_fraction")
    at = "" if tf is None or tf == 1 else "@" + _pct(tf)
    for axis, own in (("seed", seed), ("shots", shots)):
        v = rec.get(axis)
        if v is not None and own is not None and str(v) != str(own):
            bits.append(f"{_SHORT_KEYS[axis]}{v}")
    return str(rec.get("method") or rec.get("family")) + at + "".join("·" + b for b in bits)


def decoder_label(decoder: str) -> str:
    """``best_of_n(n=8,pool=32)`` → ``BoN8`` (a decoder's label as the config writes it: ``name(key=value,…)``)."""
    name, _, args = decoder.partition("(")
    params = dict(p.split("=", 1) for p in args.rstrip(")").split(",") if "=" in p)
    return _DECODERS.get(name, name) + params.get("n", "")


def report_labels(results: Mapping[str, Any], labels: Iterable[str] = ()) -> dict[str, str]:
    """Full label → compact label for every system of ``systems.members``, every ``downstream`` output whose guide is
    one of them, and every other label of ``labels`` (kept whole)."""
    from perbench.systems import fit_label

    members = _d(_d(results.get("systems")).get("members"))
    seed, shots = _run_value(results, members, "seed"), _run_value(results, members, "shots")
    out: dict[str, str] = {}
    for label, rec in members.items():
        rec = _d(rec)
        if rec.get("pooled_as") in members and rec.get("pooled_as") != label:
            continue  # one extra fit of a pooled system: named below, after its system
        out[label] = member_label(rec, seed, shots)
        for i in range(1, len(rec.get("fit_seeds") or [])):  # the extra fits, by their index as the labels say
            out[fit_label(label, i)] = f"{out[label]}·fit{i}"
    for label, entry in _d(results.get("downstream")).items():
        guide = str(_d(entry).get("guide") or "")
        if guide in out and label.endswith(f"[{guide}]"):
            out[label] = f"{decoder_label(label[: -len(guide) - 2])}[{out[guide]}]"
    for label in labels:
        out.setdefault(str(label), str(label))
    taken = Counter(out.values())
    return {full: (short if taken[short] == 1 else full) for full, short in out.items()}


def short(label: Any, names: Mapping[str, str]) -> str:
    """The compact label of ``label`` (``names`` from :func:`report_labels`); a ``" (…)"`` suffix is kept."""
    text = str(label)
    if text in names:
        return names[text]
    base, sep, rest = text.partition(" (")
    return names[base] + sep + rest if sep and base in names else text


def legend_rows(names: Mapping[str, str], among: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(compact, full) for every label that was shortened (only those of ``among`` when given)."""
    keep = None if among is None else {str(x) for x in among}
    return [(s, f) for f, s in names.items() if s != f and (keep is None or f in keep)]


def name_cell(label: Any, names: Mapping[str, str]) -> str:
    """A system's compact label as HTML, its full label on hover."""
    from perbench.report.templating import render

    return str(render("name.html.j2", full=str(label), short=short(label, names)))


def legend(names: Mapping[str, str], among: Iterable[str] | None = None) -> str:
    """A compact "label = full label" list of the labels that were shortened ("" when none was)."""
    from perbench.report.templating import render

    return str(render("legend.html.j2", rows=legend_rows(names, among)))


def shorten_text(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every full label that was shortened replaced by its compact form (longest first)."""
    for full in sorted((f for f, s in names.items() if s != f), key=len, reverse=True):
        text = text.replace(full, names[full])
    return text


#: line styles and markers that tell the variants of one family apart (the colour names the family)
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")


def family_styles(labels: Iterable[str], palette: tuple[str, ...]) -> dict[str, tuple[str, str, str]]:
    """label → (colour, line style, marker): one colour per method family (the label up to its first ``(`` or
    ``@``, inside a decoder's brackets when there are some), the variant told by line style and marker."""
    fams: dict[str, list[str]] = {}
    inner: dict[str, str] = {}
    for label in dict.fromkeys(labels):
        inner[label] = label.split("[", 1)[1].rsplit("]", 1)[0] if "[" in label else label
        fams.setdefault(inner[label].split("(", 1)[0].split(" ", 1)[0], []).append(label)
    out = {}
    for i, members in enumerate(fams.values()):
        # the full-data variant (no parenthesis) first: it gets the solid line
        for j, label in enumerate(sorted(members, key=lambda x: ("(" in inner[x], x))):
            out[label] = (palette[i % len(palette)], LINESTYLES[j % len(LINESTYLES)], MARKERS[j % len(MARKERS)])
    return out

"""Compact system labels for the report: ``mpu(train_fraction=0.25)`` → ``mpu@25%``, ``lore(K=2,seed=1)`` →
``lore·K2·s1``, ``best_of_n(n=8,pool=32)[lore(train_fraction=0.5)]`` → ``BoN8[lore@50%]``. Every table and plot
uses them; :func:`legend` maps each back to the full label. Distinct full labels keep distinct short ones (a
collision falls back to the full label)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from perbench.report.fmt import esc

_SHORT_KEYS = {"seed": "s", "shots": "sh", "pool": "p"}
_DECODER = re.compile(r"^(?P<dec>[a-z_]+)(?:\((?P<args>[^\[\]]*)\))?\[(?P<rm>.+)\](?P<rest>.*)$")
_CALL = re.compile(r"^(?P<name>[^()]+)\((?P<args>.*)\)(?P<rest>.*)$")


def _fraction(v: str) -> str:
    try:
        return f"{100 * float(v):g}%"
    except ValueError:
        return v


def _args(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        k, eq, v = part.partition("=")
        if eq:
            out.append((k.strip(), v.strip()))
    return out


def _short_call(label: str) -> str:
    m = _CALL.match(label)
    if m is None:
        return label
    name, rest = m.group("name"), m.group("rest")
    pairs = _args(m.group("args"))
    if not pairs:
        return label
    at = ""
    bits = []
    for k, v in pairs:
        if k == "train_fraction":
            at = "@" + _fraction(v)
        else:
            bits.append(f"{_SHORT_KEYS.get(k, k)}{v}")
    return name + at + "".join("·" + b for b in bits) + rest


def short_label(label: str) -> str:
    """The compact form of one label (see the module docstring); a label it cannot parse is kept."""
    m = _DECODER.match(label)
    if m is not None:
        dec = {"best_of_n": "BoN", "args": "ARGS", "genarm": "GenARM"}.get(m.group("dec"), m.group("dec"))
        n = dict(_args(m.group("args") or "")).get("n", "")
        return f"{dec}{n}[{_short_call(m.group('rm'))}]{m.group('rest')}"
    return _short_call(label)


def short_labels(labels: Iterable[str]) -> dict[str, str]:
    """Full label → compact label for every label; when two full labels would share a compact one, both keep
    their full label."""
    full = list(dict.fromkeys(str(x) for x in labels))
    short = {x: short_label(x) for x in full}
    seen: dict[str, int] = {}
    for s in short.values():
        seen[s] = seen.get(s, 0) + 1
    return {x: (s if seen[s] == 1 else x) for x, s in short.items()}


def legend(names: Mapping[str, str]) -> str:
    """A compact "label = full label" list for the labels that were shortened ("" when none was)."""
    rows = [(s, f) for f, s in names.items() if s != f]
    if not rows:
        return ""
    items = "".join(f"<span><b>{esc(s)}</b> = <code>{esc(f)}</code></span>" for s, f in rows)
    return (
        f'<details class="legend"><summary>Labels ({len(rows)} shortened)</summary><p class="lg">{items}</p></details>'
    )


def name_cell(label: str, names: Mapping[str, str]) -> str:
    """A system's compact label as HTML, its full label on hover."""
    short = names.get(label, label)
    if short == label:
        return esc(label)
    return f'<span title="{esc(label)}">{esc(short)}</span>'


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

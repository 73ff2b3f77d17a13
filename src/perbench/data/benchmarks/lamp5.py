"""The LaMP-5 files Pref-LaMP is built from: where they are (user- or time-based layout, flat or in ``train/`` and
``dev/`` subfolders), the gold titles of a ``*_outputs.json`` file, and a question's abstract and profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from perbench.data.reading import parse_json, read_text
from perbench.data.records import ProfileItem
from perbench.data.rows import DataError, Row, type_name

LAMP5_PREFIX = "Generate a title for the following abstract of a paper: "


def _has_questions(folder: Path) -> bool:
    return any(folder.glob("*_questions.json")) or any(folder.glob("*/*_questions.json"))


def lamp5_dir(path: str | Path, layout: Literal["auto", "user", "time"] = "auto") -> tuple[Path, str]:
    """The folder holding the LaMP-5 files and which layout it is.

    ``path`` may be that folder itself, or the LaMP root holding ``LaMP_5/`` and/or ``time/LaMP_5/``. The
    files may sit directly in the folder or in ``train/`` and ``dev/`` subfolders (the download layout).
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such folder")
    options = {"user": root / "LaMP_5", "time": root / "time" / "LaMP_5"}
    order = ["user", "time"] if layout == "auto" else [layout]
    for key in order:
        if options[key].is_dir() and _has_questions(options[key]):
            return options[key], key
    if _has_questions(root):
        return root, layout
    raise FileNotFoundError(
        f"{root}: no LaMP-5 files; expected *_questions.json in {', '.join(str(options[k]) for k in order)}"
    )


def lamp5_file(folder: Path, split: str, kind: str) -> Path:
    """``{split}_{kind}.json`` directly in ``folder`` or in ``folder/{split}/``."""
    name = f"{split}_{kind}.json"
    for candidate in (folder / name, folder / split / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{folder / name}: missing (also looked in {folder / split / name})")


def strip_prefix(text: str) -> tuple[str, bool]:
    """The abstract without LaMP-5's instruction prefix; the flag says whether the prefix was there."""
    if text.startswith(LAMP5_PREFIX):
        return text[len(LAMP5_PREFIX) :], True
    return text, False


def read_golds(path: Path) -> dict[str, tuple[str, int]]:
    """``{id: (title, position)}`` from a ``*_outputs.json`` file (``{"task", "golds": [{id, output}]}``)."""
    label = str(path)
    obj = parse_json(label, None, read_text(path, "JSON text"))
    if not isinstance(obj, Mapping):
        raise DataError(label, None, None, f'expected {{"task", "golds": [...]}}, got {type_name(obj)}')
    if "golds" not in obj:
        raise DataError(label, None, "golds", "missing")
    if not isinstance(obj["golds"], list):
        raise DataError(label, None, "golds", f"expected a list, got {type_name(obj['golds'])}")
    golds: dict[str, tuple[str, int]] = {}
    for i, gold in enumerate(obj["golds"], 1):
        if not isinstance(gold, Mapping):
            raise DataError(label, i, None, f"expected an {{id, output}} object, got {type_name(gold)}")
        row = Row(label, i, gold)
        gid = row.ident("id")
        if gid in golds:
            raise row.error("id", f"duplicate gold id {gid!r} (first at {label}:{golds[gid][1]})")
        golds[gid] = (row.text("output"), i)
    return golds


def profile_items(row: Row) -> list[ProfileItem]:
    items = []
    for i, item in enumerate(row.seq("profile")):
        if not isinstance(item, Mapping):
            raise row.error(f"profile.{i}", f"expected an {{id, title, abstract}} object, got {type_name(item)}")
        sub = Row(row.label, row.line, item)
        try:
            title = sub.text("title")
            abstract = sub.text("abstract", allow_empty=True) if "abstract" in item else ""
            item_id = sub.ident("id") if "id" in item else str(i)
        except DataError as e:
            raise row.error(f"profile.{i}.{e.field}", e.message) from None
        text = f'"{title}" is a title for "{abstract}"'
        items.append(ProfileItem(item_id, text, {"title": title, "abstract": abstract}))
    return items

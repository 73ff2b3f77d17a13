"""The report's Jinja2 environment: templates under ``perbench/report/templates`` (shipped as package data),
autoescape on (every value from data is text, never markup), undefined names an error."""

from __future__ import annotations

from functools import cache
from typing import Any

from markupsafe import Markup


@cache
def environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("perbench.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


def render(template: str, **context: Any) -> Markup:
    """``templates/TEMPLATE`` rendered with ``context`` (already-safe parts are :class:`markupsafe.Markup`)."""
    return Markup(environment().get_template(template).render(**context))

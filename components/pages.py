"""One HTML page shell for every page the steps write: the run report, the evaluation page, the
grid pages (training grid, GPU-vs-TPU sweep, inference benchmark).

The shell (a Jinja2 template, autoescaped) owns the page's head: doctype, charset, title, the
inline style sheet; then the title as the page's heading and the caller's content blocks. A block
is a :class:`Markup` (HTML the caller built, its values escaped: by :func:`fragment`, or by
``html.escape``) or plain text, which the shell escapes. The pages are self-contained: no
script, nothing fetched (charts are inline SVG, images ``data:`` URIs), so they open the same
from a laptop's disk and in the Kubeflow UI's sandboxed frame.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Union

import jinja2
from markupsafe import Markup

__all__ = ["GRID_CSS", "Markup", "fragment", "page", "table"]

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)

_SHELL = """<!DOCTYPE html>
<html{% if lang %} lang="{{ lang }}"{% endif %}><head><meta charset="utf-8">
{%- if viewport %}<meta name="viewport" content="width=device-width, initial-scale=1">{% endif -%}
<title>{{ title }}</title><style>{{ css }}</style></head><body>
{% if heading %}<h1>{{ title }}</h1>
{% endif %}{{ blocks | join("\n") }}
</body></html>
"""

_TABLE = (
    "<table><tr>{% for h in heads %}<th{% if loop.index0 < left %} class=l{% endif %}>{{ h }}</th>{% endfor %}</tr>"
    '{% for row in rows %}<tr{% if classes[loop.index0] %} class="{{ classes[loop.index0] }}"{% endif %}>'
    "{% for c in row %}<td{% if loop.index0 < left %} class=l{% endif %}>{{ c }}</td>{% endfor %}</tr>{% endfor %}"
    "</table>"
)

# The grid pages' style: a plain table, numbers right-aligned, the first column (the row's name)
# left-aligned, the best rows bold and failed ones red.
GRID_CSS = (
    "body{font-family:sans-serif;margin:16px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child"
    "{text-align:left}tr.best{font-weight:bold}tr.failed{color:#b3261e}"
)

Block = Union[Markup, str]


@functools.cache
def _template(source: str) -> jinja2.Template:
    return _ENV.from_string(source)


def fragment(source: str, **values: Any) -> Markup:
    """A piece of a page from a Jinja2 template; every value is escaped unless it is :class:`Markup`.

    Args:
        source: the template text (``{{ name }}``, ``{% for %}``...).
        **values: the names the template uses; a name it uses and is not given is an error.

    Returns:
        The HTML, ready to be a block of :func:`page` or a value of another fragment.
    """
    return Markup(_template(source).render(**values))


def page(
    title: str,
    blocks: Sequence[Block],
    css: str,
    *,
    heading: bool = True,
    lang: str = "",
    viewport: bool = False,
) -> str:
    """A whole self-contained HTML page: the shell around the caller's blocks.

    Args:
        title: the page's title (escaped), also its ``<h1>`` when ``heading`` is true.
        blocks: the page's content in order, one per line: :class:`Markup` is kept as it is,
            plain text is escaped.
        css: the page's style sheet, written inline (a constant of the caller, not user data).
        heading: write the title as the first heading; false when a block brings its own header.
        lang: the ``lang`` attribute of ``<html>``; empty: none.
        viewport: add the ``viewport`` meta tag (a page meant for phones as well).

    Returns:
        The page's text, ending with a newline.

    Raises:
        ValueError: ``css`` would close the ``<style>`` element (it contains ``</``).
    """
    if "</" in css:
        raise ValueError(f"page {title!r}: the style sheet must not contain '</' (it would end <style>), got {css!r}")
    return _template(_SHELL).render(
        title=title, blocks=list(blocks), css=Markup(css), heading=heading, lang=lang, viewport=viewport
    )


def table(heads: Sequence[Any], rows: Sequence[Sequence[Any]], *, left: int = 0, classes: Sequence[str] = ()) -> Markup:
    """An HTML table, every cell escaped (``str(cell)``; format numbers before).

    Args:
        heads: the column titles.
        rows: the rows' cells.
        left: the first ``left`` columns get ``class=l`` (left-aligned text, where the page's
            style right-aligns numbers).
        classes: a ``class`` per row (``best``, ``failed``; empty: none); none given: no classes.

    Returns:
        The ``<table>`` element.

    Raises:
        ValueError: ``classes`` is given and is not one per row.
    """
    if classes and len(classes) != len(rows):
        raise ValueError(f"html table: {len(classes)} row classes for {len(rows)} rows: {list(classes)}")
    return fragment(_TABLE, heads=heads, rows=rows, left=left, classes=list(classes) or [""] * len(rows))

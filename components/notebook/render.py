"""The executed notebook as one self-contained HTML page, for the Kubeflow UI's sandboxed frame.

nbconvert's templates load MathJax, require.js, mermaid and widget scripts from CDNs; every such URL
is emptied here (the Kubeflow UI shows an HTML artifact in a sandboxed iframe, where a page must
not depend on the network). The lab template's CSS is inline already.
"""

from __future__ import annotations

import re
from typing import Any

# HTMLExporter traits naming a script or style sheet on the network (nbconvert 7.17). Emptied
# ones render as ``<script src="">`` or are skipped by the template; set only those that exist.
_URL_TRAITS = (
    "mathjax_url",
    "require_js_url",
    "mermaid_js_url",
    "mermaid_layout_elk_js_url",
    "jquery_url",
    "widget_renderer_url",
    "jupyter_widgets_base_url",
)

# Things a browser loads (links a reader may follow, <a href>, are not loads).
_LOADS = (
    re.compile(
        r"<(?:script|link|img|iframe|source|video|audio|embed|object)\b[^>]*?\b(?:src|href|data)\s*=\s*"
        r"[\"']?\s*((?:https?:)?//[^\"'\s>]+)",
        re.IGNORECASE,
    ),
    re.compile(r"@import\s+(?:url\()?\s*[\"']?\s*((?:https?:)?//[^\"')\s;]+)", re.IGNORECASE),
    re.compile(r"url\(\s*[\"']?\s*((?:https?:)?//[^\"')\s]+)", re.IGNORECASE),
    re.compile(r"\bimport\s*\(\s*[\"']((?:https?:)?//[^\"']+)", re.IGNORECASE),
    re.compile(r"\bfrom\s+[\"']((?:https?:)?//[^\"']+)", re.IGNORECASE),
)
_EMPTY_SCRIPT = re.compile(r"<script\s+src=\"\"\s*>\s*</script>\s*", re.IGNORECASE)


def network_references(html: str) -> list[str]:
    """The URLs a browser would fetch from the network to show ``html`` (scripts, styles, fonts, images)."""
    return sorted({m.group(1) for pattern in _LOADS for m in pattern.finditer(html)})


def render_html(nb: Any) -> str:
    """Renders an executed notebook (an nbformat node) to one HTML page with no CDN scripts.

    Returns:
        The page. References to the network that remain come from the notebook's own outputs
        (an output that embeds a remote script or image); :func:`network_references` lists them.
    """
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    for trait in _URL_TRAITS:
        if exporter.has_trait(trait):
            setattr(exporter, trait, "")
    body, _ = exporter.from_notebook_node(nb)
    return _EMPTY_SCRIPT.sub("", body)

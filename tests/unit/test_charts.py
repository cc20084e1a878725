"""The shared charts (matplotlib, inline SVG): well-formed, self-contained, showing the data."""

import xml.etree.ElementTree as ET

import pytest

from components import charts

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return [t.text for t in ET.fromstring(svg).iter(SVG + "text") if t.text]


def _self_contained(svg: str) -> None:
    assert svg.startswith("<svg ") and svg.rstrip().endswith("</svg>")
    assert "<script" not in svg and "<metadata" not in svg
    assert 'href="http' not in svg and "url(http" not in svg


def test_bar_chart_labels_each_bar_with_its_value():
    svg = charts.bar_chart("Throughput", ["in process", "REST"], [5630.4, None], "images/s")
    _self_contained(svg)
    texts = _texts(svg)
    assert {"in process", "REST", "5,630", "n/a", "images/s", "Throughput"} <= set(texts)
    assert ET.fromstring(svg).get("aria-label") == "Throughput"


def test_line_chart_and_heatmap_show_their_data():
    svg = charts.line_chart("loss per epoch", {"train": ([1, 2, 3], [2.0, 1.0, 0.5])}, "epoch", "loss", integer_x=True)
    _self_contained(svg)
    assert {"train", "epoch", "loss per epoch"} <= set(_texts(svg))
    heat = charts.heatmap("Confusion matrix", [[5, 1], [0, 7]], ["cat", "dog"], "predicted", "true")
    _self_contained(heat)
    assert {"5", "1", "7", "cat", "dog", "predicted", "true"} <= set(_texts(heat))


def test_same_chart_same_bytes():
    args = ("Batch latency", ["p50", "p95"], {"a": [1.0, 2.0], "b": [3.0, None]}, "ms")
    assert charts.grouped_bars(*args) == charts.grouped_bars(*args)


@pytest.mark.parametrize(
    "call",
    [
        lambda: charts.bar_chart("t", ["a", "b"], [1.0]),
        lambda: charts.grouped_bars("t", ["a", "b"], {"s": [1.0]}),
        lambda: charts.line_chart("t", {"s": ([1, 2], [1.0])}),
        lambda: charts.heatmap("t", [[1, 2]], ["a", "b"], "x", "y"),
    ],
)
def test_mismatched_data_is_refused_with_a_message(call):
    with pytest.raises(charts.ChartError, match="t"):
        call()

"""The price table: shipped defaults, user overrides, validation, images per dollar."""

import pytest

from trainer.budget.pricing import (
    PriceTableError,
    images_per_dollar,
    load_price_table,
    lookup,
    parse_price_table,
)


def test_defaults_hold_the_case_study_prices():
    table = load_price_table()
    expected = {"cpu-8": 0.28, "cpu-64": 2.27, "k80": 0.64, "v100": 2.67, "tpu-v3-8": 8.19}
    for name, price in expected.items():
        assert table[name].price_per_hour == price
        assert table[name].source == "case study"
    assert table["tpu-v2-8"].source.startswith("estimate")
    assert table["tpu-v3-8"].cores == 8 and table["tpu-v3-8"].kind == "tpu"


def test_case_study_images_per_dollar():
    # The case study's TPU v3-8: 118.5 images/s at $8.19/h; its CPU-8: 1.53 images/s at $0.28/h.
    tpu = images_per_dollar(118.5, 8.19)
    cpu = images_per_dollar(1.53, 0.28)
    assert tpu == pytest.approx(52_087.9, rel=1e-4)
    assert tpu > cpu  # the TPU is both fastest and cheapest per image
    assert images_per_dollar(10.0, 0.0) is None
    with pytest.raises(ValueError):
        images_per_dollar(-1.0, 1.0)


def test_user_table_overrides_and_adds(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "accelerators:\n  cpu-8: {price_per_hour: 0.30, kind: cpu, cores: 8}\n"
        "  a100: {price_per_hour: 3.67, kind: gpu, label: A100}\n"
    )
    table = load_price_table(str(path))
    assert table["cpu-8"].price_per_hour == 0.30 and table["cpu-8"].source == str(path)
    assert table["a100"].label == "A100" and table["a100"].cores == 1
    assert table["v100"].price_per_hour == 2.67


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accelerators:\n  x: {price_per_hour: -0.5, kind: cpu}\n", "negative price_per_hour"),
        ("accelerators:\n  x: {kind: cpu}\n", "needs a numeric price_per_hour"),
        ("accelerators:\n  x: {price_per_hour: 1, kind: fpga}\n", "kind must be one of"),
        ("accelerators:\n  x: {price_per_hour: 1, kind: cpu, colour: red}\n", "unknown field"),
        ("cpu-8: 0.28\n", "one key 'accelerators'"),
    ],
)
def test_bad_tables_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PriceTableError, match=message):
        load_price_table(str(path))


def test_unknown_accelerator_and_missing_file():
    table = parse_price_table({"accelerators": {"cpu-8": {"price_per_hour": 0.28, "kind": "cpu"}}})
    with pytest.raises(PriceTableError, match="no price for accelerator 'tpu-v9'; the price table knows cpu-8"):
        lookup(table, "tpu-v9")
    with pytest.raises(PriceTableError, match="does not exist"):
        load_price_table("/nonexistent/prices.yaml")

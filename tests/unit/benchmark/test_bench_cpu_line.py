"""The CPU line ``make bench`` prints first: the model name and whether it has bf16 units."""

from pathlib import Path

from tests.benchmarks.cpu import cpu_line, versus

CPUINFO = Path(__file__).parents[1] / "cpuinfo"  # tests/unit/cpuinfo


def test_a_cpu_with_bf16_units_names_them(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    line = cpu_line((CPUINFO / "amd-epyc-avx512-bf16.txt").read_text())
    assert line.startswith("CPU: AMD EPYC, ") and "bf16 flags: avx512_bf16" in line and "oneDNN uses them" in line


def test_a_cpu_without_them_says_bfloat16_is_emulated():
    line = cpu_line((CPUINFO / "amd-epyc-avx2.txt").read_text())
    assert "bf16 flags: none (bfloat16 is emulated here)" in line
    assert cpu_line("").startswith("CPU: unknown, ")


def test_a_ratio_is_printed_next_to_its_target():
    assert versus("wall, convert / baseline", 1.234, ">= 1.3x") == "wall, convert / baseline: 1.23x (target >= 1.3x)"

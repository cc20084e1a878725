"""benchmark_inference with adaptive rounds on a real SavedModel: the rounds it ran, its progress lines."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from components import progress
from components.benchmark.component import benchmark_inference
from tests.eval_bench_fixtures import tiny_assets

pytestmark = [pytest.mark.slow, pytest.mark.integration]


class _Metrics(SimpleNamespace):
    def log_metric(self, name, value):
        self.values[name] = value


def test_rounds_and_target_spread_reach_the_timing_and_progress_ends_at_its_total(tmp_path, capsys):
    assets = tiny_assets()
    report = SimpleNamespace(path=str(tmp_path / "report.md"))
    benchmark_inference.python_func(
        model=SimpleNamespace(path=assets["model"]),
        dataset=SimpleNamespace(path=assets["dataset"]),
        metrics=_Metrics(values={}),
        report=report,
        num_images=32,
        batch_size=16,
        http=False,
        warmup_batches=0,
        rounds=2,
        target_spread=0.5,
    )
    assert "the median of 2 timed rounds, within " in Path(report.path).read_text()
    lines = [fields for line in capsys.readouterr().out.splitlines() if (fields := progress.parse(line))]
    assert lines and all(x["step"] == "benchmark" and x["total"] == 4 for x in lines)  # 2 batches x 2 rounds
    assert lines[-1]["done"] == 4 and lines[-1]["eta_s"] == 0.0

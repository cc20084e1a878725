"""The monitor's report and config, the load objectives and their history record, and the metrics
page's text form, without servers."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from components.monitor.run import MonitorReport, ObjectiveResult, StageStatus, status_line
from components.serving.checks import CheckResult
from components.serving.config import LoadTestConfig, MonitorConfig
from components.serving.load import LoadTestRecord
from components.serving.metrics import ServingMetrics, status_code_name
from components.serving.stages import StageEntry
from trainer.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def test_monitor_config_validation():
    assert MonitorConfig(stages=["demo"]).stages == ("demo",)
    with pytest.raises(ConfigError, match="monitor.window: must be a PromQL duration"):
        MonitorConfig(window="an hour")
    with pytest.raises(ConfigError, match="monitor.stages: expected some of"):
        MonitorConfig(stages=["qa"])
    with pytest.raises(ConfigError, match="monitor.prometheus_url: must be an http"):
        MonitorConfig(prometheus_url="prometheus:9090")


def test_report_table_metrics_and_status():
    ok = ObjectiveResult("ModelServerErrorRatioHigh", 0.002, 0.01, ">", True, "1 series")
    slow = ObjectiveResult("ModelServerLatencyP99High", 412.0, 300.0, ">", False, "1 series; missed")
    quiet = ObjectiveResult("ModelServerLatencyP99High", None, 1000.0, ">", True, "no data (no traffic)")
    check = CheckResult("prediction", True, "16/16 right")
    report = MonitorReport(
        (StageStatus("prod", 4, (ok, slow), (check,)), StageStatus("staging", 2, (quiet,)), StageStatus("demo", None)),
        "1h",
    )
    assert not report.passed and report.broken == ["prod"]
    assert status_line(report) == "broken: prod: ModelServerLatencyP99High"
    text = report.to_markdown()
    assert text.startswith("# Monitor: BROKEN: prod")
    assert "| ModelServerLatencyP99High | NO | 412 | > 300: 1 series; missed |" in text
    assert "| ModelServerLatencyP99High | yes | no data |" in text and "## demo: serves nothing" in text
    assert report.metrics() == {
        "prod_passed": 0.0,
        "prod_ModelServerErrorRatioHigh": 0.002,
        "prod_ModelServerLatencyP99High": 412.0,
        "staging_passed": 1.0,
        "demo_passed": 1.0,
    }
    healthy = MonitorReport((StageStatus("prod", 4, (ok,), (check,)),), "30m")
    assert status_line(healthy) == "ok" and healthy.to_markdown().startswith("# Monitor: all stages healthy")


def test_load_objectives_and_their_history_record():
    settings = LoadTestConfig(max_p50_ms=10, max_p99_ms=50, min_requests_per_s=100, max_errors=1)
    figures = {"p50_ms": 8.0, "p95_ms": 30.0, "p99_ms": 61.5, "requests_per_s": 90.0, "errors": 2, "requests": 50}
    assert settings.violations(figures) == [
        "p99 61.5 ms > objective 50 ms",
        "90.0 req/s < objective 100 req/s",
        "2 errors > allowed 1",
    ]
    assert LoadTestConfig(max_p99_ms=50).violations({"errors": 3, "requests": 3}) == [
        "p99 none answered > objective 50 ms",
        "3 errors > allowed 0",
    ]
    record = LoadTestRecord.of({**figures, "clients": 4, "duration_s": 0.6}, settings.objectives(), passed=False)
    assert record.objectives == {"max_p50_ms": 10.0, "max_p99_ms": 50.0, "min_requests_per_s": 100.0, "max_errors": 1.0}
    entry = StageEntry(action="rollback", version=1, model_uri="m", run="r", failed_load_test=record)
    again = StageEntry.from_json(entry.to_json())
    assert again == entry and again.failed_load_test.p99_ms == 61.5 and again.load_test is None
    unanswered = LoadTestRecord.of({"requests": 3, "errors": 3}, {}, passed=False)
    assert "p50_ms" not in unanswered.to_dict() and LoadTestRecord.from_dict(unanswered.to_dict()) == unanswered


def test_metrics_text_form_without_a_server():
    metrics = ServingMetrics()
    metrics.record_request("clf", "predict", 200, 1500.0)
    metrics.record_request("clf", "predict", 400, 90.0)
    metrics.record_request('we"ird\\name', "", 404, 10.0)
    metrics.record_load("/m/1", ok=False)
    text = metrics.render()
    assert ':tensorflow:serving:request_count{model_name="clf",status="INVALID_ARGUMENT"} 1' in text.splitlines()
    assert 'model_name="we\\"ird\\\\name"' in text  # escaped as TF Serving escapes label values
    assert (
        ':tensorflow:serving:request_latency_bucket{model_name="clf",API="predict",entrypoint="REST",le="1983.59"} 1'
        in text
    )
    assert ':tensorflow:serving:request_latency_sum{model_name="clf",API="predict",entrypoint="REST"} 1500' in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    loads = families[":tensorflow:cc:saved_model:load_attempt_count"].samples
    assert [(s.labels, s.value) for s in loads] == [({"model_path": "/m/1", "status": "fail"}, 1.0)]
    assert ":tensorflow:cc:saved_model:load_latency" not in families  # only successful loads have a time
    assert [status_code_name(c) for c in (200, 400, 404, 413, 500, 418)] == [
        "OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "INTERNAL", "UNKNOWN",
    ]  # fmt: skip
    assert not math.isnan(families[":tensorflow:serving:request_latency"].samples[-1].value)


def test_monitor_cli_with_no_stage_serving_and_with_bad_input(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "components.monitor", *args],
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            timeout=120,
        )

    empty = run("--stages-root", str(tmp_path), "--prometheus-url", "http://127.0.0.1:9")
    assert empty.returncode == 0 and "## demo: serves nothing" in empty.stdout
    bad = run("--stages-root", str(tmp_path), "--window", "soon")
    assert bad.returncode == 2 and bad.stderr.startswith("error: monitor.window")

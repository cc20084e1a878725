"""The drift and input-quality checks (components/monitor/drift.py) on Fashion-MNIST traffic and its shifts.

The reference is a nearest-centroid model's answers on the test split; unshifted windows are
drawn from the training split with different seeds; each synthetic shift must fire its check
in one window of the largest minimum sample count, and no unshifted window may fire at all.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import types

import numpy as np
import pytest
import yaml

from components.monitor import rules
from components.monitor.drift import (
    DriftConfig,
    DriftReport,
    check_window,
    drift_folder,
    gauges,
    js_divergence,
    psi,
    stage_drift,
    write_drift,
)
from components.serving.reference import build_reference
from components.serving.traffic import Exchange, TrafficConfig, TrafficLog, summaries_of, traffic_dir
from tests import traffic_fixtures as fx
from trainer.config import ConfigError

CONFIG = DriftConfig()
WINDOW = max(CONFIG.min_class_samples, CONFIG.min_psi_samples, CONFIG.min_rate_samples)


@pytest.fixture(scope="module")
def stage():
    """(model, reference, traffic images, traffic labels): reference from the test split, traffic from train."""
    train_images, train_labels = fx.load_split("train")
    test_images, _ = fx.load_split("t10k")
    model = fx.CentroidModel(train_images[:20_000], train_labels[:20_000])
    encoded = [fx.png(i) for i in test_images[:3_000]]
    reference = build_reference(summaries_of(encoded, fx.answers(model, encoded, test_images[:3_000]), TrafficConfig()))
    return model, reference, train_images[20_000:], train_labels[20_000:]


def _window(stage, count: int, seed: int, shift: str = "") -> list[dict]:
    model, _, images, labels = stage
    encoded, seen = fx.draw(images, labels, count, seed, shift)
    return summaries_of(encoded, fx.answers(model, encoded, seen), TrafficConfig())


def test_twenty_unshifted_windows_raise_no_alarm(stage):
    fired = {}
    for seed in range(20):
        checks = check_window(_window(stage, WINDOW, seed), stage[1], CONFIG)
        assert {c.state for c in checks} == {"ok"}, [c for c in checks if c.state != "ok"]
        fired[seed] = [c.name for c in checks if c.state == "alarm"]
    assert sum(map(len, fired.values())) == 0


@pytest.mark.parametrize("shift", fx.SHIFTS)
def test_each_shift_fires_its_check_in_one_window_of_the_minimum_count(stage, shift):
    checks = {c.name: c for c in check_window(_window(stage, WINDOW, 1_000, shift), stage[1], CONFIG)}
    check = checks[fx.SHIFT_CHECK[shift]]
    assert check.state == "alarm" and check.figure > check.threshold and check.samples >= check.minimum


def test_a_window_under_the_minimum_says_not_enough_traffic_and_never_fires(stage):
    checks = check_window(_window(stage, 50, 7, "undecodable"), stage[1], CONFIG)
    assert {c.state for c in checks} == {"not_enough_traffic"} and all(c.figure is None for c in checks)


def test_without_a_reference_nothing_is_compared(tmp_path):
    entry = types.SimpleNamespace(version=2, model_uri="")
    report = stage_drift(str(tmp_path), "prod", "classifier", entry, 0, time.time(), CONFIG)
    assert not report.alarm and {c.state for c in report.checks} == {"no_reference"}
    assert "no reference" in report.line() and "\n" not in report.line()


def test_divergence_and_psi_are_zero_for_the_same_and_large_for_disjoint():
    assert js_divergence({"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}) == 0
    assert js_divergence({"a": 1.0}, {"b": 1.0}) == pytest.approx(1.0)
    bins = {"edges": [1.0, 2.0], "shares": [0.2, 0.5, 0.3]}
    same = np.array([0.5] * 2 + [1.5] * 5 + [2.5] * 3)
    assert psi(same, bins) == pytest.approx(0.0) and psi(np.full(10, 9.0), bins) > 2


def test_bad_thresholds_are_one_line():
    with pytest.raises(ConfigError, match="max_class_change") as err:
        DriftConfig(max_class_change=2.0)
    assert "\n" not in str(err.value)


def test_a_stage_s_window_is_read_from_its_shards_and_drift_json_says_everything(stage, tmp_path):
    root, model_uri = str(tmp_path / "stages"), str(tmp_path / "model")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "traffic_reference.json").write_text(json.dumps(stage[1]))
    encoded, seen = fx.draw(stage[2], stage[3], WINDOW, 5, "darkened")
    answers = fx.answers(stage[0], encoded, seen)
    now = time.time()
    with TrafficLog(traffic_dir(root, "prod"), TrafficConfig(sample_rate=1.0)) as traffic:
        for i, (data, answer) in enumerate(zip(encoded, answers, strict=True)):
            body = {"instances": [{"b64": base64.b64encode(data).decode()}]}
            reply = {"predictions": [answer]} if answer else {"error": "bad image"}
            traffic.offer(lambda b=body, r=reply, i=i: Exchange("classifier", 4, 200, 3.0, b, r, time=now + i / 1000))
    entry = types.SimpleNamespace(version=4, model_uri=model_uri)
    report = stage_drift(root, "prod", "classifier", entry, now - 1, now + 60, CONFIG)
    assert report.samples == WINDOW and "psi_brightness" in report.fired and report.reference.endswith("reference.json")
    written = json.loads(open(write_drift(report, drift_folder(root, "prod", "classifier"))).read())
    assert written["stage"] == "prod" and written["model_version"] == 4 and written["samples"] == WINDOW
    assert written["alarm"] is True and set(written["window"]) == {"start", "end"}
    assert {"name", "figure", "threshold", "minimum", "samples", "state"} <= set(written["checks"][0])
    latest = json.loads((tmp_path / "stages" / "prod" / "drift" / "classifier" / "latest.json").read_text())
    assert latest == written and isinstance(report, DriftReport)


def test_an_unreadable_reference_is_one_line_naming_it(tmp_path):
    (tmp_path / "traffic_reference.json").write_text("{not json")
    entry = types.SimpleNamespace(version=1, model_uri=str(tmp_path))
    with pytest.raises(ValueError, match="traffic_reference.json: unreadable traffic reference") as err:
        stage_drift(str(tmp_path / "stages"), "prod", "classifier", entry, 0, 1, CONFIG)
    assert "\n" not in str(err.value)


SHIFT_ALERT = {
    "class_withheld": "TrafficClassSharesShifted",
    "darkened": "TrafficImagesShifted",
    "quarter_size": "TrafficImagesShifted",
    "undecodable": "TrafficDecodeFailuresHigh",
}
# The checks each alert watches (an alert fires exactly when one of them is in alarm).
ALERT_CHECKS = {
    "TrafficClassSharesShifted": {"class_shares"},
    "TrafficClassShareChanged": {"class_change"},
    "TrafficScoresShifted": {"psi_score", "psi_margin"},
    "TrafficImagesShifted": {f"psi_{f}" for f in ("width", "height", "channels", "brightness", "contrast")},
    "TrafficDecodeFailuresHigh": {"decode_failures"},
    "TrafficEmptyAnswersHigh": {"empty_answers"},
}


def _series(report: DriftReport) -> list[dict]:
    """The report's gauges as promtool input series (each value held for five minutes)."""
    return [
        {"series": line.rsplit(" ", 1)[0], "values": f"{line.rsplit(' ', 1)[1]}x5"}
        for line in gauges([report]).splitlines()
        if not line.startswith("#")
    ]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: `make prometheus` installs it")
def test_the_alert_rules_fire_on_each_shift_s_gauges_and_stay_quiet_on_unshifted_ones(stage, tmp_path):
    group = rules.rule_groups("prod")[1]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    summaries = {r["alert"]: r["annotations"]["summary"] for r in group["rules"]}
    assert set(summaries) == set(ALERT_CHECKS)
    cases = []
    for shift in ("", *fx.SHIFTS):
        checks = check_window(_window(stage, WINDOW, 2_000, shift), stage[1], CONFIG)
        report = DriftReport("prod", "classifier", 3, 0, 1, WINDOW, tuple(checks), "reference.json")
        fired = set(report.fired)
        assert (SHIFT_ALERT[shift] in {a for a, names in ALERT_CHECKS.items() if names & fired}) if shift else not fired
        tests = []
        labels = {"severity": "warning", "stage": "prod", "namespace": "ltp-prod", "model_name": "classifier"}
        for alert, names in ALERT_CHECKS.items():
            summary = summaries[alert].replace("{{ $labels.model_name }}", "classifier")
            annotations = {"summary": summary, "runbook": "docs/observability.md#alerts"}
            expected = [{"exp_labels": labels, "exp_annotations": annotations}] if names & fired else []
            tests.append({"eval_time": "2m", "alertname": alert, "exp_alerts": expected})
        cases.append({"interval": "1m", "input_series": _series(report), "alert_rule_test": tests})
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": cases}))
    out = subprocess.run(["promtool", "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_make_monitor_checks_each_serving_stage_and_exits_1_on_drift(stage, tmp_path, capsys):
    from components.monitor.drift import main
    from components.serving.stages import StageEntry, StageRegistry

    root = str(tmp_path / "stages")
    assert main(["--stages-root", root]) == 2 and "no stage serves classifier" in capsys.readouterr().out
    assert main(["--stages-root", root, "--window", "1 hour"]) == 2
    assert "window must be a duration" in capsys.readouterr().err
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "traffic_reference.json").write_text(json.dumps(stage[1]))
    entry = StageEntry(action="promote", version=2, model_uri=str(tmp_path / "model"), run="r", model_name="classifier")
    StageRegistry(root).record("staging", entry)
    folder = tmp_path / "stages" / "staging" / "traffic" / "classifier"
    folder.mkdir(parents=True)
    now = time.time()
    lines = [{**line, "time": now - 60} for line in _window(stage, WINDOW, 3, "quarter_size")]
    shard = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now - 60))}-0badcafe-000000.jsonl"
    (folder / shard).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["--stages-root", root, "--window", "30m"]) == 1
    out = capsys.readouterr().out
    assert f"staging classifier v2: {WINDOW} samples; DRIFT: " in out and "psi_width" in out
    assert (tmp_path / "stages" / "staging" / "drift" / "classifier" / "drift.prom").is_file()
    page = (tmp_path / "stages" / "staging" / "drift" / "classifier" / "drift.html").read_text()
    assert "staging: psi_width" in page and "<svg" in page and "1 windows" in page


def test_the_history_draws_each_figure_over_the_windows_and_names_what_it_left_out(stage, tmp_path):
    from components.serving import drift_history as history

    folder = drift_folder(str(tmp_path / "stages"), "prod", "classifier")
    for i, shift in enumerate(("", "", "darkened")):
        checks = tuple(check_window(_window(stage, WINDOW, 40 + i, shift), stage[1], CONFIG))
        write_drift(DriftReport("prod", "classifier", 1, 0.0, 3600.0 * (i + 1), WINDOW, checks), folder)
    (tmp_path / "stages" / "prod" / "drift" / "classifier" / "20000101T000000Z.json").write_text("{cut")
    read = history.read_history(folder, "prod", "classifier")
    assert len(read.windows) == 3 and read.unreadable[0].startswith("20000101T000000Z.json: ")
    xs, ys, threshold = read.series()["psi_brightness"]
    assert xs == [1, 2, 3] and ys[2] > threshold > max(ys[:2])  # the darkened window, and only it, above
    text = open(history.write_history_page(read, str(tmp_path))).read()
    assert text.count("<svg") == len(read.series()) >= 8 and "Left out: 20000101T000000Z.json" in text
    (line,) = history.latest_lines([read])
    assert line.startswith(f"prod: {WINDOW} samples in the window ending 1970-01-01T03:00:00Z; DRIFT: ")
    assert "psi_brightness" in line

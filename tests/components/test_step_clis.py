"""The steps' command lines: real runs on the tiny dataset and model, and bad input.

``--help`` of every step (and that it does not import TensorFlow) is tests/unit/architecture/test_layout.py.
The runs call ``main()`` in process: the tiny assets are built here anyway, and a subprocess would
pay TensorFlow's import again.
"""

import json
from pathlib import Path

import pytest

from components.benchmark.__main__ import main as benchmark_main
from components.evaluate.__main__ import main as evaluate_main
from components.sweep.__main__ import main as sweep_main
from components.train.__main__ import main as train_main


def _one_line_error(capsys, *fragments):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err
    return err


# --------------------------------------------------------------------------- bad input, no TensorFlow


def test_evaluate_bad_input(tmp_path, capsys):
    out = tmp_path / "out"
    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    data.mkdir()
    base = ["--model-dir", str(model), "--dataset", str(data), "--output-dir", str(out)]
    assert evaluate_main([*base, "--value-threshold", "acuracy=0.8"]) == 2
    _one_line_error(capsys, "unknown metric 'acuracy'", "accuracy")
    assert evaluate_main([*base, "--value-threshold", "accuracy"]) == 2
    _one_line_error(capsys, "expected name=value")
    missing = ["--model-dir", str(tmp_path / "nope"), "--dataset", str(data), "--output-dir", str(out)]
    assert evaluate_main(missing) == 2
    _one_line_error(capsys, "model folder", "nope does not exist")
    config = tmp_path / "run.yaml"
    config.write_text("evaluate: {evaluation_options: {top_k: 0}}\n")
    assert evaluate_main([*base, "--config", str(config)]) == 2
    _one_line_error(capsys, "evaluate.evaluation_options.top_k: must be >= 1")
    config.write_text("evaluate: {top_k: 3}\n")  # an earlier version's key: where it went
    assert evaluate_main([*base, "--config", str(config)]) == 2
    _one_line_error(capsys, "evaluate.top_k: renamed; set evaluate.evaluation_options.top_k instead")
    assert not out.exists()  # nothing written on bad input


def test_benchmark_bad_input(tmp_path, capsys):
    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    data.mkdir()
    base = ["inference", "--model-dir", str(model), "--dataset", str(data), "--output-dir", str(tmp_path / "o")]
    assert benchmark_main([*base, "--accelerator", "tpu-v9"]) == 2
    _one_line_error(capsys, "no price for accelerator 'tpu-v9'")
    assert benchmark_main([*base, "--num-images", "0"]) == 2
    _one_line_error(capsys, "benchmark.num_images: must be >= 1")
    assert benchmark_main(["join", str(tmp_path / "missing.json"), "--output-dir", str(tmp_path / "j")]) == 2
    _one_line_error(capsys, "missing.json: no such file")
    bad_row = tmp_path / "row.json"
    bad_row.write_text(json.dumps({"accelerator": "cpu-8"}))
    assert benchmark_main(["join", str(bad_row), "--output-dir", str(tmp_path / "j")]) == 2
    _one_line_error(capsys, "benchmark row", "missing keys")
    assert not (tmp_path / "o").exists() and not (tmp_path / "j").exists()


def test_sweep_bad_input(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    base = ["--dataset", str(data), "--output-dir", str(tmp_path / "o")]
    assert sweep_main(["grid", "--grid", str(tmp_path / "missing.yaml"), *base]) == 2
    _one_line_error(capsys, "missing.yaml: no such file")
    grid = tmp_path / "grid.yaml"
    grid.write_text("- {accelerator: cpu, epoch: 3}\n")
    assert sweep_main(["grid", "--grid", str(grid), *base]) == 2
    _one_line_error(capsys, "grid cell 0: unknown field(s) ['epoch']")
    assert sweep_main(["notebook", *base, "--epochs", "1"]) == 2
    _one_line_error(capsys, "epochs must be >= 2")
    assert sweep_main(["join", str(tmp_path / "missing.json"), "--output-dir", str(tmp_path / "j")]) == 2
    _one_line_error(capsys, "missing.json: no such file")
    assert not (tmp_path / "o").exists() and not (tmp_path / "j").exists()


def test_train_bad_input(tmp_path, capsys):
    # python -m components.train hands over to python -m trainer: same config, same exit statuses
    assert train_main(["--dataset", str(tmp_path), "--model-dir", str(tmp_path / "m"), "--epochs", "0"]) == 2
    _one_line_error(capsys, "train.epochs: must be >= 1")
    assert train_main(["--dataset", str(tmp_path), "--model-dir", str(tmp_path / "m")]) == 2
    _one_line_error(capsys, "has no dataset.json")


# --------------------------------------------------------------------------- real runs


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_cli_writes_what_the_component_writes(tmp_path, capsys):
    from tests.eval_bench_fixtures import stages_with_prod, tiny_assets

    assets = tiny_assets()
    out = tmp_path / "eval"
    stages = stages_with_prod(tmp_path / "stages", {"accuracy": 2.0})  # a prod no model can beat
    argv = ["--model-dir", assets["model"], "--dataset", assets["dataset"], "--output-dir", str(out)]
    argv += ["--value-threshold", "accuracy=0.0", "--change-threshold", "accuracy=0.0", "--stages-root", stages]
    assert evaluate_main(argv) == 0
    stdout = capsys.readouterr().out
    assert "blessed: no" in stdout and "accuracy" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    confusion = json.loads((out / "confusion.json").read_text())
    blessing = json.loads((out / "blessing.json").read_text())
    assert metrics["num_examples"] == 60 and 0.0 <= metrics["accuracy"] <= 1.0
    assert sum(map(sum, confusion["matrix"])) == 60 and len(confusion["class_names"]) == 10
    assert blessing["blessed"] is False and blessing["baseline"] == {"accuracy": 2.0}
    assert "accuracy" in (out / "report.md").read_text()
    # the same run, asked to fail when not blessed, exits 1 (scripts gate on it)
    assert evaluate_main([*argv, "--require-blessed", "--limit", "20"]) == 1
    assert json.loads((out / "metrics.json").read_text())["num_examples"] == 20
    # a model that does not fit the dataset is bad input: one line, exit 2
    wrong = ["--model-dir", assets["wrong_model"], "--dataset", assets["dataset"], "--output-dir", str(tmp_path / "w")]
    assert evaluate_main(wrong) == 2
    _one_line_error(capsys, "predicts 3 classes")


@pytest.mark.slow
@pytest.mark.integration
def test_benchmark_cli_inference_and_join(tmp_path, capsys):
    from tests.eval_bench_fixtures import tiny_assets

    assets = tiny_assets()
    out = tmp_path / "bench"
    argv = ["inference", "--model-dir", assets["model"], "--dataset", assets["dataset"], "--output-dir", str(out)]
    argv += ["--num-images", "40", "--batch-size", "16", "--warmup-batches", "1", "--rounds", "1"]
    assert benchmark_main(argv) == 0
    stdout = capsys.readouterr().out
    assert "cpu-8 (CPU, 8 cores):" in stdout and "served (REST, local Python server):" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    row = json.loads((out / "row.json").read_text())
    assert metrics["images_per_sec"] > 0 and metrics["http_images_per_sec"] > 0
    assert row["num_images"] == 40 and row["in_process"]["num_batches"] == 3 and row["http"]["rounds"] == 1
    assert "Served path (REST, local Python server)" in (out / "report.md").read_text()
    # a second machine's row, cheaper per image: the join marks it
    other = dict(row, accelerator="laptop", label="Laptop", price_per_hour=0.01, images_per_dollar=1e12)
    (tmp_path / "other.json").write_text(json.dumps(other))
    joined = tmp_path / "joined"
    assert (
        benchmark_main(["join", str(out / "row.json"), str(tmp_path / "other.json"), "--output-dir", str(joined)]) == 0
    )
    assert "cheapest laptop" in capsys.readouterr().out
    assert json.loads((joined / "best.json").read_text())["cheapest"] == "laptop"
    text = (joined / "report.md").read_text()
    assert "40 images in batches of 16" in text and "| **Laptop** |" in text
    assert (joined / "chart.html").read_text().count("<svg") == 2
    # the wrong model is refused before timing
    bad = ["inference", "--model-dir", assets["wrong_model"], "--dataset", assets["dataset"]]
    assert benchmark_main([*bad, "--output-dir", str(tmp_path / "bad"), "--no-http"]) == 2
    _one_line_error(capsys, "predicts 3 classes")
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
@pytest.mark.integration
def test_sweep_cli_notebook(tmp_path, capsys):
    from tests.eval_bench_fixtures import tiny_assets

    assets = tiny_assets()
    out = tmp_path / "sweep"
    argv = ["notebook", "--dataset", assets["dataset"], "--output-dir", str(out), "--name", "laptop"]
    assert sweep_main([*argv, "--batch-sizes", "16", "32", "--epochs", "2", "--steps-per-epoch", "2"]) == 0
    assert "laptop, batch 32 on cpu" in capsys.readouterr().out
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["accelerator"] == "laptop" and [r["batch_size"] for r in sweep["results"]] == [16, 32]
    assert all(len(r["epoch_times_s"]) == 2 and r["steps_per_epoch"] == 2 for r in sweep["results"])
    assert "| batch size | laptop |" in (out / "report.md").read_text()
    joined = tmp_path / "joined"
    assert sweep_main(["join", str(out / "sweep.json"), "--output-dir", str(joined)]) == 0
    assert Path(joined / "report.md").read_text() == (out / "report.md").read_text()

"""The monitor pipeline: compiled without TensorFlow, and run whole under kfp.local against a real
Prometheus scraping a stage's local model server."""

import base64
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml

from tests.prometheus_server import needs_prometheus, running_prometheus


def test_compiles_without_tensorflow_and_never_caches(tmp_path):
    code = (
        "import sys; from kfp import compiler; from pipelines import monitor; "
        f"compiler.Compiler().compile(monitor.pipeline, r'{tmp_path}/p.yaml'); "
        "assert 'tensorflow' not in sys.modules, 'compiling imported TensorFlow'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    spec = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert spec["pipelineInfo"]["name"] == "monitor"
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert set(params) == {"prometheus_url", "stages", "window", "stages_root", "serving_target", "served_model_name"}
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"monitor-stages", "fail-if-broken"}
    assert all(t["cachingOptions"] == {} for t in tasks.values())  # a recurring run must look again
    status = tasks["fail-if-broken"]["inputs"]["parameters"]["status"]["taskOutputParameter"]
    assert status == {"producerTask": "monitor-stages", "outputParameterKey": "Output"}

    from pipelines import compile as compile_module

    assert compile_module.PIPELINES["monitor"] == "pipelines.monitor"


@pytest.mark.slow
@pytest.mark.integration
@needs_prometheus
def test_monitor_pipeline_runs_locally_against_prometheus(tmp_path):
    from kfp import local

    from components.monitor.run import PrometheusError, monitor, status_line
    from components.promote.run import promote
    from components.serving import stages
    from components.serving.checks import http_json
    from components.serving.load import run_load
    from components.serving.server import ModelServer
    from pipelines import monitor as monitor_pipeline
    from tests.promote_models import digits, export_tiny_model, png_bytes, write_digits_dataset
    from trainer.config import MonitorConfig, PromoteConfig

    root = str(tmp_path / "stages")
    dataset = write_digits_dataset(tmp_path / "dataset", count=32)
    export_tiny_model(str(tmp_path / "m1" / "saved_model"), steps=150)
    demo = PromoteConfig(stage="demo", stages_root=root, model_name="clf", min_smoke_accuracy=0.6)
    promote(str(tmp_path / "m1"), dataset, demo, run_id="setup", metrics={"accuracy": 0.8})

    images, _ = digits()
    good = {"instances": [{"b64": base64.b64encode(png_bytes(images[0])).decode()}]}
    # demo's "deployed" server, as TensorFlow Serving in ltp-demo would be; staging serves nothing.
    with ModelServer(stages.model_base_path(root, "demo", "clf"), "clf") as server:
        target = urllib.parse.urlsplit(server.url).netloc
        with running_prometheus(tmp_path / "prom", {"ltp-demo": [target]}) as prom:
            count = ':tensorflow:serving:request_count{namespace="ltp-demo"}'
            # One request of each kind first, scraped, so that both series exist before the bursts
            # (rate() cannot see the increase of a series in the scrape that creates it).
            bad = {"instances": [{"b64": "not base64!"}]}
            assert http_json("POST", f"{server.url}/v1/models/clf:predict", good)[0] == 200
            assert http_json("POST", f"{server.url}/v1/models/clf:predict", bad)[0] == 400
            prom.wait_for(f"sum(count_over_time({count}[1m]))", lambda v: v is not None and v >= 4)
            assert run_load(server.url, "clf", good, clients=2, duration_s=10, max_requests=40).errors == 0
            prom.wait_for(f"sum({count})", lambda v: v == 42)
            time.sleep(2.5)

            local.init(
                runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"), raise_on_error=True
            )
            monitor_pipeline.pipeline(
                prometheus_url=prom.url,
                stages=["demo", "staging"],
                window="5m",
                stages_root=root,
                serving_target="local",
                served_model_name="clf",
            )
            (report,) = (tmp_path / "root").glob("monitor-*/monitor-stages/report")
            text = report.read_text()
            assert text.startswith("# Monitor: all stages healthy")
            assert "## demo: version 1" in text and "## staging: serves nothing" in text
            for name in ("ModelServerErrorRatioHigh", "ModelServerLatencyP99High", "ModelServerNoTargetUp"):
                assert f"| {name} | yes |" in text
            assert "| check prediction | yes |" in text and "| check bad_requests | yes |" in text

            # Bad traffic breaks demo's error-ratio objective: the monitor says so (the library;
            # the pipeline's fail_if_broken turns that status into a failed run).
            assert run_load(server.url, "clf", bad, clients=2, duration_s=10, max_requests=20).errors == 20
            prom.wait_for(f"sum({count})", lambda v: v == 62)
            time.sleep(2.5)
            config = MonitorConfig(
                prometheus_url=prom.url, stages_root=root, stages=("demo",), window="5m", model_name="clf"
            )
            broken = monitor(config)
            assert broken.broken == ["demo"] and status_line(broken).startswith(
                "broken: demo: ModelServerErrorRatioHigh"
            )
            (ratio,) = [o for o in broken.stages[0].objectives if o.name == "ModelServerErrorRatioHigh"]
            assert 0.25 <= ratio.value <= 0.45 and not ratio.met  # 20 of 60, give or take rate()'s extrapolation
            assert all(c.passed for c in broken.stages[0].checks)  # the model itself still answers right

    with pytest.raises(PrometheusError, match="cannot query Prometheus"):
        monitor(config.replace(prometheus_url="http://127.0.0.1:9"))

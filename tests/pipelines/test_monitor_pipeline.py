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
    spec = next(yaml.safe_load_all((tmp_path / "p.yaml").read_text()))  # the platform spec follows
    assert spec["pipelineInfo"]["name"] == "monitor"
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert set(params) == {
        "prometheus_url",
        "stages",
        "window",
        "stages_root",
        "serving_target",
        "served_model_name",
        "serving_options",
        "secret_name",  # every pipeline's (pipelines/platform.py)
    }
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"monitor-stages", "fail-if-broken"}
    assert all(t["cachingOptions"] == {} for t in tasks.values())  # a recurring run must look again
    status = tasks["fail-if-broken"]["inputs"]["parameters"]["status"]["taskOutputParameter"]
    assert status == {"producerTask": "monitor-stages", "outputParameterKey": "Output"}

    from pipelines.tools import compile as compile_module

    assert compile_module.PIPELINES["monitor"] == "pipelines.monitor"


COUNT = ':tensorflow:serving:request_count{namespace="ltp-demo"}'
BAD = {"instances": [{"b64": "not base64!"}]}


def _good_request():
    from tests.promote_models import digits, png_bytes

    images, _ = digits()
    return {"instances": [{"b64": base64.b64encode(png_bytes(images[0])).decode()}]}


def _send_good_traffic(url, prom, good):
    """One request of each kind, scraped, then a burst of good ones: 42 requests in all."""
    from components.serving.checks import http_json
    from components.serving.load import run_load

    # Both series must exist before the bursts (rate() cannot see the increase of a series in the
    # scrape that creates it).
    assert http_json("POST", f"{url}/v1/models/clf:predict", good)[0] == 200
    assert http_json("POST", f"{url}/v1/models/clf:predict", BAD)[0] == 400
    prom.wait_for(f"sum(count_over_time({COUNT}[1m]))", lambda v: v is not None and v >= 4)
    assert run_load(url, "clf", good, clients=2, duration_s=10, max_requests=40).errors == 0
    prom.wait_for(f"sum({COUNT})", lambda v: v == 42)
    time.sleep(2.5)


def _run_monitor_pipeline(tmp_path, prom_url, root):
    """The pipeline under kfp.local over demo and staging: its Markdown report."""
    from kfp import local

    from pipelines import monitor as monitor_pipeline

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"), raise_on_error=True)
    monitor_pipeline.pipeline(
        prometheus_url=prom_url,
        stages=["demo", "staging"],
        window="5m",
        stages_root=root,
        serving_target="local",
        served_model_name="clf",
    )
    (report,) = (tmp_path / "root").glob("monitor-*/monitor-stages/report")
    return report.read_text()


def _broken_by_bad_traffic(url, prom, config):
    """Bad traffic breaks demo's error-ratio objective: the monitor (the library) says so."""
    from components.monitor.run import monitor, status_line
    from components.serving.load import run_load

    assert run_load(url, "clf", BAD, clients=2, duration_s=10, max_requests=20).errors == 20
    prom.wait_for(f"sum({COUNT})", lambda v: v == 62)
    time.sleep(2.5)
    broken = monitor(config)
    assert broken.broken == ["demo"] and status_line(broken).startswith("broken: demo: ModelServerErrorRatioHigh")
    (ratio,) = [o for o in broken.stages[0].objectives if o.name == "ModelServerErrorRatioHigh"]
    assert 0.25 <= ratio.value <= 0.45 and not ratio.met  # 20 of 60, give or take rate()'s extrapolation
    assert all(c.passed for c in broken.stages[0].checks)  # the model itself still answers right


@pytest.mark.slow
@pytest.mark.integration
@needs_prometheus
def test_monitor_pipeline_runs_locally_against_prometheus(tmp_path):
    from components.monitor.run import PrometheusError, monitor
    from components.promote.run import promote
    from components.serving.config import MonitorConfig, PromoteConfig
    from components.serving.stages import StageRegistry
    from components.serving.targets.local import LocalTarget
    from tests.promote_models import export_tiny_model, write_digits_dataset

    root = str(tmp_path / "stages")
    dataset = write_digits_dataset(tmp_path / "dataset", count=32)
    export_tiny_model(str(tmp_path / "m1" / "saved_model"), steps=150)
    demo = PromoteConfig(stage="demo", stages_root=root, model_name="clf", min_smoke_accuracy=0.6)
    promote(str(tmp_path / "m1"), dataset, demo, run_id="setup", metrics={"accuracy": 0.8})

    # demo's "deployed" server, as TensorFlow Serving in ltp-demo would be; staging serves nothing.
    with LocalTarget(StageRegistry(root)).endpoints("demo", {"clf": 1}) as endpoints:
        url = endpoints.url("clf")
        with running_prometheus(tmp_path / "prom", {"ltp-demo": [urllib.parse.urlsplit(url).netloc]}) as prom:
            _send_good_traffic(url, prom, _good_request())
            text = _run_monitor_pipeline(tmp_path, prom.url, root)
            assert text.startswith("# Monitor: all stages healthy")
            assert "## demo: version 1" in text and "## staging: serves nothing" in text
            for name in ("ModelServerErrorRatioHigh", "ModelServerLatencyP99High", "ModelServerNoTargetUp"):
                assert f"| {name} | yes |" in text
            assert "| check prediction | yes |" in text and "| check bad_requests | yes |" in text
            config = MonitorConfig(
                prometheus_url=prom.url, stages_root=root, stages=("demo",), window="5m", model_name="clf"
            )
            _broken_by_bad_traffic(url, prom, config)

    with pytest.raises(PrometheusError, match="cannot query Prometheus"):
        monitor(config.replace(prometheus_url="http://127.0.0.1:9"))

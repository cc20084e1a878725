"""The compiled detection YAML: the same wiring as end_to_end (one DAG builder), its own defaults,
and the TPU v2-8 request."""

import pytest
import yaml

from components import images
from pipelines.tools import compile as compile_mod
from tests.pipelines.test_compile_end_to_end import _executor, _task_by_display, _tasks


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    specs = {}
    for name in ("detection", "end_to_end"):
        docs = [d for d in yaml.safe_load_all(compile_mod.compile_pipeline(name, out).read_text()) if d]
        specs[name] = (docs[0], docs[1])
    return specs


def test_detection_asks_for_a_tpu_v2_8_with_its_annotation(both):
    spec, platform = both["detection"]
    _, train = _task_by_display(spec, "Train")
    label, executor = _executor(spec, train)
    accel = executor["container"]["resources"]["accelerator"]
    assert "accelerator_type" in accel["resourceType"] and "accelerator_count" in accel["resourceCount"]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["accelerator_type"]["defaultValue"] == "cloud-tpus.google.com/v2"
    assert int(float(params["accelerator_count"]["defaultValue"])) == 8
    pod = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]["podMetadata"]
    assert pod["annotations"]["tf-version.cloud-tpus.google.com"] == images.TF_VERSION


def test_detection_defaults_train_the_small_detector_on_the_built_in_data(both):
    params = both["detection"][0]["root"]["inputDefinitions"]["parameters"]
    defaults = {name: p.get("defaultValue") for name, p in params.items()}
    assert defaults["source"] == "shapes" and defaults["model"] == "retinanet"
    assert defaults["value_thresholds"] == {"ap50": 0.5} and defaults["served_model_name"] == "detector"
    assert defaults["augment"] is True and defaults["epochs"] == 0  # a schedule in steps, fitted to the data
    options = defaults["model_options"]
    assert options["image_size"] == options["anchor_size"] == "auto" and set(options.values()) == {"auto"}
    assert all(p.get("description") for p in params.values()), "every run-form parameter is described"


def test_both_pipelines_are_one_wiring(both):
    def shape(spec):
        tasks = _tasks(spec)
        names = {name: t["taskInfo"]["name"] for name, t in tasks.items()}
        return {(names[n], tuple(sorted(names[d] for d in t.get("dependentTasks", [])))) for n, t in tasks.items()}

    assert shape(both["detection"][0]) == shape(both["end_to_end"][0])
    # The gate's baseline is the model served under the same name.
    _, evaluate = _task_by_display(both["detection"][0], "Evaluate and gate")
    served = evaluate["inputs"]["parameters"]["served_model_name"]["componentInputParameter"]
    assert served == "served_model_name"

import base64
import dataclasses
import json
import shutil

import pytest

from components.kube import RolloutTimeout
from components.promote.result import PromotionError, render_report
from components.promote.rollback import rollback
from components.promote.run import promote
from components.serving import stages
from components.serving.checks import KnownExample, ServingChecksError, http_json, run_checks
from components.serving.config import LoadTestConfig, PromoteConfig
from components.serving.stages import StageRegistry
from components.serving.targets import TargetSettings
from components.serving.targets.local import LocalTarget
from tests.promote_models import export_tiny_model, write_digits_dataset
from trainer.tasks import get_task

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("promote")
    good = root / "good"
    export_tiny_model(str(good / "saved_model"), steps=150)
    better = root / "better"
    export_tiny_model(str(better / "saved_model"), steps=150, seed=3)
    bad = root / "bad"
    export_tiny_model(str(bad / "saved_model"), constant_class=7)
    dataset = write_digits_dataset(root / "dataset", count=48)
    return {"good": str(good), "better": str(better), "bad": str(bad), "dataset": dataset}


def config(tmp_path, stage="demo", model_name="clf", **kw):
    return PromoteConfig(
        stage=stage, stages_root=str(tmp_path / "stages"), model_name=model_name, min_smoke_accuracy=0.7, **kw
    )


def serving_version(cfg):
    from components.serving.server import ModelServer

    with ModelServer(StageRegistry(cfg.stages_root).model_base_path(cfg.stage, "clf"), "clf") as srv:
        return int(http_json("GET", f"{srv.url}/v1/models/clf")[1]["model_version_status"][0]["version"])


def test_promote_records_and_rerun_is_a_no_op(tmp_path, models):
    cfg = config(tmp_path, "prod")
    result = promote(models["good"], models["dataset"], cfg, run_id="run-1")
    assert result.version == 1 and not result.no_op
    names = [c.name for c in result.checks]
    assert names == ["health", "metadata", "predict_schema", "bad_requests", "prediction", "load"]
    assert all(c.passed for c in result.checks)
    load = result.check("load")
    profile = cfg.effective_load_test("loopback")
    assert 1 <= load.figures["requests"] <= profile.max_requests and load.figures["errors"] == 0
    current = stages.StageRegistry(cfg.stages_root).read_current("prod", "clf")
    assert (current.target, current.task) == ("local", "classification")  # the record names both
    # The load test's p50/p95/p99, rate and errors, and prod's objectives, are a typed history record.
    assert current.load_test == result.load_test and current.load_test.passed
    assert current.load_test.requests == load.figures["requests"] and current.load_test.errors == 0
    assert current.load_test.p50_ms <= current.load_test.p95_ms <= current.load_test.p99_ms
    assert current.load_test.objectives == profile.objectives()
    assert stages.StageEntry.from_json(current.to_json()) == current
    assert "load test:" in render_report(result) and "met" in render_report(result)
    assert current.version == 1 and current.run == "run-1" and current.action == "promote"
    by_name = {c.name: c for c in result.checks}
    assert {c.name: c for c in current.checks} == by_name  # the load test's figures are kept in the history
    assert 0.7 <= current.metrics["accuracy"] <= 1.0  # the evaluation gate's baseline
    again = promote(models["good"], models["dataset"], cfg, run_id="run-2")
    assert again.no_op and again.version == 1 and {c.name: c for c in again.checks} == by_name
    assert len(stages.StageRegistry(cfg.stages_root).read_history("prod", "clf")) == 1
    assert stages.StageRegistry(cfg.stages_root).list_versions("prod", "clf") == [1]
    assert "serves version 1" in render_report(again)


def test_failing_model_rolls_back_and_the_earlier_version_keeps_serving(tmp_path, models):
    cfg = config(tmp_path)
    promote(models["good"], models["dataset"], cfg, run_id="run-1", metrics={"accuracy": 0.9})
    with pytest.raises(PromotionError, match=r"prediction.*Rolled back: demo serves version 1 \(verified\)"):
        promote(models["bad"], models["dataset"], cfg, run_id="run-2")
    assert stages.StageRegistry(cfg.stages_root).list_versions("demo", "clf") == [1]
    assert serving_version(cfg) == 1
    current = stages.StageRegistry(cfg.stages_root).read_current("demo", "clf")
    assert current.action == "rollback" and current.version == 1 and current.failed_version == 2
    assert current.metrics == {"accuracy": 0.9} and current.verified is True
    # The next good model gets a fresh number: version numbers only grow.
    assert promote(models["better"], models["dataset"], cfg, run_id="run-3", metrics={}).version == 3
    back = rollback(cfg, run_id="run-4")
    assert back.version == 1 and back.previous_version == 3 and back.check("prediction").passed
    assert back.metrics == {"accuracy": 0.9}  # recorded with version 1
    assert serving_version(cfg) == 1
    assert [e.action for e in stages.StageRegistry(cfg.stages_root).read_history("demo", "clf")] == [
        "promote",
        "rollback",
        "promote",
        "rollback",
    ]
    with pytest.raises(ValueError, match="needs an earlier version"):
        rollback(cfg, run_id="run-5")


def test_missed_load_objective_rolls_back(tmp_path, models):
    """An objective no server can meet (p99 under a microsecond) fails the promotion like a failed check."""
    cfg = config(tmp_path)
    promote(models["good"], models["dataset"], cfg, run_id="run-1", metrics={})
    strict = cfg.replace(load_test={"clients": 1, "max_requests": 10, "max_p99_ms": 0.001})
    with pytest.raises(PromotionError, match=r"load:.*p99 .* > objective 0.001 ms.*serves version 1 \(verified\)"):
        promote(models["better"], models["dataset"], strict, run_id="run-2", metrics={})
    assert stages.StageRegistry(cfg.stages_root).list_versions("demo", "clf") == [1]
    current = stages.StageRegistry(cfg.stages_root).read_current("demo", "clf")
    assert current.action == "rollback" and current.failed_version == 2
    failed = current.failed_load_test
    assert failed is not None and not failed.passed and failed.requests == 10 and failed.p99_ms > 0.001
    assert failed.objectives == {"max_p99_ms": 0.001, "max_errors": 0.0}
    # The restored version was verified with the same bounded load, its latency objectives left out.
    assert current.verified is True and current.load_test.passed and current.load_test.objectives == {"max_errors": 0}


def test_first_model_failing_leaves_the_stage_empty(tmp_path, models):
    cfg = config(tmp_path, "staging")
    with pytest.raises(PromotionError, match="serves nothing"):
        promote(models["bad"], models["dataset"], cfg, run_id="run-1", metrics={})
    assert stages.StageRegistry(cfg.stages_root).read_current("staging", "clf") is None
    assert stages.StageRegistry(cfg.stages_root).list_versions("staging", "clf") == []
    assert stages.StageRegistry(cfg.stages_root).read_history("staging", "clf")[-1].version is None


def test_the_checks_report_every_failed_check(models):
    from components.serving.server import ModelServer
    from tests.promote_models import digits, png_bytes

    images, labels = digits()
    examples = [KnownExample(png_bytes(images[i]), int(labels[i])) for i in range(20)]
    task = get_task("classification")
    with ModelServer(models["bad"] + "/saved_model", "clf") as srv:
        with pytest.raises(ServingChecksError) as err:
            run_checks(srv.url, "clf", examples, min_accuracy=0.5, task=task)
        assert "prediction:" in str(err.value) and err.value.report.check("bad_requests").passed
        assert not err.value.report.passed and err.value.report.accuracy < 0.5
        with pytest.raises(ServingChecksError, match="health") as err:
            run_checks(srv.url, "clf", examples, 0.0, task=task, expected_version=5, timeout_s=1)
        assert [c.name for c in err.value.report.checks] == ["health"]  # nothing else runs without health
        assert run_checks(srv.url, "clf", examples, 0.0, task=task, load=None).version == 1


def test_missing_saved_model_is_explained(tmp_path, models):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        promote(str(tmp_path / "empty"), models["dataset"], config(tmp_path), run_id="r")
    shutil.rmtree(tmp_path / "empty")


def test_kubernetes_target_needs_gcs(tmp_path, models):
    cfg = config(tmp_path, target="kubernetes")
    with pytest.raises(ValueError, match="gs://"):
        promote(models["good"], models["dataset"], cfg, run_id="r")
    assert stages.StageRegistry(cfg.stages_root).list_versions("demo", "clf") == []  # nothing published


class StandInCluster(LocalTarget):
    """A serving target whose rollouts can fail: loopback servers stand in for a cluster.

    ``serve`` and ``restore`` record what they were asked; ``serve`` raises ``RolloutTimeout``
    for the (model, version) in ``fail``. The kubernetes target itself is tested against the
    fake API server in tests/integration/test_kube_deploy.py.
    """

    name = "stand-in-cluster"

    def __init__(self, stages, fail):
        super().__init__(stages)
        self.fail, self.calls = fail, []

    def serve(self, stage, models, changed, timeout_s):
        self.calls.append(("serve", dict(models)))
        if (changed, models[changed]) == self.fail:
            raise RolloutTimeout(f"rollout of {changed} timed out", namespace="ltp-demo", name="m", waited_s=timeout_s)

    def restore(self, stage, models, changed, timeout_s):
        self.calls.append(("restore", dict(models)))


def test_a_failed_rollout_rolls_back(tmp_path, models):
    cfg = config(tmp_path, rollout_timeout_s=5.0)
    cluster = StandInCluster(StageRegistry(cfg.stages_root), fail=("clf", 2))
    assert promote(models["good"], models["dataset"], cfg, run_id="r1", metrics={}, target=cluster).version == 1
    with pytest.raises(PromotionError, match="timed out.*serves version 1 \\(verified\\)"):
        promote(models["better"], models["dataset"], cfg, run_id="r2", metrics={}, target=cluster)
    assert cluster.calls == [("serve", {"clf": 1}), ("serve", {"clf": 2}), ("restore", {"clf": 1})]
    current = stages.StageRegistry(cfg.stages_root).read_current("demo", "clf")
    assert current.action == "rollback" and current.version == 1 and "RolloutTimeout" in current.reason


def test_each_check_runs_alone_and_asks_the_task(models):
    from components.serving import checks
    from components.serving.server import ModelServer
    from tests.promote_models import digits, png_bytes
    from trainer.tasks import ServingSchema
    from trainer.tasks.classification import Classification

    class Boxes(Classification):  # a task whose responses look different: the checks must ask it
        serving = ServingSchema(outputs=("boxes", "scores"))

    images, labels = digits()
    image = png_bytes(images[0])
    task = get_task("classification")
    with ModelServer(models["good"] + "/saved_model", "clf") as srv:
        url = srv.url
        health = checks.check_health(srv.url, "clf")
        assert health.passed and health.figures == {"version": 1}
        assert not checks.check_health(srv.url, "clf", expected_version=2, timeout_s=0.5).passed
        metadata = checks.check_metadata(srv.url, "clf", task)
        assert metadata.passed and metadata.figures == {"num_outputs": 10}
        other = checks.check_metadata(srv.url, "clf", Boxes())
        assert not other.passed and "outputs must include boxes, scores" in other.detail
        assert checks.check_response_schema(srv.url, "clf", task, image, version=1, num_outputs=10).passed
        wrong_size = checks.check_response_schema(srv.url, "clf", task, image, num_outputs=3)
        assert not wrong_size.passed and "10 probabilities, expected 3" in wrong_size.detail
        assert checks.check_bad_requests(srv.url, "clf").passed
        known = [KnownExample(png_bytes(images[i]), int(labels[i])) for i in range(8)]
        assert checks.check_known_predictions(srv.url, "clf", task, known, 0.5).passed
        wrong = [KnownExample(e.image, (e.expected + 1) % 10) for e in known]
        failed = checks.check_known_predictions(srv.url, "clf", task, wrong, 0.5)
        assert not failed.passed and failed.figures["right"] <= 1 and "need 0.50" in failed.detail
        load = checks.check_load(srv.url, "clf", image, LoadTestConfig(clients=2, max_requests=12))
        assert load.passed and load.figures["requests"] == 12 and load.figures["errors"] == 0
        assert checks.CheckResult.from_dict("load", load.to_dict()) == load
    # A server that is gone: every check reports, none raises.
    gone = checks.check_bad_requests(url, "clf")
    assert not gone.passed and "URLError" in gone.detail
    down = checks.check_load(url, "clf", image, LoadTestConfig(clients=1, max_seconds=0.5))
    assert not down.passed and down.figures["errors"] == down.figures["requests"] > 0


def test_two_models_side_by_side_at_one_stage(tmp_path, models):
    """Promoting model b to a stage adds it next to model a; records, baseline and rollback are per name."""
    import base64

    from components.evaluate.run import read_baseline
    from tests.promote_models import digits, png_bytes

    a, b = config(tmp_path, "prod", model_name="a"), config(tmp_path, "prod", model_name="b")
    root = a.stages_root
    assert promote(models["good"], models["dataset"], a, run_id="a-1", metrics={"accuracy": 0.9}).version == 1
    first_b = promote(models["better"], models["dataset"], b, run_id="b-1", metrics={"accuracy": 0.95})
    assert first_b.version == 1  # each model numbers its own versions
    assert first_b.check("stage_models").passed and first_b.check("stage_models").detail == "also serves a version 1"
    assert promote(models["good"], models["dataset"], b, run_id="b-2", metrics={"accuracy": 0.91}).version == 2

    # The stage's server serves both, each at its own version, by name.
    image = {"b64": base64.b64encode(png_bytes(digits()[0][0])).decode()}
    with LocalTarget(StageRegistry(root)).endpoints("prod", {"a": 1, "b": 2}) as endpoints:
        for name, version in (("a", "1"), ("b", "2")):
            status, body = http_json("GET", f"{endpoints.url(name)}/v1/models/{name}")
            assert status == 200 and body["model_version_status"][0]["version"] == version
            assert (
                http_json("POST", f"{endpoints.url(name)}/v1/models/{name}:predict", {"instances": [image]})[0] == 200
            )
        status, body = http_json("GET", f"{endpoints.url('a')}/v1/models/c")
        assert status == 404 and "['a', 'b']" in body["error"]

    # Records and the gate's baseline are per model name.
    assert {n: e.version for n, e in stages.StageRegistry(root).served_models("prod").items()} == {"a": 1, "b": 2}
    assert [e.run for e in stages.StageRegistry(root).read_history("prod", "a")] == ["a-1"]
    assert [e.run for e in stages.StageRegistry(root).read_history("prod", "b")] == ["b-1", "b-2"]
    assert read_baseline(root, "a")["metrics"] == {"accuracy": 0.9}
    assert read_baseline(root, "b")["metrics"] == {"accuracy": 0.91}
    assert len(StageRegistry(root).load_examples("prod", "b").examples) == b.smoke_examples

    # Rolling b back leaves a as it was.
    back = rollback(b, run_id="b-3")
    assert back.version == 1 and back.previous_version == 2 and back.check("stage_models").passed
    assert {n: e.version for n, e in stages.StageRegistry(root).served_models("prod").items()} == {"a": 1, "b": 1}
    assert [e.run for e in stages.StageRegistry(root).read_history("prod", "a")] == ["a-1"]
    assert read_baseline(root, "b")["metrics"] == {"accuracy": 0.95}  # recorded with b's version 1
    with pytest.raises(ValueError, match="cannot roll back prod"):
        rollback(a, run_id="a-2")  # a has one version: b's are not a's
    assert stages.StageRegistry(root).list_versions("prod", "a") == [1] and stages.StageRegistry(root).list_versions(
        "prod", "b"
    ) == [1]


def test_a_failed_first_rollout_of_a_second_model_keeps_the_first_model(tmp_path, models):
    """A failed first version of model b returns the stage to serving a only (a cluster re-applies a's config)."""
    a = config(tmp_path, model_name="a", rollout_timeout_s=5.0)
    cluster = StandInCluster(StageRegistry(a.stages_root), fail=("b", 1))
    b = dataclasses.replace(a, model_name="b")
    assert promote(models["good"], models["dataset"], a, run_id="a-1", metrics={}, target=cluster).version == 1
    with pytest.raises(PromotionError, match="timed out.*serves nothing"):
        promote(models["better"], models["dataset"], b, run_id="b-1", metrics={}, target=cluster)
    assert cluster.calls == [("serve", {"a": 1}), ("serve", {"a": 1, "b": 1}), ("restore", {"a": 1})]
    again = promote(models["better"], models["dataset"], b, run_id="b-2", metrics={}, target=cluster)
    assert again.version == 2 and again.check("stage_models").detail == "also serves a version 1"
    assert {n: e.version for n, e in stages.StageRegistry(a.stages_root).served_models("demo").items()} == {
        "a": 1,
        "b": 2,
    }


def test_the_server_splits_a_models_traffic_by_weight_and_names_the_version_that_answered(tmp_path, models):
    import urllib.request

    from components.serving.canary import Split
    from components.serving.rest import VERSION_HEADER
    from components.serving.server import ModelServer

    base = tmp_path / "clf"
    shutil.copytree(f"{models['good']}/saved_model", base / "1")
    shutil.copytree(f"{models['bad']}/saved_model", base / "2")
    image = get_task("classification").known_examples(models["dataset"], "test", 1)[0][0]
    body = json.dumps({"instances": [{"b64": base64.b64encode(image).decode()}]}).encode()
    with ModelServer(str(base), "clf", split=Split("clf", 2, 25)) as server:
        answered = []
        for _ in range(8):
            request = urllib.request.Request(f"{server.url}/v1/models/clf:predict", data=body, method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                answered.append(int(response.headers[VERSION_HEADER]))
                json.loads(response.read())
        assert answered.count(2) == 2 and answered.count(1) == 6  # 25% of 8 requests to the canary
        status = http_json("GET", f"{server.url}/v1/models/clf")[1]["model_version_status"]
        assert sorted(int(v["version"]) for v in status) == [1, 2]
        assert (
            http_json("GET", f"{server.url}/v1/models/clf/versions/2")[1]["model_version_status"][0]["version"] == "2"
        )
    with pytest.raises(FileNotFoundError, match="needs an earlier complete version"):
        ModelServer(str(base), "clf", split=Split("clf", 1, 10)).start()


def test_a_canary_goes_through_every_step_and_a_failing_one_is_rolled_back(tmp_path, models):
    cfg = config(tmp_path, canary_steps=(50, 100), load_test=LoadTestConfig(clients=1, max_requests=5))
    target = LocalTarget(StageRegistry(cfg.stages_root), settings=TargetSettings(canary_steps=cfg.canary_steps))
    promote(models["good"], models["dataset"], cfg, run_id="run-1", metrics={}, target=target)
    result = promote(models["better"], models["dataset"], cfg, run_id="run-2", metrics={}, target=target)
    assert result.version == 2 and result.check("canary").detail == "passed at 50%, 100%"
    with pytest.raises(PromotionError, match=r"canary at 50% failed.*prediction.*Rolled back: demo serves version 2"):
        promote(models["bad"], models["dataset"], cfg, run_id="run-3", metrics={}, target=target)
    last = stages.StageRegistry(cfg.stages_root).read_current("demo", "clf")
    assert (last.action, last.version, last.failed_version, last.verified) == ("rollback", 2, 3, True)
    assert "canary at 50% failed" in last.reason and serving_version(cfg) == 2

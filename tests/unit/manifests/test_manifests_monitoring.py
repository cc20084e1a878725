"""The monitoring manifests: TensorFlow Serving's exporter switched on, a PodMonitor and a
PrometheusRule per stage (or Managed Service for Prometheus' PodMonitoring and Rules), the Grafana
dashboard; rendered with `kubectl kustomize`, generated from components/monitor/rules.py, the
rule groups and every dashboard query checked by promtool.

kubernetes-validate knows only Kubernetes' own kinds: the ConfigMaps are validated with it; the
custom resources (PodMonitor, PrometheusRule, PodMonitoring, Rules) are checked field by field
below against their documented API, and their rule groups with `promtool check rules`, which is
what prometheus-operator's admission webhook runs on a PrometheusRule too.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.monitor import rules
from components.serving.metrics import METRICS_PATH
from tests.unit.manifests.test_manifests_serving import (
    KUBERNETES_VERSION,
    STAGES,
    container,
    deployment,
    objects,
    stage,
)

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "manifests" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool missing: `make prometheus` (Debian's prometheus package) installs it"
)


def operator_objects():
    return objects("monitoring/prometheus-operator")


def gmp_objects():
    return objects("monitoring/managed-prometheus")


def of_kind(objs, kind, name=rules.JOB):
    return {o["metadata"]["namespace"]: o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name}


def test_committed_files_are_what_rules_py_writes():
    for rel, text in rules.generated_files().items():
        path = MONITORING / rel
        assert path.is_file(), f"{rel} missing: run python -m components.monitor.rules --write manifests/monitoring"
        assert path.read_text() == text, f"{rel} is stale: run python -m components.monitor.rules --write ..."


@pytest.mark.parametrize("name", STAGES)
def test_tensorflow_serving_exports_prometheus_metrics_on_the_rest_port(name):
    c = container(deployment(name))
    flag = next(a for a in c["args"] if a.startswith("--monitoring_config_file="))
    path = Path(flag.split("=", 1)[1])
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(path.parent))
    volume = next(v for v in deployment(name)["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config_map = next(o for o in stage(name) if o["metadata"]["name"] == volume["configMap"]["name"])
    text = config_map["data"][path.name]
    assert re.search(r"prometheus_config\s*\{\s*enable:\s*true\s*path:\s*\"([^\"]+)\"\s*\}", text)[1] == METRICS_PATH


def test_every_object_is_namespaced_and_the_configmaps_validate():
    for objs in (operator_objects(), gmp_objects()):
        for obj in objs:
            assert obj["metadata"]["namespace"] in {*(f"ltp-{s}" for s in STAGES), "monitoring"}
            if obj["apiVersion"] == "v1":
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    kinds = sorted(o["kind"] for o in operator_objects())
    assert kinds == ["ConfigMap"] + ["PodMonitor"] * 6 + ["PrometheusRule"] * 3  # model servers, collectors
    kinds = sorted(o["kind"] for o in gmp_objects())
    assert kinds == ["ConfigMap"] + ["PodMonitoring"] * 6 + ["Rules"] * 3


@pytest.mark.parametrize("name", STAGES)
def test_the_traffic_collectors_drift_gauges_are_scraped_on_their_port(name):
    """KServe's collector pods and TF Serving's proxy sidecars name their port ``traffic``: one monitor each."""
    from components.serving.collector import GAUGES_PATH

    collector = yaml.safe_load((ROOT / "manifests/traffic-collector/base/deployment.yaml").read_text())
    collector_pod = collector["spec"]["template"]
    ports = {p["name"] for p in collector_pod["spec"]["containers"][0]["ports"]}
    for monitor, endpoints in (
        (of_kind(operator_objects(), "PodMonitor", rules.COLLECTOR_JOB)[f"ltp-{name}"], "podMetricsEndpoints"),
        (of_kind(gmp_objects(), "PodMonitoring", rules.COLLECTOR_JOB)[f"ltp-{name}"], "endpoints"),
    ):
        (endpoint,) = monitor["spec"][endpoints]
        assert endpoint["port"] == "traffic" in ports and endpoint["path"] == GAUGES_PATH
        (match,) = monitor["spec"]["selector"]["matchExpressions"]
        assert collector_pod["metadata"]["labels"][match["key"]] in match["values"]
        model_server_pod = deployment(name)["spec"]["template"]["metadata"]["labels"]
        assert model_server_pod[match["key"]] in match["values"]  # the model servers, for their proxy sidecars


@pytest.mark.parametrize("name", STAGES)
def test_pod_monitors_scrape_the_model_server_pods(name):
    pod = deployment(name)["spec"]["template"]
    ports = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    for monitor, endpoints in (
        (of_kind(operator_objects(), "PodMonitor")[f"ltp-{name}"], "podMetricsEndpoints"),
        (of_kind(gmp_objects(), "PodMonitoring")[f"ltp-{name}"], "endpoints"),
    ):
        assert set(monitor["spec"]) == {"selector", endpoints}
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (endpoint,) = monitor["spec"][endpoints]
        assert set(endpoint) == {"port", "path", "interval"}
        assert endpoint["port"] in ports and endpoint["path"] == METRICS_PATH
        assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
    assert of_kind(operator_objects(), "PodMonitor")[f"ltp-{name}"]["apiVersion"] == "monitoring.coreos.com/v1"
    assert of_kind(gmp_objects(), "PodMonitoring")[f"ltp-{name}"]["apiVersion"] == "monitoring.googleapis.com/v1"


def test_selection_labels_and_dashboard_namespace_are_settings(tmp_path):
    settings = yaml.safe_load((MONITORING / "prometheus-operator" / "settings.yaml").read_text())["data"]
    objs = operator_objects()
    for obj in objs:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            assert obj["metadata"]["labels"]["release"] == settings["prometheusRelease"]
    (dash,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert dash["metadata"]["namespace"] == settings["dashboardNamespace"]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == settings["grafanaDashboardLabelValue"]
    # Changing the settings changes every object: they are not constants elsewhere.
    copy = tmp_path / "monitoring"
    shutil.copytree(MONITORING, copy)
    (copy / "prometheus-operator" / "settings.yaml").write_text(
        (MONITORING / "prometheus-operator" / "settings.yaml")
        .read_text()
        .replace("prometheusRelease: kube-prometheus-stack", "prometheusRelease: my-prom")
        .replace("dashboardNamespace: monitoring", "dashboardNamespace: grafana")
        .replace('grafanaDashboardLabelValue: "1"', 'grafanaDashboardLabelValue: "yes"')
    )
    out = subprocess.run(
        ["kubectl", "kustomize", str(copy / "prometheus-operator")], capture_output=True, text=True, check=True
    ).stdout
    changed = [o for o in yaml.safe_load_all(out) if o]
    assert {o["metadata"]["labels"]["release"] for o in changed if o["kind"] != "ConfigMap"} == {"my-prom"}
    (dash,) = [o for o in changed if o["kind"] == "ConfigMap"]
    assert (dash["metadata"]["namespace"], dash["metadata"]["labels"]["grafana_dashboard"]) == ("grafana", "yes")


def _thresholds(rule_obj):
    return {
        r["alert"]: (float(r["expr"].rsplit(" ", 1)[1]), r.get("for", "0m"))
        for r in rule_obj["spec"]["groups"][0]["rules"]
    }


def _seconds(duration):
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def test_alerts_per_stage_and_prod_stricter_than_demo():
    by_ns = of_kind(operator_objects(), "PrometheusRule")
    alerts = {s: _thresholds(by_ns[f"ltp-{s}"]) for s in STAGES}
    names = {
        "ModelServerErrorRatioHigh",
        "ModelServerLatencyP99High",
        "ModelServerNoTargetUp",
        "ModelServerModelLoadFailed",
    }
    for s in STAGES:
        assert set(alerts[s]) == names
        for rule in by_ns[f"ltp-{s}"]["spec"]["groups"][0]["rules"]:
            assert f'namespace="ltp-{s}"' in rule["expr"] and rule["labels"]["stage"] == s
    for name in ("ModelServerErrorRatioHigh", "ModelServerLatencyP99High"):
        assert alerts["prod"][name][0] < alerts["staging"][name][0] < alerts["demo"][name][0]
    for name in names:
        assert _seconds(alerts["prod"][name][1]) <= _seconds(alerts["demo"][name][1])
    assert _seconds(alerts["prod"]["ModelServerNoTargetUp"][1]) < _seconds(alerts["demo"]["ModelServerNoTargetUp"][1])
    # The same alerts on Managed Service for Prometheus.
    gmp = of_kind(gmp_objects(), "Rules")
    for s in STAGES:
        assert [r["expr"] for r in gmp[f"ltp-{s}"]["spec"]["groups"][0]["rules"]] == [
            r["expr"] for r in by_ns[f"ltp-{s}"]["spec"]["groups"][0]["rules"]
        ]


@needs_promtool
@pytest.mark.parametrize("name", STAGES)
def test_promtool_checks_each_stage_rule_groups(tmp_path, name):
    rule = of_kind(operator_objects(), "PrometheusRule")[f"ltp-{name}"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {4 + len(rules.traffic_alerts(name))} rules found" in out.stdout


@needs_promtool
def test_promtool_catches_a_broken_expression(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum(rate(x[5m])"}]}]}))
    assert subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True).returncode != 0


@needs_promtool
def test_every_dashboard_query_parses(tmp_path):
    (dash,) = [o for o in operator_objects() if o["kind"] == "ConfigMap"]
    model = json.loads(dash["data"]["model-serving.json"])
    assert model == rules.dashboard()
    titles = [p["title"] for p in model["panels"]]
    assert titles == [
        "Requests per second",
        "Error ratio",
        "Predict latency (p50, p95, p99)",
        "Model servers up, SavedModel load failures",
    ]
    queries = [rules.substitute_grafana_variables(q) for q in rules.dashboard_queries(model)]
    assert all("$" not in q for q in queries)
    # label_values(...) is Grafana's, not PromQL: its selector is what Prometheus is asked for.
    exprs = [re.sub(r"^label_values\((.*), \w+\)$", r"\1", q) for q in queries]
    path = tmp_path / "dashboard-queries.yaml"
    records = [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_pipeline_role_applies_no_monitoring_object_but_the_kserve_targets_pod_monitors():
    # An admin applies manifests/monitoring (docs/observability.md); the pipeline's Role stays as
    # small. The one exception: the kserve target applies each model's PodMonitor itself.
    for role in (o for o in objects("rbac") if o["kind"] == "Role"):
        monitoring = [
            rule
            for rule in role["rules"]
            if set(rule["apiGroups"]) & {"monitoring.coreos.com", "monitoring.googleapis.com"}
        ]
        assert all(rule["apiGroups"] == ["monitoring.coreos.com"] for rule in monitoring)
        assert {r for rule in monitoring for r in rule["resources"]} <= {"podmonitors"}
        assert all("delete" not in rule["verbs"] for rule in monitoring)

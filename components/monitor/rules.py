"""The alerts, objectives and dashboard of every serving stage, defined once.

The same PromQL serves four readers: the prometheus-operator ``PrometheusRule`` and Google Cloud
Managed Service for Prometheus ``Rules`` under ``manifests/monitoring`` (written from this module:
``python -m components.monitor.rules --write manifests/monitoring``; a unit test keeps the
committed files equal to what it writes), the Grafana dashboard, the monitor pipeline (which asks
Prometheus for each objective's value over a window) and the integration test (a real Prometheus
scraping the local model server evaluates the same rule file).

Every expression selects one stage by its Kubernetes namespace (``ltp-<stage>``), a label both
prometheus-operator and Managed Service for Prometheus put on every scraped series, and reads
only TensorFlow Serving's own metric names (``components.serving.metrics``), which the local
model server exports too: one query works on both. TF Serving's request metrics carry no version
label, so the dashboard splits by stage (namespace) and model name only.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import yaml

from components.monitor.drift import GAUGE_PREFIX, DriftConfig
from components.serving.collector import GAUGES_PATH
from components.serving.config import STAGES
from components.serving.metrics import LOAD_ATTEMPT_COUNT, METRICS_PATH, REQUEST_COUNT, REQUEST_LATENCY

JOB = "model-server"
"""The PodMonitor/PodMonitoring's name: prometheus-operator makes the job ``<namespace>/model-server``,
Managed Service for Prometheus ``model-server``; a local scrape config uses ``model-server``."""
POD_SELECTOR = {"app.kubernetes.io/name": "model-server", "app.kubernetes.io/part-of": "lean-tpu-pipelines"}
PART_OF = {"app.kubernetes.io/part-of": "lean-tpu-pipelines"}


def namespace(stage: str) -> str:
    """The stage's namespace (manifests/serving/overlays/<stage>)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: expected one of {list(STAGES)}")
    return f"ltp-{stage}"


@dataclasses.dataclass(frozen=True)
class StageObjectives:
    """What a stage must keep, and how soon a miss alerts.

    Attributes:
        max_error_ratio: the highest share of requests answered with an error (status != OK).
        max_p99_ms: the highest 99th-percentile latency of successful ``:predict`` requests.
        window: the rate window of the error ratio and latency.
        pending: how long a miss must last before its alert fires (the rules' ``for:``).
        down_pending: how long no target may be up before that alert fires.
        severity: the alerts' ``severity`` label.
        scrape_interval: how often the stage's pods are scraped.
    """

    max_error_ratio: float
    max_p99_ms: float
    window: str
    pending: str
    down_pending: str
    severity: str
    scrape_interval: str


OBJECTIVES: Mapping[str, StageObjectives] = {
    # demo serves the newest model to people trying it: loose, and slow to page anyone.
    "demo": StageObjectives(0.10, 2000.0, "10m", "15m", "15m", "warning", "30s"),
    "staging": StageObjectives(0.05, 1000.0, "5m", "10m", "10m", "warning", "30s"),
    # prod: the latency objective is the prod load test's p99 (trainer.config LOAD_TESTS).
    "prod": StageObjectives(0.01, 300.0, "5m", "5m", "2m", "critical", "15s"),
}


def _sel(stage: str, **matchers: str) -> str:
    parts = [f'namespace="{namespace(stage)}"']
    for key, value in matchers.items():
        op = "!=" if key.endswith("_not") else "=~" if key.endswith("_re") else "="
        name = key.removesuffix("_not").removesuffix("_re")
        parts.append(f'{name}{op}"{value}"')
    return "{" + ",".join(parts) + "}"


def error_ratio(stage: str, window: str) -> str:
    """The share of requests answered with an error, per model."""
    by = "sum by (namespace, model_name)"
    return (
        f"{by} (rate({REQUEST_COUNT}{_sel(stage, status_not='OK')}[{window}])) / "
        f"{by} (rate({REQUEST_COUNT}{_sel(stage)}[{window}]))"
    )


def latency_quantile_ms(stage: str, window: str, quantile: float = 0.99) -> str:
    """A latency percentile of successful REST ``:predict`` requests, in milliseconds, per model."""
    buckets = f"{REQUEST_LATENCY}_bucket{_sel(stage, API='predict', entrypoint='REST')}"
    return f"histogram_quantile({quantile}, sum by (namespace, model_name, le) (rate({buckets}[{window}]))) / 1000"


def targets_up(stage: str) -> str:
    """How many of the stage's model-server targets are up (0 when there is none at all)."""
    return f"sum(up{_sel(stage, job_re=f'(.+/)?{JOB}')}) or vector(0)"


def load_failures(stage: str, window: str = "15m") -> str:
    """Failed SavedModel loads over ``window``, per model path."""
    return f"sum by (namespace, model_path) (increase({LOAD_ATTEMPT_COUNT}{_sel(stage, status='fail')}[{window}]))"


@dataclasses.dataclass(frozen=True)
class Alert:
    """One alert: ``value op threshold`` for ``pending``.

    Attributes:
        name: the alert's name.
        value: the PromQL whose value is compared (what the monitor pipeline and the test query).
        op: the comparison.
        threshold: the bound.
        pending: the rule's ``for:``.
        summary: one line for a person.
    """

    name: str
    value: str
    op: str
    threshold: float
    pending: str
    summary: str

    @property
    def expr(self) -> str:
        """The alert's expression."""
        return f"({self.value}) {self.op} {self.threshold:g}"


def alerts(stage: str, objectives: Optional[StageObjectives] = None) -> list[Alert]:
    """The stage's alerts: error ratio, p99 latency, no target up, model load failures."""
    o = objectives or OBJECTIVES[stage]
    ns = namespace(stage)
    return [
        Alert(
            "ModelServerErrorRatioHigh",
            error_ratio(stage, o.window),
            ">",
            o.max_error_ratio,
            o.pending,
            f"{ns}: more than {o.max_error_ratio:.0%} of requests to {{{{ $labels.model_name }}}} fail "
            f"(over {o.window})",
        ),
        Alert(
            "ModelServerLatencyP99High",
            latency_quantile_ms(stage, o.window),
            ">",
            o.max_p99_ms,
            o.pending,
            f"{ns}: p99 latency of {{{{ $labels.model_name }}}} predictions is above {o.max_p99_ms:g} ms",
        ),
        Alert(
            "ModelServerNoTargetUp",
            targets_up(stage),
            "<",
            1,
            o.down_pending,
            f"{ns}: no model server pod is up (or none is scraped)",
        ),
        Alert(
            "ModelServerModelLoadFailed",
            load_failures(stage),
            ">",
            0,
            "0m",
            f"{ns}: TensorFlow Serving failed to load {{{{ $labels.model_path }}}}",
        ),
    ]


def traffic_alerts(stage: str, config: Optional[DriftConfig] = None) -> list[Alert]:
    """The stage's alerts on its sampled traffic: the drift gauges the monitor writes (``components.monitor.drift``).

    Each fires at once (a monitor run already judged a whole window with enough samples), per
    kind of check, with the thresholds of :class:`DriftConfig`; a check without enough traffic
    or without a reference exports no figure, so it never fires.
    """
    c = config or DriftConfig()
    ns = namespace(stage)
    figure = f"{GAUGE_PREFIX}drift_figure"
    by = "max by (namespace, model_name)"
    kinds = [
        ("TrafficClassSharesShifted", 'check="class_shares"', c.max_class_divergence,
         "the predicted classes' shares moved away from the evaluation's (Jensen-Shannon)"),
        ("TrafficClassShareChanged", 'check="class_change"', c.max_class_change,
         "one predicted class's share changed more than allowed"),
        ("TrafficScoresShifted", 'check=~"psi_score|psi_margin"', c.max_psi, "the answers' scores or margins shifted"),
        ("TrafficImagesShifted", 'check=~"psi_(width|height|channels|brightness|contrast)"', c.max_psi,
         "the images sent (size, channels, brightness or contrast) shifted"),
        ("TrafficDecodeFailuresHigh", 'check="decode_failures"', c.max_decode_failure_rate,
         "more images than at evaluation do not decode"),
        ("TrafficEmptyAnswersHigh", 'check="empty_answers"', c.max_empty_answer_rate,
         "more answers than at evaluation are empty"),
    ]  # fmt: skip
    return [
        Alert(name, f'{by} ({figure}{{namespace="{ns}",{match}}})', ">", bound, "0m",
              f"{ns}: {{{{ $labels.model_name }}}}: {what} (drift.json says by how much)")
        for name, match, bound, what in kinds
    ]  # fmt: skip


def _rules(stage: str, found: Sequence[Alert], severity: str) -> list[dict[str, Any]]:
    rules = []
    for alert in found:
        rule: dict[str, Any] = {"alert": alert.name, "expr": alert.expr}
        if alert.pending != "0m":
            rule["for"] = alert.pending
        rule["labels"] = {"severity": severity, "stage": stage, "namespace": namespace(stage)}
        rule["annotations"] = {"summary": alert.summary, "runbook": "docs/observability.md#alerts"}
        rules.append(rule)
    return rules


def rule_groups(stage: str, objectives: Optional[StageObjectives] = None) -> list[dict[str, Any]]:
    """The stage's Prometheus rule groups (a rule file's ``groups``; a PrometheusRule's ``spec.groups``).

    The first holds the model server's objectives, the second the alerts on its sampled traffic
    (a warning on every stage: drift is not an outage).
    """
    o = objectives or OBJECTIVES[stage]
    return [
        {"name": f"model-server-{stage}", "interval": "30s", "rules": _rules(stage, alerts(stage, o), o.severity)},
        {"name": f"traffic-drift-{stage}", "interval": "1m", "rules": _rules(stage, traffic_alerts(stage), "warning")},
    ]


# -- Kubernetes objects --------------------------------------------------------------------------


def pod_monitor(stage: str) -> dict[str, Any]:
    """The prometheus-operator PodMonitor scraping the stage's TensorFlow Serving pods."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": JOB,
            "namespace": namespace(stage),
            "labels": {**PART_OF, "release": "kube-prometheus-stack"},
        },
        "spec": {
            "selector": {"matchLabels": dict(POD_SELECTOR)},
            "podMetricsEndpoints": [
                {"port": "http", "path": METRICS_PATH, "interval": OBJECTIVES[stage].scrape_interval}
            ],
        },
    }


COLLECTOR_JOB = "traffic-collector"
COLLECTOR_SELECTOR = {
    "matchExpressions": [
        {"key": "app.kubernetes.io/name", "operator": "In", "values": ["traffic-collector", "model-server"]}
    ]
}
"""The traffic collectors: KServe's (their own pods) and TensorFlow Serving's proxy sidecars (in the
model servers' pods); both name their port ``traffic``, which a model server without a sidecar lacks."""


def collector_pod_monitor(stage: str) -> dict[str, Any]:
    """The prometheus-operator PodMonitor scraping the stage's drift gauges from its traffic collectors."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": COLLECTOR_JOB,
            "namespace": namespace(stage),
            "labels": {**PART_OF, "release": "kube-prometheus-stack"},
        },
        "spec": {
            "selector": copy.deepcopy(COLLECTOR_SELECTOR),
            "podMetricsEndpoints": [{"port": "traffic", "path": GAUGES_PATH, "interval": "60s"}],
        },
    }


def collector_pod_monitoring(stage: str) -> dict[str, Any]:
    """Managed Service for Prometheus' PodMonitoring of the stage's traffic collectors."""
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {"name": COLLECTOR_JOB, "namespace": namespace(stage), "labels": dict(PART_OF)},
        "spec": {
            "selector": copy.deepcopy(COLLECTOR_SELECTOR),
            "endpoints": [{"port": "traffic", "path": GAUGES_PATH, "interval": "60s"}],
        },
    }


def prometheus_rule(stage: str) -> dict[str, Any]:
    """The prometheus-operator PrometheusRule with the stage's alerts."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": JOB,
            "namespace": namespace(stage),
            "labels": {**PART_OF, "release": "kube-prometheus-stack"},
        },
        "spec": {"groups": rule_groups(stage)},
    }


def pod_monitoring(stage: str) -> dict[str, Any]:
    """Managed Service for Prometheus' PodMonitoring (``monitoring.googleapis.com/v1``)."""
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {"name": JOB, "namespace": namespace(stage), "labels": dict(PART_OF)},
        "spec": {
            "selector": {"matchLabels": dict(POD_SELECTOR)},
            "endpoints": [{"port": "http", "path": METRICS_PATH, "interval": OBJECTIVES[stage].scrape_interval}],
        },
    }


def gmp_rules(stage: str) -> dict[str, Any]:
    """Managed Service for Prometheus' namespaced Rules (``monitoring.googleapis.com/v1``).

    A namespaced Rules object is scoped to its namespace by the service itself (which adds the
    ``namespace`` label), so the rules carry no ``namespace`` label of their own.
    """
    groups = rule_groups(stage)
    for rule in (r for g in groups for r in g["rules"]):
        rule["labels"].pop("namespace")
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "Rules",
        "metadata": {"name": JOB, "namespace": namespace(stage), "labels": dict(PART_OF)},
        "spec": {"groups": groups},
    }


# -- Grafana dashboard ---------------------------------------------------------------------------

DASHBOARD_UID = "ltp-model-serving"
_NS = 'namespace=~"$namespace",model_name=~"$model_name"'


def _panel(pid: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _dashboard_panels() -> list[dict[str, Any]]:
    """The dashboard's panels: request rate, error ratio, latency percentiles, servers up and load failures."""
    rate = "$__rate_interval"
    count = f"{REQUEST_COUNT}{{{_NS}}}"
    errors = f'{REQUEST_COUNT}{{{_NS},status!="OK"}}'
    buckets = f'{REQUEST_LATENCY}_bucket{{{_NS},API="predict",entrypoint="REST"}}'
    by = "namespace, model_name"
    latency = [
        (
            f"histogram_quantile({q}, sum by ({by}, le) (rate({buckets}[{rate}]))) / 1000",
            f"p{int(q * 100)} {{{{namespace}}}} {{{{model_name}}}}",
        )
        for q in (0.5, 0.95, 0.99)
    ]
    return [
        _panel(
            1,
            "Requests per second",
            "reqps",
            [(f"sum by ({by}, status) (rate({count}[{rate}]))", "{{namespace}} {{model_name}} {{status}}")],
            0,
            0,
        ),
        _panel(
            2,
            "Error ratio",
            "percentunit",
            [
                (
                    f"sum by ({by}) (rate({errors}[{rate}])) / sum by ({by}) (rate({count}[{rate}]))",
                    "{{namespace}} {{model_name}}",
                )
            ],
            12,
            0,
        ),
        _panel(3, "Predict latency (p50, p95, p99)", "ms", latency, 0, 8),
        _panel(
            4,
            "Model servers up, SavedModel load failures",
            "short",
            [
                (f'sum by (namespace) (up{{namespace=~"$namespace",job=~"(.+/)?{JOB}"}})', "up {{namespace}}"),
                (
                    f'sum by (namespace) (increase({LOAD_ATTEMPT_COUNT}{{namespace=~"$namespace",status="fail"}}'
                    f"[{rate}]))",
                    "load failures {{namespace}}",
                ),
            ],
            12,
            8,
        ),
    ]


def _variable(name: str, query: str, label: str) -> dict[str, Any]:
    """A dashboard variable whose values a Prometheus query lists (all selected by default)."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "refresh": 2,
    }


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model: request rate, error ratio, latency percentiles per stage and model."""
    return {
        "uid": DASHBOARD_UID,
        "title": "Model serving (TensorFlow Serving)",
        "tags": ["lean-tpu-pipelines", "tensorflow-serving"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable("namespace", f'label_values({REQUEST_COUNT}{{namespace=~"ltp-.*"}}, namespace)', "Stage"),
                _variable(
                    "model_name", f'label_values({REQUEST_COUNT}{{namespace=~"$namespace"}}, model_name)', "Model"
                ),
            ]
        },
        "panels": _dashboard_panels(),
    }


def dashboard_queries(value: Any = None) -> list[str]:
    """Every PromQL query in the dashboard (panel targets and variable queries)."""
    value = dashboard() if value is None else value
    queries = [t["expr"] for p in value["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in value["templating"]["list"] if v["type"] == "query"]
    return queries


def substitute_grafana_variables(query: str, rate_interval: str = "1m") -> str:
    """A dashboard query with Grafana's variables replaced, as Grafana sends it to Prometheus."""
    return (
        query.replace("$__rate_interval", rate_interval)
        .replace("$namespace", ".*")
        .replace("$model_name", ".*")
        .replace("${datasource}", "prometheus")
    )


# -- the files under manifests/monitoring --------------------------------------------------------

_HEADER = "# Written by `python -m components.monitor.rules --write manifests/monitoring`; edit that module.\n"


def _yaml(*docs: Mapping[str, Any]) -> str:
    return _HEADER + "---\n".join(yaml.safe_dump(copy.deepcopy(dict(d)), sort_keys=False, width=200) for d in docs)


def generated_files() -> dict[str, str]:
    """The generated files under manifests/monitoring, by relative path."""
    files = {}
    for stage in STAGES:
        files[f"stages/{stage}/podmonitor.yaml"] = _yaml(pod_monitor(stage), collector_pod_monitor(stage))
        files[f"stages/{stage}/prometheusrule.yaml"] = _yaml(prometheus_rule(stage))
        files[f"components/managed-prometheus/{stage}.yaml"] = _yaml(
            pod_monitoring(stage), collector_pod_monitoring(stage), gmp_rules(stage)
        )
    files["dashboard/model-serving.json"] = json.dumps(dashboard(), indent=2) + "\n"
    return files


def write_manifests(root: str | Path) -> list[Path]:
    """Write :func:`generated_files` under ``root`` (manifests/monitoring); returns the paths."""
    written = []
    for rel, text in generated_files().items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write the monitoring manifests, or print one stage's rule file."""
    parser = argparse.ArgumentParser(prog="python -m components.monitor.rules", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", help="write the generated files under DIR (manifests/monitoring)")
    group.add_argument("--rule-file", metavar="STAGE", choices=STAGES, help="print STAGE's Prometheus rule file")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_manifests(args.write):
            print(path)
    else:
        print(yaml.safe_dump({"groups": rule_groups(args.rule_file)}, sort_keys=False, width=200), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

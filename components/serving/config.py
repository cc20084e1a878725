"""The serving configs: the stages, a stage's load test, and the promote and monitor steps' settings.

``PromoteConfig`` and ``MonitorConfig`` are the promote and monitor steps' sections; they live with
the serving package that takes them (the serving targets promote and watch with them), beside
the stages and the load tests they name. No TensorFlow, no kfp.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from trainer.configbase import ConfigBase

STAGES = ("demo", "staging", "prod")


@dataclasses.dataclass(frozen=True)
class LoadTestConfig(ConfigBase):
    """A stage's load test at promotion: its bounds and the objectives it must meet.

    The test sends one-image ``:predict`` requests from ``clients`` clients (one keep-alive
    connection each) until ``max_requests`` were sent or ``max_seconds`` passed. A missed
    objective fails the promotion, which rolls back like a failed smoke check.

    Attributes:
        clients: concurrent clients.
        max_requests: the most requests sent, all clients together.
        max_seconds: the most seconds the test runs.
        max_p50_ms: the highest median latency allowed (None: not checked).
        max_p95_ms: the highest 95th-percentile latency allowed (None: not checked).
        max_p99_ms: the highest 99th-percentile latency allowed (None: not checked).
        min_requests_per_s: the lowest rate of answered requests allowed (None: not checked).
        max_errors: the most failed requests (non-200 answers, connection errors) allowed.
    """

    _section: ClassVar[str] = "promote.load_test."

    clients: int = 4
    max_requests: int = 200
    max_seconds: float = 2.0
    max_p50_ms: Optional[float] = None
    max_p95_ms: Optional[float] = None
    max_p99_ms: Optional[float] = None
    min_requests_per_s: Optional[float] = None
    max_errors: int = 0

    def validate(self) -> None:
        if self.clients < 1:
            self._fail("clients", f"must be >= 1, got {self.clients}")
        if self.max_requests < 1:
            self._fail("max_requests", f"must be >= 1, got {self.max_requests}")
        if self.max_seconds <= 0:
            self._fail("max_seconds", f"must be > 0, got {self.max_seconds}")
        if self.max_errors < 0:
            self._fail("max_errors", f"must be >= 0, got {self.max_errors}")
        for name in ("max_p50_ms", "max_p95_ms", "max_p99_ms", "min_requests_per_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                self._fail(name, f"must be > 0 (or none: not checked), got {value}")

    def objectives(self) -> dict[str, float]:
        """The objectives that are set, by name (kept with the result in the stage history)."""
        names = ("max_p50_ms", "max_p95_ms", "max_p99_ms", "min_requests_per_s", "max_errors")
        return {n: float(getattr(self, n)) for n in names if getattr(self, n) is not None}

    def violations(self, figures: Mapping[str, float]) -> list[str]:
        """What the measured ``figures`` (a :class:`~components.serving.load.LoadResult`'s) miss."""
        missed = []
        for pct in ("p50", "p95", "p99"):
            limit = getattr(self, f"max_{pct}_ms")
            value = figures.get(f"{pct}_ms")
            if limit is not None and (value is None or value > limit):
                shown = "none answered" if value is None else f"{value:.1f} ms"
                missed.append(f"{pct} {shown} > objective {limit:g} ms")
        rate = figures.get("requests_per_s", 0.0)
        if self.min_requests_per_s is not None and rate < self.min_requests_per_s:
            missed.append(f"{rate:.1f} req/s < objective {self.min_requests_per_s:g} req/s")
        if figures.get("errors", 0) > self.max_errors:
            missed.append(f"{int(figures['errors'])} errors > allowed {self.max_errors}")
        return missed


# Prod's profile on a cluster: what a release must sustain. Staging runs it scaled down (fewer
# clients and requests, the same latency objectives, a proportionally lower rate); demo runs a
# minimal one that only proves the server answers under a little concurrency.
_PROD_LOAD_TEST = LoadTestConfig(
    clients=16, max_requests=4000, max_seconds=30.0, max_p50_ms=50.0, max_p95_ms=150.0, max_p99_ms=300.0,
    min_requests_per_s=100.0,
)  # fmt: skip


LOAD_TESTS: Mapping[tuple[str, str], LoadTestConfig] = types.MappingProxyType(
    {
        ("cluster", "prod"): _PROD_LOAD_TEST,
        ("cluster", "staging"): _PROD_LOAD_TEST.replace(clients=4, max_requests=1000, min_requests_per_s=25.0),
        ("cluster", "demo"): LoadTestConfig(clients=2, max_requests=50, max_seconds=5.0, max_p99_ms=1000.0),
        # Local (a loopback server on a laptop or a shared CI machine): the same shapes, objectives
        # loose enough that a noisy machine never trips them; they still catch a broken server.
        ("loopback", "prod"): LoadTestConfig(
            clients=4,
            max_requests=200,
            max_seconds=4.0,
            max_p95_ms=5000.0,
            max_p99_ms=10000.0,
            min_requests_per_s=1.0,
        ),  # fmt: skip
        ("loopback", "staging"): LoadTestConfig(
            clients=2, max_requests=100, max_seconds=2.0, max_p99_ms=10000.0, min_requests_per_s=1.0
        ),
        ("loopback", "demo"): LoadTestConfig(clients=1, max_requests=20, max_seconds=2.0, max_p99_ms=10000.0),
    }
)
"""The default load test of each (load profile, stage): a serving target's ``load_profile`` is
``cluster`` (servers in a cluster) or ``loopback`` (a server on the step's machine);
``PromoteConfig.load_test`` overrides it."""


_TARGET_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def _check_target(config: ConfigBase, target: str) -> None:
    """Fails ``config``'s ``target`` unless it is shaped like a serving target's name.

    Which targets exist is the registry's to say (``components.serving.targets``, which the steps
    ask when they start: an unknown name is refused there, with the known ones listed); this
    library knows nothing of the steps.
    """
    if not isinstance(target, str) or not _TARGET_NAME.fullmatch(target):
        config._fail("target", f"expected a serving target's name such as 'local' or 'kubernetes', got {target!r}")


@dataclasses.dataclass(frozen=True)
class PromoteConfig(ConfigBase):
    """How a model reaches a serving stage (docs/promotion.md).

    Attributes:
        stage: ``demo``, ``staging`` or ``prod``.
        target: the serving target by its name in ``components.serving.targets``: ``local`` (a
            loopback model server, stage folders under ``stages_root``), ``kubernetes`` (the
            stage's manifests applied to the cluster) or ``kserve`` (one KServe InferenceService
            per model, docs/kserve.md).
        stages_root: where the stages keep their model versions and history (a folder or gs://).
        model_name: the name the model is served under (``/v1/models/<name>``).
        smoke_examples: known test images the prediction check sends.
        min_smoke_accuracy: share of those the model must get right.
        rollout_timeout_s: how long to wait for a rollout before rolling back.
        task: the model's task (``trainer.tasks``), which the serving checks ask; None: what the
            model folder's ``training.json`` says (promote) or the stage's known examples say
            (rollback, promote-version), ``classification`` where neither says.
        load_test: the stage's load test at promotion, run after the smoke checks, and its
            objectives; None: the default of the target's load profile and the stage
            (``LOAD_TESTS``: demo minimal, staging prod's profile scaled down, prod prod's; loose
            ones for target local).
        canary_steps: the traffic shares (percent, increasing, the last 100) a new version takes
            one after the other on a target that splits traffic, checked at each; None: the
            target's default (kserve in Knative mode: 10, 50, 100; local: no canary, the new
            version replaces the old at once). The first version of a model never has a canary.
        serving_options: the serving target's own settings, by name, which it reads into its
            typed options (an unknown key or a wrong value fails the step, naming the keys it
            takes); e.g. ``{mode: standard}`` for kserve (docs/kserve.md), ``{port: 8600}`` for local.
        allow_contract_change: let a model whose class names, class order, input signature or
            output keys differ from what the stage serves under the same model name replace it
            (the change is recorded in the stage history); false refuses such a promotion with
            one line naming the difference (docs/promotion.md).
        serving_format: the form the stage serves the model in: ``saved_model``, a portable format
            its export passed (``litert``, ``litert_int8``, ``onnx``, ``onnx_int8``) that the
            target can serve, or ``auto``: of those, the best images per dollar (docs/export.md).
    """

    _section: ClassVar[str] = "promote."
    _renamed: ClassVar[Mapping[str, str]] = {"kserve_mode": "serving_options.mode"}

    stage: str = "demo"
    target: str = "local"
    stages_root: str = "stages"
    model_name: str = "classifier"
    smoke_examples: int = 16
    min_smoke_accuracy: float = 0.5
    rollout_timeout_s: float = 300.0
    task: Optional[str] = None
    load_test: Optional[LoadTestConfig] = None
    canary_steps: Optional[tuple[int, ...]] = None
    serving_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    allow_contract_change: bool = False
    serving_format: str = "saved_model"

    def validate(self) -> None:
        from trainer.export import serving  # no TensorFlow: the names only
        from trainer.tasks import task_names  # no TensorFlow: the task table only

        try:
            serving.check_name(self.serving_format)
        except serving.ServingFormatError as err:
            raise self._error(str(err)) from None

        if self.task is not None and self.task not in task_names():
            self._fail("task", f"expected one of {task_names()} (or none: read from the model), got {self.task!r}")
        if self.stage not in STAGES:
            self._fail("stage", f"expected one of {list(STAGES)}, got {self.stage!r}")
        _check_target(self, self.target)
        if not self.model_name.replace("-", "").replace("_", "").isalnum():
            self._fail("model_name", f"use letters, digits, '-' and '_', got {self.model_name!r}")
        if self.smoke_examples < 1:
            self._fail("smoke_examples", f"must be >= 1, got {self.smoke_examples}")
        if not 0 <= self.min_smoke_accuracy <= 1:
            self._fail("min_smoke_accuracy", f"must be in [0, 1], got {self.min_smoke_accuracy}")
        if self.rollout_timeout_s <= 0:
            self._fail("rollout_timeout_s", f"must be > 0, got {self.rollout_timeout_s}")
        steps = self.canary_steps
        if steps is not None and (
            not steps or steps[-1] != 100 or list(steps) != sorted(set(steps)) or not all(0 < s <= 100 for s in steps)
        ):
            self._fail("canary_steps", f"expected increasing percentages in 1..100 ending with 100, got {steps}")

    def effective_load_test(self, load_profile: str) -> LoadTestConfig:
        """The load test this stage runs: ``load_test``, else the default of the stage and of the
        target's ``load_profile`` (``cluster`` or ``loopback``, a serving target's attribute).
        """
        if self.load_test is not None:
            return self.load_test
        return LOAD_TESTS[(load_profile, self.stage)]


@dataclasses.dataclass(frozen=True)
class MonitorConfig(ConfigBase):
    """How the monitor pipeline watches the serving stages (docs/observability.md).

    Attributes:
        prometheus_url: the Prometheus (or compatible query API) that scrapes the stages, e.g.
            ``http://prometheus-operated.monitoring:9090``.
        stages_root: the stage registry (a folder or gs://): what each stage serves, and the known
            images kept at promotion.
        stages: the stages to watch; one that serves nothing is reported and skipped.
        window: the PromQL range the objectives are measured over (``1h``, ``30m``).
        target: where the stages serve, by its name in ``components.serving.targets``: ``local``
            (a loopback server is started from the stage registry for the checks),
            ``kubernetes`` (the stage's Service in the cluster) or ``kserve`` (each model's
            InferenceService).
        model_name: the served model name.
        min_smoke_accuracy: the share of the known images the prediction check must get right.
        timeout_s: how long one Prometheus query or the health check may take.
        serving_options: the serving target's own settings, as for the promotion
            (``PromoteConfig.serving_options``): where the target looks for the stages' servers.
    """

    _section: ClassVar[str] = "monitor."

    prometheus_url: str = "http://127.0.0.1:9090"
    stages_root: str = "stages"
    stages: tuple[str, ...] = STAGES
    window: str = "1h"
    target: str = "local"
    model_name: str = "classifier"
    min_smoke_accuracy: float = 0.5
    timeout_s: float = 30.0
    serving_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        if not self.prometheus_url.startswith(("http://", "https://")):
            self._fail("prometheus_url", f"must be an http(s) URL, got {self.prometheus_url!r}")
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            self._fail("stages", f"expected some of {list(STAGES)}, got {list(self.stages)}")
        _check_target(self, self.target)
        if not re.fullmatch(r"[1-9][0-9]*[smhd]", self.window):
            self._fail("window", f"must be a PromQL duration such as 30m or 1h, got {self.window!r}")
        if not 0 <= self.min_smoke_accuracy <= 1:
            self._fail("min_smoke_accuracy", f"must be in [0, 1], got {self.min_smoke_accuracy}")
        if self.timeout_s <= 0:
            self._fail("timeout_s", f"must be > 0, got {self.timeout_s}")

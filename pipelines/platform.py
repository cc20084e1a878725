"""The Kubernetes settings every compiled pipeline gives its steps (kfp-kubernetes 2.17.3).

:func:`pipeline` stands in for ``dsl.pipeline``: after the pipeline function has made its tasks,
each task that runs a container gets, through ``kfp.kubernetes``:

- **pod labels** (literals only: kfp-kubernetes refuses a run-time value): ``app.kubernetes.io/
  part-of: lean-tpu-pipelines``, ``lean-tpu-pipelines.dev/pipeline: <pipeline>``,
  ``lean-tpu-pipelines.dev/step: <component>``, ``lean-tpu-pipelines.dev/stage: <stage>`` on a
  promotion, and ``lean-tpu-pipelines.dev/preset: <preset>`` when compiled for one. GKE cost
  allocation and OpenCost attribute spend by pod labels; the accelerator and the model a run chose
  are in the run's own records (``training.json``). The workers a train step launches inherit them.
- **a deadline** (``activeDeadlineSeconds``, compile-time): :data:`LONG_DEADLINE_S` on the steps a
  run-time budget or a notebook timeout can make long (longer than ``trainer.budget.limits.MAX_BUDGET_S``,
  the most either may ask for), :data:`DEADLINE_S` on every other step.
- **the hub credentials** (steps that may download weights or run a user's code:
  ``Surface.hub_secret``) from the Secret the run parameter ``secret_name`` names (default
  :data:`DEFAULT_SECRET`), as the environment variables of :data:`SECRET_KEYS`, ``optional``: a
  missing Secret or key leaves the variable unset and never blocks the pod. A nested pipeline (a
  grid's cell, a search's trial) takes the compile-time name (``LTP_SECRET_NAME``).
- **the same Secret as files** at ``trainer.runtime.CREDENTIALS_DIR`` on every step, ``optional``:
  a service account key under ``gcp-key.json``, for clusters without Workload Identity (the step
  points ``GOOGLE_APPLICATION_CREDENTIALS`` at it when it is there).
- **image pull secrets** for a private registry: compile-time (``make compile PULL_SECRETS=regcred``,
  ``LTP_PULL_SECRETS``, comma-separated); none by default.

And the pipeline gets a ``PipelineConfig`` with a TTL for finished runs' workflow objects
(:data:`TTL_S`, ``LTP_RUN_TTL_S``). kfp.local ignores all of it: the compiled YAML's platform spec
is what tests check.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Optional

from kfp import dsl, kubernetes
from kfp.dsl import pipeline_context

from components.surface import surfaces
from trainer.budget.limits import MAX_BUDGET_S
from trainer.runtime import CREDENTIALS_DIR

PART_OF = ("app.kubernetes.io/part-of", "lean-tpu-pipelines")
LABEL_PREFIX = "lean-tpu-pipelines.dev/"
PRESET_LABEL = f"{LABEL_PREFIX}preset"
DEFAULT_SECRET = "lean-tpu-pipelines"
SECRET_PARAMETER = "secret_name"
# Secret key -> environment variable: the model hubs' credentials (trainer/presets.py).
SECRET_KEYS: Mapping[str, str] = {
    "HF_TOKEN": "HF_TOKEN",
    "KAGGLE_USERNAME": "KAGGLE_USERNAME",
    "KAGGLE_KEY": "KAGGLE_KEY",
}
DEADLINE_S = 24 * 3600
LONG_DEADLINE_S = int(MAX_BUDGET_S) + 6 * 3600
TTL_S = 7 * 24 * 3600
SECRET_ENV, PULL_ENV, TTL_ENV = "LTP_SECRET_NAME", "LTP_PULL_SECRETS", "LTP_RUN_TTL_S"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The compile-time part of the platform settings.

    Attributes:
        secret_name: the Secret nested pipelines read (top-level ones take the run parameter).
        pull_secrets: image pull secrets of every step.
        ttl_s: seconds a finished run's workflow object is kept; 0 for no TTL.
    """

    secret_name: str = DEFAULT_SECRET
    pull_secrets: tuple[str, ...] = ()
    ttl_s: int = TTL_S

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """The settings ``make compile`` passes through the environment; unset ones keep the defaults.

        Raises:
            ValueError: a TTL that is not a whole number of seconds >= 0, or a Secret name that
                is not a Kubernetes object name.
        """
        ttl_text = environ.get(TTL_ENV, "").strip()
        if ttl_text and not ttl_text.isdigit():
            raise ValueError(f"{TTL_ENV}: expected whole seconds >= 0 (604800 keeps a week), got {ttl_text!r}")
        names = [n.strip() for n in environ.get(PULL_ENV, "").split(",") if n.strip()]
        secret = environ.get(SECRET_ENV, "").strip() or DEFAULT_SECRET
        for name in [*names, secret]:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
                raise ValueError(f"{name!r} is not a Kubernetes Secret name (lower-case letters, digits, '-', '.')")
        return cls(secret, tuple(names), int(ttl_text) if ttl_text else TTL_S)


def preset_labels(preset: Optional[str]) -> dict[str, str]:
    """The label of a compiled preset (none without one)."""
    return {PRESET_LABEL: preset} if preset else {}


def label_value(text: str) -> str:
    """``text`` as a label value: at most 63 characters of letters, digits, ``-``, ``_``, ``.``."""
    value = _LABEL_VALUE.sub("-", text).strip("-_.")[:63].strip("-_.")
    return value or "none"


def _component_name(task: Any) -> str:
    return task.component_spec.name.replace("_", "-")


def _settle_task(task: Any, pipeline_name: str, secret: Any, settings: Settings, labels: Mapping[str, str]) -> None:
    """One container task's labels, deadline, secrets and pull secrets."""
    step = _component_name(task)
    all_labels = {PART_OF[0]: PART_OF[1], f"{LABEL_PREFIX}pipeline": pipeline_name, f"{LABEL_PREFIX}step": step}
    stage = task.inputs.get("stage")
    if isinstance(stage, str) and stage:
        all_labels[f"{LABEL_PREFIX}stage"] = stage
    for key, value in {**all_labels, **labels}.items():
        kubernetes.add_pod_label(task, key, label_value(value))
    surface = surfaces().get(step)
    kubernetes.set_timeout(task, LONG_DEADLINE_S if surface and surface.long_running else DEADLINE_S)
    if surface and surface.hub_secret:
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env=dict(SECRET_KEYS), optional=True)
    # The same Secret as files: a service account key (gcp-key.json) where Workload Identity is not
    # used; trainer.runtime points GOOGLE_APPLICATION_CREDENTIALS at it when it is there.
    kubernetes.use_secret_as_volume(task, secret_name=secret, mount_path=CREDENTIALS_DIR, optional=True)
    if settings.pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(settings.pull_secrets))


def settle(pipeline_name: str, secret: Any, settings: Settings, labels: Optional[Mapping[str, str]] = None) -> None:
    """Gives every container task of the pipeline being defined its platform settings.

    Args:
        pipeline_name: the pipeline's name (a label).
        secret: the Secret's name: the ``secret_name`` parameter's channel, or a literal.
        settings: the compile-time settings.
        labels: further labels (the compiled preset).
    """
    pipeline = pipeline_context.Pipeline.get_default_pipeline()
    for task in pipeline.tasks.values():
        if task.container_spec is not None:
            _settle_task(task, label_value(pipeline_name.replace("_", "-")), secret, settings, labels or {})


def pipeline(
    name: str,
    description: Optional[str] = None,
    *,
    nested: bool = False,
    part_of: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    settings: Optional[Settings] = None,
) -> Callable[[Callable[..., Any]], Any]:
    """``dsl.pipeline`` with the platform settings (the module docstring), for every pipeline here.

    A top-level pipeline gains the run parameter ``secret_name`` (its Args line included); a
    nested one (``nested=True``: a grid cell, a search trial) reads the compile-time name.

    Args:
        name: the pipeline's name.
        description: its description.
        nested: a pipeline used as a task of another.
        part_of: a nested pipeline's: the pipeline it belongs to, whose name its steps' pipeline
            label carries (for cost allocation, one name per compiled pipeline).
        labels: labels every step of it gets besides the standard ones (the compiled preset).
        settings: the compile-time settings; None reads them from the environment.
    """
    chosen = settings or Settings.from_environ(os.environ)

    def decorate(func: Callable[..., Any]) -> Any:
        if nested:
            wrapped = _with_settings(func, part_of or name, chosen, labels)
        else:
            wrapped = _with_secret_parameter(func, inspect.signature(func), name, chosen, labels)
        config = dsl.PipelineConfig(ttl_seconds_after_finished=chosen.ttl_s) if chosen.ttl_s and not nested else None
        return dsl.pipeline(name=name, description=description, pipeline_config=config)(wrapped)

    return decorate


def _with_settings(
    func: Callable[..., Any], name: str, settings: Settings, labels: Optional[Mapping[str, str]]
) -> Callable[..., Any]:
    """A nested pipeline: its steps read the compile-time Secret name."""

    def run(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        settle(name, settings.secret_name, settings, labels)
        return result

    _copy_identity(func, run, inspect.signature(func), func.__doc__)
    return run


def _with_secret_parameter(
    func: Callable[..., Any],
    signature: inspect.Signature,
    name: str,
    settings: Settings,
    labels: Optional[Mapping[str, str]],
) -> Callable[..., Any]:
    count = len(signature.parameters)

    def run(*args: Any, **kwargs: Any) -> Any:
        secret = kwargs.pop(SECRET_PARAMETER, None)
        if secret is None and len(args) > count:
            args, secret = args[:count], args[count]
        result = func(*args, **kwargs)
        settle(name, secret if secret is not None else settings.secret_name, settings, labels)
        return result

    extra = inspect.Parameter(
        SECRET_PARAMETER, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=settings.secret_name, annotation=str
    )
    _copy_identity(
        func, run, signature.replace(parameters=[*signature.parameters.values(), extra]), _doc_with_secret(func.__doc__)
    )
    return run


def _doc_with_secret(doc: Optional[str]) -> str:
    """The docstring with an ``Args:`` line for ``secret_name`` (KFP takes the UI's descriptions from it)."""
    line = (
        f"{SECRET_PARAMETER}: the Kubernetes Secret whose keys {', '.join(SECRET_KEYS)} become those environment "
        "variables of the steps that may download weights (optional: a missing Secret leaves them unset); "
        "docs/kubernetes.md."
    )
    text = (doc or "").rstrip()
    lines = text.splitlines()
    if "Args:" not in [ln.strip() for ln in lines]:
        return f"{text}\n\nArgs:\n    {line}\n"
    start = [ln.strip() for ln in lines].index("Args:")
    head_indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= head_indent
        ),
        len(lines),
    )
    following = [ln for ln in lines[start + 1 : end] if ln.strip()]
    indent = following[0][: len(following[0]) - len(following[0].lstrip())] if following else " " * (head_indent + 4)
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return "\n".join([*lines[:end], f"{indent}{line}", *lines[end:]]) + "\n"


def _copy_identity(func: Callable[..., Any], run: Callable[..., Any], signature: inspect.Signature, doc: Any) -> None:
    run.__signature__ = signature  # type: ignore[attr-defined]
    run.__doc__ = doc
    run.__name__ = func.__name__
    run.__qualname__ = func.__qualname__
    run.__module__ = func.__module__

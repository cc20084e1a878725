"""``make retrain``: the retrain pipeline under kfp.local against the local stages, then its decision.

``python -m pipelines.tools.run_retrain [--data photos/] [--model classifier] [--budget 10m]
[--drift drift.json] [--stages local_outputs/stages] [--config retrain.yaml] [--set 'name=value ...']
[--pipeline-root local_outputs]``. Without ``--data`` the source is the one the served model was
trained on, so right after ``make run`` it is the no-op: the decision's reason, $0.00 of
accelerator time. ``--config`` and ``--set`` set any parameter of the pipeline's run form, as for
``make run`` (``pipelines/tools/params.py``); a local ``--data`` or ``--drift`` that is not there is
one ``error:`` line, exit 2, before anything runs. The console is ``make run``'s
(``pipelines/tools/runner.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from components.promote.component import promote_model
from components.retrain.component import decide_retrain
from components.retrain.run import RETRAIN
from pipelines import retrain
from pipelines.tools import params, runner
from pipelines.tools.params import Layer, RunParameters
from pipelines.tools.runner import Finished, Summary, Tool


def retrain_parameters(args: argparse.Namespace) -> RunParameters:
    """The run's parameters: the form's defaults, ``CONFIG``, the flags, ``SET``.

    Raises:
        ParameterError: an unknown name, a wrong type, a value the step refuses (one line each).
    """
    layers = []
    if args.config:
        layers.append(params.read_config(args.config))
    # Locally the train step runs on this machine's CPU: no accelerator to ask for.
    flags: dict[str, Any] = {"stages_root": str(args.stages), "accelerator_type": "", "accelerator_count": 0}
    for name, value in (("source", args.data), ("served_model_name", args.model), ("retrain_budget", args.budget),
                        ("drift", args.drift)):  # fmt: skip
        if value is not None:
            flags[name] = value
    layers.append(Layer("flags", flags))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = params.resolve(params.run_form(retrain.pipeline), layers, retrain.NAME)
    params.check_steps(retrain.pipeline, resolved.values)
    return resolved


def check_local_paths(args: argparse.Namespace, resolved: RunParameters) -> Optional[int]:
    """A local ``source`` or ``drift`` that is not on this machine: one line, before anything runs.

    Raises:
        ParameterError: the path is missing (``DATA /nonexistent: no such file or folder ...``).
    """
    runner.check_local_paths(resolved, (("source", "DATA"), ("drift", "DRIFT")), _builtin)
    return None


def _builtin(name: str, value: str) -> bool:
    """A built-in source's name (``fashion-mnist``): no path to look for."""
    if name != "source":
        return False
    from components.image_input.sources import is_builtin

    return is_builtin(value)


def _outputs(folder: Path, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A finished task's (parameters, artifacts' URIs) from its executor output."""
    from pipelines.tools.console import executor_output

    out = executor_output(folder, task)
    uris = {name: (a.get("artifacts") or [{}])[0].get("uri", "") for name, a in out.get("artifacts", {}).items()}
    return out.get("parameterValues") or {}, uris


def _conversion(folder: Path, record: dict[str, Any]) -> list[str]:
    """What the conversion converted: a delta or the whole source, and the records it wrote and reused."""
    from components.convert.component import convert_to_tfrecords
    from pipelines.tools.console import executor_output

    lines = [f"conversion: {record['conversion']}"] if record.get("conversion") else []
    metrics = (executor_output(folder, convert_to_tfrecords.name).get("artifacts") or {}).get("metrics") or {}
    logged = ((metrics.get("artifacts") or [{}])[0]).get("metadata") or {}
    if "records_written" in logged:
        written, reused = int(logged["records_written"]), int(logged.get("records_reused", 0))
        lines.append(f"converted: {written:,} records read and written, {reused:,} reused from the parent (not read)")
    return lines


def last_lines(done: Finished) -> Summary:
    """The decision and its reason, and what became of demo when it retrained."""
    decided, uris = _outputs(done.folder, decide_retrain.name)
    action = decided.get("Output")
    if not action:
        return Summary([] if done.failure else ["error: the decide step left no decision (see the logs)"], ok=False)
    decision_file = Path(uris.get("decision", "").removeprefix("file://")) / "decision.json"
    record = json.loads(decision_file.read_text()) if decision_file.is_file() else {}
    lines = [f"decision: {record.get('reason') or action}"]
    if record:
        lines.append(f"decision record: {decision_file}")
    if action != RETRAIN:
        lines.append("accelerator time: $0.00 (no step asked for one); nothing trained, nothing promoted")
        return Summary(lines, ok=done.ok)
    if record.get("warm"):
        lines.append(f"training: {record['warm']}")
    lines.extend(_conversion(done.folder, record))
    promoted, _ = _outputs(done.folder, promote_model.name)
    if "Output" in promoted:
        version = promoted["Output"]
        lines.append(f"demo now serves version {version} (staging, prod unchanged: the promote pipeline moves it on)")
    elif done.ok:
        lines.append("not blessed against prod: demo unchanged (see the evaluation's reasons)")
    return Summary(lines, ok=done.ok)


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="the source to retrain from (default: the one the served model was trained on)")
    parser.add_argument("--model", help="the served model name (default classifier)")
    parser.add_argument("--budget", help="the train step's budget: a time (10m) or dollars ($2.50); default 10m")
    parser.add_argument("--drift", help="a drift.json or its folder (default: the stage's own)")
    parser.add_argument("--stages", type=Path, default=Path("local_outputs/stages"), help="the stage store")


TOOL = Tool(
    retrain, __doc__, retrain_parameters, last_lines, flags=_flags, before=check_local_paths, figures=lambda step: True
)
main = TOOL.main


if __name__ == "__main__":
    sys.exit(main())

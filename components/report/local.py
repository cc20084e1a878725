"""The run report of a local run: the inputs read from a kfp.local run folder.

kfp.local gives every task a folder ``<run folder>/<task name>/`` with its output artifacts and
its ``executor_output.json`` (the artifacts' metadata and the output parameters). The report
step on a cluster receives the same records as input artifacts; here they are found by task name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from components.report.run import Failure, ReportInputs, StepRecord, read_json
from components.surface import recorded_by

# The local runner's record of the run's parameters, in the run folder (make run writes it).
PARAMETERS_FILE = "parameters.json"


def executor_outputs(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Task name -> its ``executor_output.json`` (only tasks that finished have one)."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(run_dir.glob("*/executor_output.json"))}


def _task(outputs: dict[str, dict[str, Any]], prefixes: Sequence[str]) -> Optional[str]:
    for prefix in prefixes:
        names = sorted(n for n in outputs if n == prefix or n.startswith(prefix + "-"))
        if names:
            return names[0]
    return None


def artifact(output: Optional[dict[str, Any]], name: str) -> Optional[dict[str, Any]]:
    """The first artifact ``name`` of an executor output (``uri``, ``metadata``), or None."""
    items = ((output or {}).get("artifacts", {}).get(name) or {}).get("artifacts") or []
    return items[0] if items else None


def inputs_from_run_dir(
    run_dir: Path,
    stages_root: Optional[str],
    steps: Optional[Sequence[StepRecord]] = None,
    failure: Optional[Failure] = None,
    title: str = "Run report",
) -> ReportInputs:
    """The report's inputs from a kfp.local run folder; what a step did not write stays None.

    The run's parameters come from ``parameters.json`` in the run folder, where the local runner
    recorded them (``pipelines.tools.params.RunParameters.to_dict``).

    Args:
        run_dir: the run folder (``local_outputs/end-to-end-<time>``).
        stages_root: the stage store the run promoted into.
        steps: the steps as the console saw them (status, seconds, headline, log).
        failure: why the run stopped, if it did.
        title: the page's title.
    """
    outputs = executor_outputs(run_dir)

    def of(prefixes: Sequence[str]) -> Optional[dict[str, Any]]:
        name = _task(outputs, prefixes)
        return None if name is None else outputs[name]

    def uri(output: Optional[dict[str, Any]], name: str) -> Optional[str]:
        found = artifact(output, name)
        return None if found is None else found.get("uri")

    def metadata(output: Optional[dict[str, Any]], name: str) -> Optional[dict[str, Any]]:
        found = artifact(output, name)
        return None if found is None else dict(found.get("metadata") or {})

    # The first task of the components a step declares for a record holds it (kfp.local numbers
    # repeats: promote-model, promote-model-2, ...).
    convert, train, evaluate, bench = (of(recorded_by(r)) for r in ("convert", "train", "evaluate", "benchmark"))
    bench_row = ((bench or {}).get("parameterValues") or {}).get("Output")
    validation = ((of(recorded_by("validate")) or {}).get("parameterValues") or {}).get("Output")
    parameters = read_json(str(run_dir / PARAMETERS_FILE))
    return ReportInputs(
        title=title,
        run=run_dir.name,
        dataset_dir=uri(convert, "dataset"),
        model_dir=uri(train, "model"),
        evaluation=metadata(evaluate, "metrics"),
        confusion=metadata(evaluate, "confusion"),
        blessing=read_json(uri(evaluate, "blessing")),
        samples=read_json(uri(evaluate, "samples")),
        benchmark=bench_row if isinstance(bench_row, dict) else None,
        validation=validation if isinstance(validation, dict) else None,
        stages_root=stages_root,
        steps=steps,
        failure=failure,
        parameters=None if parameters is None else list(parameters.get("changed") or []),
    )

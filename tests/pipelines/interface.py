"""The interface of a compiled pipeline: what a user's runs and the Kubeflow UI depend on.

Parameters (names, types, defaults; not their descriptions), components' inputs and outputs, tasks and their DAG edges,
caching, retries, loops and conditions, resources and Kubernetes settings: everything in the YAML
except the shipped source code and the image, which change with every refactoring and release.
``python -m tests.pipelines.interface`` rewrites the golden files after a deliberate change.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import yaml

GOLDEN = Path(__file__).parent / "golden"
TASK_KEYS = (
    "componentRef",
    "dependentTasks",
    "cachingOptions",
    "retryPolicy",
    "triggerPolicy",
    "iteratorPolicy",
    "parameterIterator",
    "artifactIterator",
    "inputs",
)


def _without_descriptions(data):
    """The data without ``description`` entries: prose from docstrings, not interface."""
    if isinstance(data, dict):
        return {k: _without_descriptions(v) for k, v in data.items() if k != "description"}
    if isinstance(data, list):
        return [_without_descriptions(v) for v in data]
    return data


def _task(task: dict) -> dict:
    picked = {key: task[key] for key in TASK_KEYS if key in task}
    if "dependentTasks" in picked:
        picked["dependentTasks"] = sorted(picked["dependentTasks"])
    picked["taskInfo"] = task.get("taskInfo", {})
    return picked


def _dag(dag: dict) -> dict:
    return {
        "tasks": {name: _task(task) for name, task in sorted(dag.get("tasks", {}).items())},
        "outputs": dag.get("outputs", {}),
    }


def interface(documents: list[dict]) -> dict:
    """The interface of a compiled pipeline (its YAML documents) as plain, comparable data."""
    spec = documents[0]
    components = {}
    for name, component in sorted(spec["components"].items()):
        entry = {
            "inputDefinitions": component.get("inputDefinitions", {}),
            "outputDefinitions": component.get("outputDefinitions", {}),
            "executorLabel": component.get("executorLabel"),
        }
        if "dag" in component:
            entry["dag"] = _dag(component["dag"])
        components[name] = entry
    executors = {
        name: {"resources": executor.get("container", {}).get("resources", {})}
        for name, executor in sorted(spec["deploymentSpec"]["executors"].items())
    }
    return _without_descriptions(
        {
            "pipelineInfo": spec["pipelineInfo"],
            "root": {"inputDefinitions": spec["root"].get("inputDefinitions", {}), "dag": _dag(spec["root"]["dag"])},
            "components": components,
            "executors": executors,
            "platforms": documents[1] if len(documents) > 1 else {},
        }
    )


def compiled_interfaces(output_dir: str) -> dict[str, dict]:
    """Compiles every pipeline into ``output_dir``; returns name -> interface."""
    from pipelines.tools import compile as compile_module

    paths = compile_module.compile_all(Path(output_dir))
    return {Path(path).stem: interface(list(yaml.safe_load_all(Path(path).read_text()))) for path in paths}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in compiled_interfaces(tmp).items():
            (GOLDEN / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            print(f"wrote {GOLDEN / name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

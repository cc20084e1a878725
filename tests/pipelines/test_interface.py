"""The compiled pipelines keep their interface: parameters, types, defaults, tasks, DAG edges,
resources, caching and Kubernetes settings, compared with the golden files in ``golden/``.

A deliberate change to a pipeline's interface rewrites them: ``python -m tests.pipelines.interface``.
"""

from __future__ import annotations

import json

import pytest

from tests.pipelines.interface import GOLDEN, compiled_interfaces


@pytest.fixture(scope="module")
def interfaces(tmp_path_factory):
    return compiled_interfaces(str(tmp_path_factory.mktemp("compiled")))


def test_every_pipeline_has_a_golden_interface(interfaces):
    assert sorted(interfaces) == sorted(p.stem for p in GOLDEN.glob("*.json"))


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_interface_is_unchanged(interfaces, name):
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    current = json.loads(json.dumps(interfaces[name], sort_keys=True))
    for section in golden:
        assert current[section] == golden[section], f"{name}: {section} differs from tests/pipelines/golden/{name}.json"
    assert sorted(current) == sorted(golden)


def test_the_comparison_sees_a_changed_default(interfaces):
    changed = json.loads(json.dumps(interfaces["end_to_end"]))
    params = changed["root"]["inputDefinitions"]["parameters"]
    name = next(iter(params))
    params[name]["defaultValue"] = "something else"
    golden = json.loads((GOLDEN / "end_to_end.json").read_text())
    assert changed["root"] != golden["root"]

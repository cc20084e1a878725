"""The one registry helper (trainer/registry.py) and a contract test per seam over every registered entry.

Tasks and serving targets have their own contract tests (test_task_registry.py, test_target_seam.py);
this file holds the helper's behaviour and the contracts of the source kinds, the launchers and
the evaluation renderers.
"""

import pytest

from components import launchers
from components.evaluate import renderers
from components.image_input import sources
from components.image_input.sources import SourceKind
from components.launchers import Launcher, LaunchError
from trainer.extensions import EXTENSIONS_ENV
from trainer.registry import Registry
from trainer.tasks import task_names


class Oops(LookupError):
    pass


def test_a_registry_loads_its_built_ins_on_the_first_look_up_and_lists_the_known_names(monkeypatch):
    monkeypatch.delenv(EXTENSIONS_ENV, raising=False)
    registry = Registry("widget", ("json",), error=Oops)
    registry.register("b", 2)
    registry.register("a", 1)
    assert registry.names() == ["b", "a"] and registry.get("a") == 1 and "b" in registry
    with pytest.raises(Oops, match="unknown widget 'c'; expected one of a, b$"):
        registry.get("c")
    ordered = Registry("widget", error=Oops, ordered=True)
    ordered.register("b", 2)
    ordered.register("a", 1)
    with pytest.raises(Oops, match="expected one of b, a$"):
        ordered.get("c")


def test_a_name_is_taken_once_unless_the_registry_replaces():
    registry = Registry("widget", error=Oops)
    first = object()
    registry.register("w", first)
    registry.register("w", first)  # the same entry again: a module imported twice
    with pytest.raises(Oops, match="widget 'w' is registered twice"):
        registry.register("w", object())
    replacing = Registry("widget", replace=True)
    replacing.register("w", 1)
    replacing.register("w", 2)
    assert replacing.get("w") == 2


def test_a_bad_extension_module_is_named_in_the_registry_s_own_error(monkeypatch):
    monkeypatch.setenv(EXTENSIONS_ENV, "tests.no_such_extension_module")
    with pytest.raises(Oops, match="LTP_EXTENSIONS: cannot import extension module 'tests.no_such_extension_module'"):
        Registry("widget", error=Oops).names()


@pytest.mark.parametrize("kind", sources.kind_names())
def test_every_source_kind_keeps_the_contract(kind):
    source_kind = sources.kind(kind)
    assert isinstance(source_kind, SourceKind) and source_kind.name == kind
    assert source_kind.description, f"{kind}: the command line's help and the error messages show it"
    if source_kind.builtin:
        assert sources.is_builtin(kind.split(":")[0]) or any(sources.is_builtin(d) for d in [kind, f"{kind}:8"])
    assert sources.kind_names().count(kind) == 1


@pytest.mark.parametrize("name", launchers.launcher_names())
def test_every_launcher_builds_a_launcher(name):
    launcher = launchers.get_launcher(name)
    assert isinstance(launcher, Launcher)
    assert not getattr(type(launcher).run, "__isabstractmethod__", False)


def test_an_unknown_launcher_lists_the_known_ones():
    with pytest.raises(LaunchError, match="unknown launcher 'slurm'; expected one of auto, job, jobset, local"):
        launchers.get_launcher("slurm")


@pytest.mark.parametrize("task", task_names())
def test_every_task_s_renderers_render_every_output(task):
    entry = renderers.renderers_of(task)
    assert callable(entry.report) and callable(entry.page), f"{task}: renderers without a report or a page"
    assert all(part is None or callable(part) for part in (entry.sample, entry.sections))

"""``LTP_EXTENSIONS``: the modules both registries (tasks, source kinds) import when first looked up."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.image_input import sources
from components.image_input.sources import SourceError, SourceKind, register_kind
from trainer.extensions import EXTENSIONS_ENV, extension_modules

ROOT = Path(__file__).resolve().parents[3]


def test_the_variable_lists_module_names(monkeypatch):
    monkeypatch.setenv(EXTENSIONS_ENV, " tests.a, ,tests.b ")
    assert extension_modules() == ["tests.a", "tests.b"]
    monkeypatch.delenv(EXTENSIONS_ENV)
    assert extension_modules() == []


def test_a_bad_extension_module_is_named_by_the_source_registry(monkeypatch):
    monkeypatch.setenv(EXTENSIONS_ENV, "tests.no_such_extension")
    with pytest.raises(SourceError, match="LTP_EXTENSIONS: cannot import extension module 'tests.no_such_extension'"):
        sources.detect("digits")


def test_a_kind_cannot_take_a_registered_name():
    class Another(SourceKind):
        name = "npz"
        matches = open = prediction_listing = None  # never asked: the name is refused first

    taken = "source format 'npz' is registered twice: components.image_input.sources.npz"
    with pytest.raises(SourceError, match=taken):
        register_kind(Another())
    assert [k.name for k in sources.kinds()].count("npz") == 1 and type(sources.kind("npz")).__name__ == "NpzKind"


def test_an_extension_module_adds_a_task_and_a_source_kind_whose_datasets_name_it():
    # In a fresh process: the toy task's registrations stay out of this one's registries.
    code = (
        "from components.image_input import sources\n"
        "from trainer.tasks import task_names\n"
        "src = sources.open_source('brightness:12')\n"
        "print(sources.detect('brightness:12'), src.task, len(src.items), src.classes, 'brightness' in task_names())\n"
        "print('brightness' in sources.kind_names(), 'brightness:<count>' in sources.expected())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), EXTENSIONS_ENV: "tests.toy_task"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["brightness brightness 12 ['dark', 'bright'] True", "True True"]
    # Without the variable the name is not a source
    env.pop(EXTENSIONS_ENV)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "source not found: brightness:12" in done.stderr

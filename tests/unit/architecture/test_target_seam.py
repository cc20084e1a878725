"""The serving-target seam: every registered target keeps the contract, and a target from outside the
package (``tests/toy_target.py``, registered through ``LTP_EXTENSIONS``) is promoted to, canaried,
rolled back after a failed check and rolled back by hand through the promote step's components,
with its own setting (``serving_options.region``) and nothing outside ``tests/`` changed.

No TensorFlow, no model server, no cluster: the SavedModels are files, the serving checks stand-ins
(the seam is what is tested here; the checks are tested against real servers elsewhere).
"""

import dataclasses
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from components.run_config import read_run_yaml
from components.serving.config import LOAD_TESTS, STAGES, PromoteConfig
from components.serving.stages import StageRegistry
from components.serving.targets import ServingTarget, TargetError, TargetSettings, get_target, target_class
from components.serving.targets import target_names as registered_names
from trainer.config import ConfigError
from trainer.configbase import ConfigBase
from trainer.extensions import EXTENSIONS_ENV

ROOT = Path(__file__).resolve().parents[3]
UNKNOWN_KEY = "no_such_option"


def _option_problems(cls: type[ServingTarget]) -> list[str]:
    """What a target's typed options break of the contract (empty: none)."""
    options = cls.options_type
    if not (isinstance(options, type) and issubclass(options, ConfigBase) and dataclasses.is_dataclass(options)):
        return [f"{cls.__name__}.options_type is {options!r}, expected a ConfigBase dataclass"]
    problems = []
    if options._section != "serving_options.":
        problems.append(f"{options.__name__}._section is {options._section!r}, expected 'serving_options.'")
    names = [f.name for f in dataclasses.fields(options)]
    undocumented = sorted(set(names) - set(options.field_docs()))
    if undocumented:
        problems.append(f"{options.__name__} does not document {undocumented} under Attributes:")
    defaults = cls.parse_options({})
    if options.from_dict(defaults.to_dict()) != defaults:
        problems.append(f"{options.__name__}'s defaults do not survive to_dict/from_dict")
    try:
        cls.parse_options({UNKNOWN_KEY: 1})
        problems.append(f"{cls.__name__} took the unknown option {UNKNOWN_KEY!r}")
    except TargetError as err:
        if f"serving_options.{UNKNOWN_KEY}" not in str(err) or not all(n in str(err) for n in names):
            problems.append(f"{cls.__name__}'s unknown-option message names neither the key nor the known ones: {err}")
    hints = typing.get_type_hints(options)
    for name in (n for n in names if hints[n] is not typing.Any):
        try:
            cls.parse_options({name: object()})
            problems.append(f"{cls.__name__} took an object() for its option {name!r}")
        except TargetError:
            pass
    return problems


def contract_problems(cls: type[ServingTarget], stages_root: str) -> list[str]:
    """What a target class breaks of the seam's contract (empty: none).

    It has a name the registry knows it by, a load profile every stage has a default load test
    for, typed options (strict, documented, naming the known keys when refusing one) and the one
    way to be built (a stage registry, its options, the generic settings); a target with canary
    steps can serve a canary.
    """
    problems = []
    try:
        registered = target_class(cls.name) is cls
    except TargetError:
        registered = False
    if not registered:
        problems.append(f"{cls.__name__} is not registered under its name {cls.name!r}")
    missing = [s for s in STAGES if (getattr(cls, "load_profile", None), s) not in LOAD_TESTS]
    if missing:
        problems.append(
            f"{cls.__name__}.load_profile {getattr(cls, 'load_profile', None)!r} has no load test for {missing}"
        )
    problems += _option_problems(cls)
    if problems:
        return problems
    stages = StageRegistry(stages_root)
    target = cls(stages, {}, TargetSettings(canary_steps=(50, 100)))
    if target.stages is not stages or not isinstance(target.options, cls.options_type):
        problems.append(f"{cls.__name__} does not keep the registry and its typed options it was built with")
    steps = target.canary_steps()
    if steps and (steps[-1] != 100 or cls.serve_canary is ServingTarget.serve_canary):
        problems.append(f"{cls.__name__} has canary steps {steps} but cannot serve a canary to 100%")
    if not cls(stages).checks_timeout_s(300.0) > 0:
        problems.append(f"{cls.__name__}.checks_timeout_s is not positive")
    return problems


@pytest.mark.parametrize("name", registered_names())
def test_every_registered_target_keeps_the_contract(name, tmp_path):
    assert contract_problems(target_class(name), str(tmp_path)) == []


def test_the_contract_check_can_fail(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class LooseOptions(ConfigBase):
        """No Attributes: section, and the section of another field."""

        zone: str = "a"

    class Unregistered(ServingTarget):
        name = "unregistered"
        load_profile = "gpu"
        options_type = LooseOptions

        def check(self):
            pass

        def serve(self, stage, models, changed, timeout_s):
            pass

        def restore(self, stage, models, changed, timeout_s):
            pass

        def endpoints(self, stage, models):
            pass

    problems = contract_problems(Unregistered, str(tmp_path))
    assert any("is not registered" in p for p in problems), problems
    assert any("no load test for ['demo', 'staging', 'prod']" in p for p in problems), problems
    assert any("_section is ''" in p for p in problems) and any("does not document ['zone']" in p for p in problems)


def test_an_unknown_target_is_refused_naming_the_known_ones(tmp_path):
    # Without LTP_EXTENSIONS the toy target is not there (it is registered in a fresh process below).
    with pytest.raises(TargetError, match=r"unknown serving target 'toy'; expected one of .*kserve.*local"):
        get_target("toy", StageRegistry(str(tmp_path)))


def test_targets_parse_their_own_options_strictly(tmp_path):
    stages = StageRegistry("gs://bucket/stages")
    kserve = get_target("kserve", stages, {"mode": "standard"}, TargetSettings(canary_steps=(25, 100)))
    assert (kserve.options.mode, kserve.canary_steps()) == ("standard", ())  # Standard mode: no split
    assert get_target("kserve", stages, {}, TargetSettings(canary_steps=(25, 100))).canary_steps() == (25, 100)
    assert get_target("kserve", stages).canary_steps() == (10, 50, 100)
    with pytest.raises(
        TargetError, match=r"'kserve': serving_options.modee: unknown key in KServeOptions; known keys:"
    ):
        get_target("kserve", stages, {"modee": "standard"})
    with pytest.raises(TargetError, match=r"serving_options.mode: expected one of \['knative', 'standard'\]"):
        get_target("kserve", stages, {"mode": "serverless"})
    with pytest.raises(TargetError, match=r"'local': serving_options.port: must be in 0..65535"):
        get_target("local", StageRegistry(str(tmp_path)), {"port": 70000})
    with pytest.raises(TargetError, match=r"canary_steps must be increasing .* got \(50, 10\)"):
        TargetSettings(canary_steps=(50, 10))


def test_a_step_builds_its_target_from_its_config_and_refuses_one_built_for_another_root(tmp_path):
    from components.promote.verify import target_of

    config = PromoteConfig(target="local", stages_root=str(tmp_path), serving_options={"port": 8600})
    target = target_of(config, None)
    assert (target.name, target.options.port, target.stages.root) == ("local", 8600, str(tmp_path))
    elsewhere = get_target("local", StageRegistry(str(tmp_path / "other")))
    with pytest.raises(TargetError, match=r"built for the stage registry under '.*other', but the step's stages_root"):
        target_of(config, elsewhere)


def test_the_old_kserve_mode_gets_one_line_naming_its_new_key():
    from pipelines import promote
    from pipelines.tools import params

    form = params.run_form(promote.pipeline)
    with pytest.raises(params.ParameterError) as err:
        params.resolve(form, [params.parse_set("kserve_mode=standard")], promote.NAME)
    assert err.value.problems == [
        "kserve_mode (SET): renamed; set serving_options.mode instead (a dotted name sets one key of a mapping)"
    ]
    values = params.resolve(form, [params.parse_set("serving_options.mode=standard")], promote.NAME).values
    assert values["serving_options"] == {"mode": "standard"}
    # A step's own config file (python -m components.promote --config, a whole run's YAML) says it too.
    with pytest.raises(
        ConfigError, match=r"^promote\.kserve_mode: renamed; set promote\.serving_options\.mode instead$"
    ):
        read_run_yaml("promote:\n  kserve_mode: standard\n")


# ---- a target from outside the package, promoted to and rolled back in a fresh process


def _passing(name):
    from components.serving.checks import CheckResult

    return CheckResult(name, True, "ok", {})


def _demo_serves(stages, content):
    """Demo serves a new file-only version of ``classifier`` that passed its checks."""
    from components.serving.stages import StageEntry

    source = Path(stages.root).parent / f"model-{content}"
    source.mkdir()
    (source / "saved_model.pb").write_text(content)
    version = stages.publish(str(source), "demo", "classifier")
    entry = StageEntry("promote", version, str(source), "run", model_name="classifier", checks=(_passing("health"),))
    stages.record("demo", entry)


def _stand_in_checks(seen, fail_canary):
    """The serving checks' stand-ins: they record each URL, and fail at a canary URL while ``fail_canary[0]``."""
    from components.serving.checks import ChecksReport, ServingChecksError

    def run_checks(url, model_name, examples, min_accuracy, expected_version=None, **kwargs):
        seen.append(url)
        passed = not (fail_canary[0] and "//canary-" in url)
        report = ChecksReport((dataclasses.replace(_passing("prediction"), passed=passed),), expected_version, 1.0)
        if not passed:
            raise ServingChecksError("prediction: wrong answers", report)
        return report

    return run_checks, lambda url, *args: (seen.append(url), _passing("load"))[1]


def drive_toy_target(stages_root: str) -> None:
    """Promotes three versions from demo to staging and rolls back by hand through the ``toy`` target,
    by the promote step's components (as KFP calls them); prints what it saw as JSON.

    Run in a process whose ``LTP_EXTENSIONS`` names ``tests.toy_target``.
    """
    from kfp import dsl

    from components.promote import result, verify
    from components.promote.component import promote_version, rollback_stage
    from components.serving.checks import KnownExample
    from components.serving.stages import StageExamples
    from components.serving.targets import target_names

    stages = StageRegistry(stages_root)
    stages.save_examples("demo", "classifier", StageExamples("classification", (KnownExample(b"png", 1),)))
    seen, fail_canary = [], [False]
    verify.run_checks, verify.check_load = _stand_in_checks(seen, fail_canary)
    common = dict(stage="staging", stages_root=stages_root, target="toy", model_name="classifier")
    options = {"region": "mars"}
    reports, errors = [], []
    for content in ("one", "two", "three"):
        _demo_serves(stages, content)
        fail_canary[0] = content == "three"
        report = dsl.Markdown(uri=f"{stages_root}-{content}.md")
        try:
            promote_version.python_func(
                report=report, source_stage="demo", run_id=f"run-{content}", serving_options=options,
                canary_steps=[50, 100], **common,
            )  # fmt: skip
            reports.append(report.metadata)
        except result.PromotionError as err:
            errors.append(str(err))
    back = dsl.Markdown(uri=f"{stages_root}-back.md")
    version = rollback_stage.python_func(report=back, run_id="run-back", serving_options=options, **common)
    problems = {name: contract_problems(target_class(name), stages_root) for name in target_names()}
    print(json.dumps({"seen": seen, "reports": reports, "errors": errors, "version": version, "problems": problems}))


def test_a_target_from_an_extension_module_is_promoted_to_and_rolled_back(tmp_path):
    from tests.toy_target import read_log

    root = str(tmp_path / "stages")
    code = f"from tests.unit.architecture.test_target_seam import drive_toy_target; drive_toy_target({root!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT), EXTENSIONS_ENV: "tests.toy_target"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["problems"] == {"kserve": [], "kubernetes": [], "local": [], "toy": []}

    # The target was asked for each action with the stage's models, its own setting in force.
    log = [(e["action"], e["models"], e["percent"]) for e in read_log(root, "staging")]
    assert log == [
        ("serve", {"classifier": 1}, None),  # the first version: no canary
        ("canary", {"classifier": 2}, 50),
        ("canary", {"classifier": 2}, 100),
        ("canary", {"classifier": 3}, 50),  # its checks fail: back to version 2
        ("restore", {"classifier": 2}, None),
        ("restore", {"classifier": 1}, None),  # the rollback by hand
    ]
    assert {e["region"] for e in read_log(root, "staging")} == {"mars"}
    shared, canary = "http://classifier.staging.mars.toy", "http://canary-classifier.staging.mars.toy"
    assert out["seen"] == [shared, canary, shared, shared, canary, shared, shared]
    assert [r["version"] for r in out["reports"]] == [1, 2]
    assert len(out["errors"]) == 1 and "canary at 50% failed" in out["errors"][0] and out["version"] == 1

    # Every record names the target and the model's task.
    history = StageRegistry(root).read_history("staging", "classifier")
    assert [(e.action, e.version, e.target, e.task) for e in history] == [
        ("promote", 1, "toy", "classification"),
        ("promote", 2, "toy", "classification"),
        ("rollback", 2, "toy", "classification"),
        ("rollback", 1, "toy", "classification"),
    ]
    assert {c.name: c.detail for c in history[1].checks}["canary"] == "passed at 50%, 100%"

"""The one skeleton of the local runners: a pipeline under kfp.local behind the quiet console.

Every ``make`` target that runs a pipeline on this machine goes through this module; nothing else
in ``pipelines/tools/`` calls kfp.local or builds the console (``tests/unit/architecture/test_local_runners.py``):

- :func:`execute` runs a pipeline once (kfp.local in this Python, each step's output in the
  quiet console and in its own log under ``<run folder>/logs/``), then prints, when a step
  failed, the **first** failed step's own error, each later failure as a consequence of it, and
  that step's log tail (``console.QuietConsole.failure``), then the caller's closing lines.
  ``make run`` (``run_local.py``) calls it with its run report as the closing lines.
- :class:`Tool` is a whole command line on top of it (``make sweep``, ``make search``,
  ``make predict``): the flags every runner has (``--config``, ``--set``, ``--pipeline-root``,
  ``--verbose``) and the tool's own, the run form resolved (a wrong value is one ``error:`` line
  each, exit 2, before anything runs), an optional check before the run (a missing ``DATA``, a
  dry run), the run, and the tool's own last lines, then the logs' folder and the wall time.

A new runner is one module (its flags, its parameters' layers, its last lines, and
``main = Tool(...).main``) and its Makefile target (docs/ARCHITECTURE.md, "Local runners").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional, TextIO

from components.report.run import Failure
from pipelines.tools.params import ParameterError, RunParameters


class RunError(Exception):
    """The local run cannot start or did not finish; the message says why and what to do."""


def latest_run_dir(pipeline_root: Path, pipeline_name: str, started: float) -> Path:
    """The folder kfp.local made for the run that began at ``started``."""
    runs = [p for p in pipeline_root.glob(f"{pipeline_name}-*") if p.is_dir() and p.stat().st_mtime >= started]
    if not runs:
        raise RunError(f"no run folder {pipeline_name}-* under {pipeline_root}")
    return max(runs, key=lambda p: p.stat().st_mtime)


def headline(run_dir: Optional[Path], step: str, task: Optional[str] = None) -> str:
    """A finished step's figure in one line, from its executor output (empty when it has none).

    Args:
        run_dir: the run folder (None while kfp.local has not made it).
        step: the step's task name in the run (``train-model``, ``evaluate-model``, ...).
        task: the run's task; the steps' records name theirs, this is for records that do not.
    """
    from components.surface import StepOutputs, surface_of
    from pipelines.tools.console import executor_output

    surface = surface_of(step)
    if surface is None or surface.headline is None:
        return ""
    out = executor_output(run_dir, step)
    arts = {name: (a.get("artifacts") or [{}])[0].get("metadata", {}) for name, a in out.get("artifacts", {}).items()}
    return surface.headline(StepOutputs(arts, out.get("parameterValues", {}), task))


def check_local_paths(
    resolved: RunParameters, flags: Sequence[tuple[str, str]], exempt: Callable[[str, str], bool] = lambda n, v: False
) -> None:
    """Each of ``flags`` (parameter, flag) naming a local path that is not on this machine: one line
    each, before anything runs; gs:// URIs and the values ``exempt(name, value)`` allows are not looked for.

    Raises:
        ParameterError: a path is missing (``DATA /nonexistent: no such file or folder ...``).
    """
    problems = []
    for name, flag in flags:
        value = str(resolved.values.get(name) or "")
        if value and "://" not in value and not Path(value).exists() and not exempt(name, value):
            origin = resolved.origins.get(name, "default")
            given = flag if origin == "flags" else f"{name} ({origin})"
            problems.append(f"{given} {value}: no such file or folder on this machine")
    if problems:
        raise ParameterError(problems)


def _move_logs(console: Any, staging: Path, folder: Path) -> Path:
    """Moves the logs written while the run folder was unknown into ``<folder>/logs``."""
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    shutil.move(str(staging), logs)
    if not any(staging.parent.iterdir()):
        staging.parent.rmdir()
    console.log_dir = logs
    for step in console.steps:
        step.log_path = logs / step.log_path.name
    return logs


def _run_quietly(
    pipeline: Any, kwargs: dict[str, Any], root: Path, console: Any, verbose: bool, runner: Any = None
) -> Optional[str]:
    """Runs the pipeline under kfp.local with its output going to the console; returns kfp.local's error.

    ``runner``: kfp.local's runner; None for this Python (``SubprocessRunner(use_venv=False)``).
    """
    from kfp import local

    from pipelines.tools.console import strip_ansi

    # TensorFlow's C++ INFO lines (oneDNN, CPU features) say nothing to a person; warnings stay.
    env_before = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    if not verbose and env_before is None:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    runner = runner if runner is not None else local.SubprocessRunner(use_venv=False)
    local.init(runner=runner, pipeline_root=str(root), raise_on_error=True)
    error: Optional[str] = None
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = console
    try:
        pipeline(**kwargs)
    except RuntimeError as err:  # kfp.local: a task finished with status FAILURE
        error = strip_ansi(str(err))
    finally:
        sys.stdout, sys.stderr = saved
        if env_before is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        console.close_pending()
    return error


@dataclasses.dataclass
class Finished:
    """A pipeline run under kfp.local behind the quiet console, over.

    Attributes:
        console: the console (its steps, records and log folder).
        error: kfp.local's error, when a task failed.
        folder: the run folder (kfp.local's, or one made for the logs), with ``logs/`` in it.
        failure: the first failed step and what failed after it (or kfp.local's own failure); None
            when the run succeeded.
        started: when the run started (``time.monotonic``).
        kwargs: the pipeline's arguments.
    """

    console: Any
    error: Optional[str]
    folder: Path
    failure: Optional[Failure]
    started: float
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every step that ran succeeded."""
        return self.failure is None and self.error is None

    @property
    def seconds(self) -> float:
        """The wall time so far."""
        return time.monotonic() - self.started


def run_in_console(
    pipeline: Any,
    name: str,
    kwargs: dict[str, Any],
    root: Path,
    *,
    out: TextIO,
    tty: Optional[bool],
    verbose: bool,
    first_lines: Sequence[str] = (),
    headline: Optional[Callable[[Optional[Path], str], str]] = None,
    runner: Any = None,
) -> Finished:
    """Runs ``pipeline(**kwargs)`` once under kfp.local behind the quiet console; each step's log
    ends in ``<run folder>/logs/``. Prints nothing after the run (:func:`execute` does).

    Args: as :func:`execute`'s.
    """
    from pipelines.tools.console import (
        QuietConsole,
        display_names,
        previous_durations,
        previous_run_dir,
        upstream_steps,
    )

    started_at = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    started = time.time() - 1
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S")
    # kfp.local names the run folder when the run starts and says nowhere which it is: the logs
    # are written here first and moved into the run folder once it can be found.
    staging_logs = root / ".logs" / stamp
    found: list[Path] = []

    def run_dir() -> Optional[Path]:
        if not found:
            try:
                found.append(latest_run_dir(root, name, started))
            except RunError:
                return None
        return found[0]

    figure = headline or (lambda folder, task: "")
    # The previous run's step times: the whole run's time left, once training has an estimate.
    previous = previous_durations(previous_run_dir(root, name))
    console = QuietConsole(
        out, staging_logs, display_names(pipeline), headline=lambda task: figure(run_dir(), task),
        tty=tty, verbose=verbose, previous_seconds=previous, upstream=upstream_steps(pipeline),
    )  # fmt: skip
    for line in first_lines:
        console.say(line)
    error = _run_quietly(pipeline, kwargs, root, console, verbose, runner)
    folder = run_dir() or root / f"{name}-{stamp}-failed"
    _move_logs(console, staging_logs, folder)
    failure = console.failure(error)
    if failure is None and error is not None:  # failed outside any step (kfp.local itself)
        failure = Failure("(kfp.local)", error, "", str(console.log_dir / "pipeline.log"))
    return Finished(console, error, folder, failure, started_at, dict(kwargs))


def execute(
    pipeline: Any,
    name: str,
    kwargs: dict[str, Any],
    root: Path,
    *,
    out: TextIO,
    tty: Optional[bool],
    verbose: bool,
    first_lines: Sequence[str] = (),
    headline: Optional[Callable[[Optional[Path], str], str]] = None,
    runner: Any = None,
    closing: Callable[[Finished], Sequence[str]] = lambda done: (),
) -> Finished:
    """Runs the pipeline once behind the quiet console, says why it failed if it did, then ``closing``.

    Args:
        pipeline: the ``@dsl.pipeline`` function.
        name: its name (kfp.local's run folder is ``<root>/<name>-<time>``).
        kwargs: its arguments.
        root: the pipeline root.
        out: where the console prints.
        tty: draw live bars; None asks ``out``.
        verbose: pass kfp.local's whole output through as well.
        first_lines: printed before the run starts.
        headline: (run folder or None, task) -> a finished step's figure.
        runner: kfp.local's runner (``run_local.kfp_runner``); None for this Python.
        closing: the run, over -> the lines printed last (after the failure, when there is one).
    """
    done = run_in_console(
        pipeline, name, kwargs, root, out=out, tty=tty, verbose=verbose, first_lines=first_lines,
        headline=headline, runner=runner,
    )  # fmt: skip
    if done.failure is not None:
        done.console.print_failure(done.failure)
    for line in closing(done):
        done.console.say(line)
    return done


@dataclasses.dataclass(frozen=True)
class Summary:
    """A tool's last lines, and whether what it looked for was there (False: exit status 1)."""

    lines: Sequence[str] = ()
    ok: bool = True


@dataclasses.dataclass(frozen=True)
class Tool:
    """A local runner's command line: what differs between ``make sweep``, ``search``, ``predict``.

    Attributes:
        pipeline: the pipeline's module (``NAME`` and ``pipeline``).
        doc: the tool's module docstring (``--help`` shows its first line).
        parameters: the parsed flags -> the run's parameters (raises ``ParameterError``).
        last_lines: the run, over -> the tool's own summary lines (its tables, where its results
            are); printed after the failure, before the logs' folder and the wall time.
        flags: adds the tool's own flags to the parser.
        before: the flags and parameters -> an exit status to stop with before anything runs (a
            dry run), or None to run; it may raise ``ParameterError`` (``DATA`` missing).
        build: the parameters -> the pipeline function to run; None: the module's ``pipeline``.
        figures: whether a step's line shows its figure (a loop's iterations share one task
            name, so whose figure it is is unknown); None: no figures.
    """

    pipeline: Any
    doc: str
    parameters: Callable[[argparse.Namespace], RunParameters]
    last_lines: Callable[[Finished], Summary]
    flags: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    before: Optional[Callable[[argparse.Namespace, RunParameters], Optional[int]]] = None
    build: Optional[Callable[[RunParameters], Any]] = None
    figures: Optional[Callable[[str], bool]] = None

    def parser(self) -> argparse.ArgumentParser:
        """The tool's own flags, then the ones every runner has."""
        parser = argparse.ArgumentParser(description=self.doc.splitlines()[0])
        self.flags(parser)
        what = f"the {self.pipeline.NAME} pipeline's run-form parameters"
        parser.add_argument("--config", help=f"a YAML file of {what} (dotted names allowed)")
        parser.add_argument("--set", action="append", metavar="NAME=VALUE ...", help=f"{what} over --config")
        parser.add_argument("--pipeline-root", type=Path, default=Path("local_outputs"))
        parser.add_argument("--verbose", action="store_true", help="also print kfp.local's whole output as it comes")
        return parser

    def main(self, argv: Optional[list[str]] = None) -> int:
        """The command line: 0 when the run succeeded and its results are there, 1 when not, 2 when
        the parameters are wrong (nothing ran).
        """
        args = self.parser().parse_args(argv)
        try:
            resolved = self.parameters(args)
            stop = self.before(args, resolved) if self.before is not None else None
            if stop is not None:
                return stop
            pipeline = self.build(resolved) if self.build is not None else self.pipeline.pipeline
        except ParameterError as err:
            for line in err.problems:
                print(f"error: {line}", file=sys.stderr)
            return 2
        found: list[Summary] = []

        def closing(done: Finished) -> list[str]:
            found.append(self.last_lines(done))
            return [*found[0].lines, f"logs:  {done.console.log_dir}/", f"wall time: {done.seconds:.1f} s"]

        done = execute(
            pipeline, self.pipeline.NAME, resolved.values, args.pipeline_root.resolve(), out=sys.stdout, tty=None,
            verbose=args.verbose, headline=self._headline(), closing=closing,
            first_lines=[f"lean-tpu-pipelines: the {self.pipeline.NAME} pipeline under kfp.local",
                         f"parameters: {resolved.describe()}"],
        )  # fmt: skip
        return 0 if done.ok and found[0].ok else 1

    def _headline(self) -> Optional[Callable[[Optional[Path], str], str]]:
        shown = self.figures
        if shown is None:
            return None
        return lambda run_dir, step: headline(run_dir, step) if shown(step) else ""

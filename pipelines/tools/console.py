"""The quiet console of ``make run``: one line per step, a live bar for long steps, logs in files.

kfp.local writes everything to ``sys.stdout``: its own log records (a ``logging.StreamHandler``
on ``sys.stdout``, made anew for each task by ``kfp.local.logging_utils.local_logger_context``:
"Executing task 'x'", every output artifact, "Task 'x' finished with status SUCCESS") and each
task's subprocess output, which it reads from a pipe line by line and ``print``s, indented.
:class:`QuietConsole` stands in for ``sys.stdout`` (and ``sys.stderr``, where Python warnings go)
while the pipeline runs: it reads those lines, keeps each task's lines in its own log file, and
prints only what a person needs: a line as a step starts and ends (display name, status,
seconds, headline figure), progress, and for a failing step its error, log tail and log path.

Progress comes from the steps' ``@@progress`` lines (:mod:`components.progress`); training
reports no such line yet, so its epochs are counted from Keras' own per-epoch line (``fit``
with ``verbose=2`` prints ``<steps>/<steps> - 4s - ... loss: ...`` once per epoch).
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional, TextIO

from components import progress
from components.report.run import Failure, StepRecord

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXECUTING = re.compile(r" - INFO - Executing task '([^']+)'")
_FINISHED = re.compile(r" - (?:INFO|ERROR) - Task '([^']+)' finished with status (SUCCESS|FAILURE)")
_KERAS_EPOCH = re.compile(r"^(\d+)/\1 - .*\bloss: ")
_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.+)$")
TAIL_LINES = 15
# Non-terminal progress lines: one as each quarter is crossed (a log stays short).
QUARTERS = (25, 50, 75)


def strip_ansi(text: str) -> str:
    """The text without terminal colour codes (kfp.local colours task names and statuses)."""
    return _ANSI.sub("", text)


def display_names(pipeline: Any) -> dict[str, str]:
    """Task name -> display name of every step of a compiled pipeline, in the order they can run.

    Steps inside nested DAGs (``dsl.If`` groups) are included, the groups themselves are not;
    a step comes after every step it depends on (directly or through its group).

    Args:
        pipeline: a ``@dsl.pipeline`` function (its ``pipeline_spec``).
    """
    spec = pipeline.pipeline_spec
    components = dict(spec.components.items())
    found: list[tuple[int, str, str]] = []

    def walk(dag: Any, base: int) -> None:
        depth: dict[str, int] = {}

        def level(task: str) -> int:
            if task not in depth:
                deps = dag.tasks[task].dependent_tasks
                depth[task] = 1 + max((level(d) for d in deps if d in dag.tasks), default=base)
            return depth[task]

        for task, task_spec in dag.tasks.items():
            component = components.get(task_spec.component_ref.name)
            if component is not None and component.WhichOneof("implementation") == "dag":
                walk(component.dag, level(task))
            else:
                found.append((level(task), task, task_spec.task_info.name or task))

    walk(spec.root.dag, 0)
    return {task: name for _, task, name in sorted(found)}


@dataclasses.dataclass
class _Step:
    task: str
    name: str
    started: float
    log_path: Path
    lines: list[str] = dataclasses.field(default_factory=list)
    status: str = "running"
    seconds: Optional[float] = None
    headline: str = ""
    quarter: int = 0
    epochs: int = 0
    bar: str = ""


class QuietConsole(io.TextIOBase):
    """A text stream that turns kfp.local's output into a build tool's console and per-step logs.

    Args:
        out: where the console's own lines go (the real stdout).
        log_dir: where each task's log ``<task>.log`` (and ``pipeline.log``) is written.
        names: task name -> display name (:func:`display_names`).
        headline: task name -> its headline figure once it succeeded ("" for none).
        epochs: task name prefix -> the epochs it trains (the training bar's total).
        tty: draw a live bar (None: ask ``out``).
        verbose: also pass every line through unchanged (``make run VERBOSE=1``).
    """

    def __init__(
        self,
        out: TextIO,
        log_dir: Path,
        names: Mapping[str, str],
        headline: Callable[[str], str] = lambda task: "",
        epochs: Optional[Mapping[str, int]] = None,
        tty: Optional[bool] = None,
        verbose: bool = False,
    ) -> None:
        super().__init__()
        self.out, self.log_dir, self.names, self.headline = out, log_dir, dict(names), headline
        self.epochs = dict(epochs or {})
        self.tty = out.isatty() if tty is None else tty
        self.verbose = verbose
        self.steps: list[_Step] = []
        self.current: Optional[_Step] = None
        # kfp.local lists a task's outputs after it says the task finished: they go to its log too.
        self._ended: Optional[_Step] = None
        self.failed: Optional[_Step] = None
        self._buffer = ""
        self._width = shutil.get_terminal_size(fallback=(100, 24)).columns
        log_dir.mkdir(parents=True, exist_ok=True)
        self._pipeline_log = (log_dir / "pipeline.log").open("a", encoding="utf-8")
        self.printed = 0  # lines the console printed (the line budget's count)

    # ------------------------------------------------------------------ stream interface

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        # The kfp.local child's output is a pipe whatever the terminal; its own code asks stdout.
        return False

    def write(self, text: str) -> int:
        if self.verbose:
            self.out.write(text)
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self._line(line)
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    # ------------------------------------------------------------------ console output

    def say(self, line: str = "") -> None:
        """Prints one line of the console's own (clearing a bar being drawn)."""
        if self.verbose:
            self.out.write(line + "\n")
        else:
            self._clear_bar()
            self.out.write(line + "\n")
        self.printed += 1 + line.count("\n")
        self.out.flush()

    def _clear_bar(self) -> None:
        step = self.current
        if self.tty and step is not None and step.bar:
            self.out.write("\r\x1b[2K")
            step.bar = ""

    def _draw(self, step: _Step, done: int, total: int, unit: str, what: str) -> None:
        pct = 100 * done // max(total, 1)
        if self.verbose:
            return
        if self.tty:
            elapsed = time.monotonic() - step.started
            width = 24
            filled = width * min(done, total) // max(total, 1)
            gauge = "#" * filled + "." * (width - filled)
            bar = f"   {step.name} [{gauge}] {done:,}/{total:,} {unit} {pct}% {elapsed:.0f}s"
            step.bar = bar[: self._width - 1]
            self.out.write("\r\x1b[2K" + step.bar)
            self.out.flush()
            return
        while step.quarter < len(QUARTERS) and pct >= QUARTERS[step.quarter]:
            step.quarter += 1
            if pct < 100:
                self.say(f"   {what}: {done:,}/{total:,} {unit} ({pct}%)")
                break

    # ------------------------------------------------------------------ lines

    def _line(self, raw: str) -> None:
        line = strip_ansi(raw)
        started = _EXECUTING.search(line)
        if started:
            self._start(started.group(1))
            self.current.lines.append(line)
            return
        finished = _FINISHED.search(line)
        step = self.current
        owner = step or self._ended
        if owner is not None and line.strip() and set(line.strip()) == {"-"}:
            self._ended = None  # kfp.local's rule between tasks
        elif owner is not None:
            owner.lines.append(line)
            with owner.log_path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        else:
            self._pipeline_log.write(line + "\n")
            self._pipeline_log.flush()
        if finished and step is not None and finished.group(1) == step.task:
            self._end(step, "succeeded" if finished.group(2) == "SUCCESS" else "failed")
            return
        if step is None:
            return
        text = line.strip()
        fields = progress.parse(text)
        if fields is not None:
            self._draw(step, fields["done"], fields["total"], fields["unit"], fields["step"] or step.name)
            return
        total_epochs = next((n for prefix, n in self.epochs.items() if step.task.startswith(prefix)), None)
        if total_epochs and _KERAS_EPOCH.match(text):
            step.epochs += 1
            self._draw(step, step.epochs, total_epochs, "epochs", "training")

    def _start(self, task: str) -> None:
        if self.current is not None:  # a task that never said it ended (should not happen)
            self._end(self.current, "failed")
        # A task that runs again (a loop's iterations: the sweep's cells) gets a log of its own.
        runs = sum(1 for s in self.steps if s.task == task)
        path = self.log_dir / (f"{task}.log" if not runs else f"{task}-{runs + 1}.log")
        path.write_text("", encoding="utf-8")
        step = _Step(task, self.names.get(task, task), time.monotonic(), path)
        self.steps.append(step)
        self.current = step
        if self.tty and not self.verbose:
            step.bar = f"   {step.name} ..."
            self.out.write(step.bar)
            self.out.flush()
        else:
            self.say(f"-> {step.name}")

    def _end(self, step: _Step, status: str) -> None:
        step.status = status
        step.seconds = time.monotonic() - step.started
        if status == "succeeded":
            try:
                step.headline = self.headline(step.task)
            except (OSError, ValueError, KeyError, TypeError) as err:  # a figure missing is no failure
                step.headline = f"(no figures: {err})"
            mark = "ok"
        else:
            self.failed = step
            mark = "FAILED"
        self.say(f"{mark} {step.name:<22} {step.seconds:6.1f}s  {step.headline}".rstrip())
        self.current = None
        self._ended = step

    # ------------------------------------------------------------------ after the run

    def close_pending(self) -> None:
        """Ends the output: a partial last line is logged, a step still open is marked failed, and
        the steps that never started are listed as not run (kfp.local says nothing of a task whose
        condition was false or whose upstream failed).
        """
        if self._buffer:
            self._line(self._buffer)
            self._buffer = ""
        if self.current is not None:
            self._end(self.current, "failed")
        seen = {s.task for s in self.steps}
        missing = [(task, name) for task, name in self.names.items() if task not in seen]
        for task, name in missing:
            self.steps.append(_Step(task, name, time.monotonic(), self.log_dir / f"{task}.log", status="not run"))
        if missing:
            self.say("-- not run: " + ", ".join(name for _, name in missing))
        self._pipeline_log.close()

    def records(self, relative_to: Optional[Path] = None) -> list[StepRecord]:
        """The steps as the report lists them; log paths relative to ``relative_to`` when given."""
        out = []
        for s in self.steps:
            log = None
            if s.log_path.exists():
                log = str(s.log_path.relative_to(relative_to)) if relative_to else str(s.log_path)
            out.append(StepRecord(s.name, s.task, s.status, s.seconds, s.headline, log))
        return out

    def failure(self, error: Optional[str] = None) -> Optional[Failure]:
        """The failing step: its error (the log's last exception, else ``error``), tail and log path."""
        step = self.failed
        if step is None:
            return None
        lines = [strip_ansi(line).rstrip() for line in step.lines]
        body = [line[4:] if line.startswith("    ") else line for line in lines if line.strip()]
        found = [m for m in (_ERROR.match(line.strip()) for line in body) if m]
        message = f"{found[-1].group(1)}: {found[-1].group(2)}" if found else (error or "the step failed")
        tail = [line for line in body if " - INFO - " not in line and " - ERROR - " not in line][-TAIL_LINES:]
        return Failure(step.name, message, "\n".join(tail), str(step.log_path))

    def print_failure(self, failure: Failure) -> None:
        """The failing step's name, error, log tail and the path of its whole log."""
        self.say(f"error: step '{failure.step}' failed: {failure.error}")
        self.say(f"last lines of its log ({failure.log}):")
        for line in failure.log_tail.splitlines():
            self.say("  | " + line)


def executor_output(run_dir: Optional[Path], task: str) -> dict[str, Any]:
    """A task's ``executor_output.json`` in a kfp.local run folder ({} when there is none)."""
    if run_dir is None:
        return {}
    path = run_dir / task / "executor_output.json"
    return json.loads(path.read_text()) if path.is_file() else {}

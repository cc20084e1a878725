"""The quiet console of ``make run``: one line per step, a live bar for long steps, logs in files.

kfp.local writes everything to ``sys.stdout``: its own log records (a ``logging.StreamHandler``
on ``sys.stdout``, made anew for each task by ``kfp.local.logging_utils.local_logger_context``:
"Executing task 'x'", every output artifact, "Task 'x' finished with status SUCCESS") and each
task's subprocess output, which it reads from a pipe line by line and ``print``s, indented.
:class:`QuietConsole` stands in for ``sys.stdout`` (and ``sys.stderr``, where Python warnings go)
while the pipeline runs: it reads those lines, keeps each task's lines in its own log file, and
prints only what a person needs: a line as a step starts and ends (display name, status,
seconds, headline figure, or a failed step's error), progress, and once the run is over, when a
step failed, the **first** failed step's own error (the last exception line of its log), then each
later failure as what it is (an exit task's failure is a consequence of the first: ``then: Join
the shards failed as a consequence: ...``), and the first one's log tail without its traceback.

Progress comes from the steps' own ``@@progress`` lines (:mod:`components.progress`): the
conversion's images, the training's steps (with images/s, the loss, the validation figure), the
evaluation's images, the benchmark's batches, each with the time the step has left. On a terminal
the running step is a live bar redrawn in place; off one (a log, a pipe) a step gets a plain
progress line at most every :data:`PROGRESS_EVERY_S` seconds, the first as soon as the step knows
its time left. Once the training knows its time left, its lines also say the whole run's: the
training's own plus what the steps not yet started took in the previous run of the pipeline
(:func:`previous_durations`), when the console is given those.
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
_PIPELINE_DONE = re.compile(r" - INFO - Pipeline '[^']+' finished with status SUCCESS")
_FINISHED = re.compile(r" - (?:INFO|ERROR) - Task '([^']+)' finished with status (SUCCESS|FAILURE)")
_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.+)$")
# A Python traceback's lines up to its exception line, and the lines that chain two of them.
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# kfp.local's own warnings, written while a step runs (``.../kfp/local/x.py:81: RuntimeWarning: ...``
# and the source line after it): kfp's noise, not the step's output.
_KFP_WARNING = re.compile(r"/kfp/local/\S+\.py:\d+: \w*Warning: ")
# kfp.local's time stamp at the start of its own lines (no date: a run may cross midnight).
_STAMP = re.compile(r"^(\d{2}):(\d{2}):(\d{2})\.(\d{3}) - ")
TAIL_LINES = 15
# Off a terminal, a step's progress line comes at most this often (a log stays short), and at
# least this often while the step reports.
PROGRESS_EVERY_S = 30.0
# The progress lines' step name of the training, whose time left starts the run's.
TRAIN_STEP = "train"


def strip_ansi(text: str) -> str:
    """The text without terminal colour codes (kfp.local colours task names and statuses)."""
    return _ANSI.sub("", text)


def duration(seconds: float) -> str:
    """A time in a few characters: ``45s``, ``12m05s``, ``2h03m``."""
    whole = max(int(round(seconds)), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def progress_figures(fields: Mapping[str, Any], run_left: Optional[float] = None) -> list[str]:
    """The optional figures of a progress line as a person reads them, in order.

    Args:
        fields: a parsed progress line (:func:`components.progress.parse`).
        run_left: the whole run's seconds left, when known.

    Returns:
        Any of: the speed (``7,530 images/s``, else ``684 images/s`` from ``rate`` and the unit),
        ``loss 0.507``, ``val_accuracy=0.85``, the note, ``~41s left``, ``run ~3m10s left``.
    """
    out = []
    if "images_per_sec" in fields:
        out.append(f"{_figure(fields['images_per_sec'])} images/s")
    elif "rate" in fields:
        out.append(f"{_figure(fields['rate'])} {fields['unit'] or 'units'}/s")
    if "loss" in fields:
        out.append(f"loss {fields['loss']:.4g}")
    if "metric" in fields and "value" in fields:
        out.append(f"{fields['metric']}={fields['value']:.4g}")
    if fields.get("note"):
        out.append(fields["note"])
    if "eta_s" in fields:
        out.append(f"~{duration(fields['eta_s'])} left")
    if run_left is not None:
        out.append(f"run ~{duration(run_left)} left")
    return out


def _seconds_of_day(stamp: re.Match[str]) -> float:
    hours, minutes, seconds, millis = (int(g) for g in stamp.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def _log_duration(path: Path) -> Optional[tuple[str, float]]:
    """(task, seconds) of a step's log that ends with its success: from kfp.local's first time stamp
    in it (the step's start) to the one of its line saying the task succeeded; None otherwise.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    first: Optional[float] = None
    end: Optional[tuple[str, float]] = None
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        now = _seconds_of_day(stamp)
        first = now if first is None else first
        finished = _FINISHED.search(line)
        if finished and finished.group(2) == "SUCCESS":
            end = (finished.group(1), now)
    if first is None or end is None:
        return None
    seconds = end[1] - first
    return end[0], round(seconds + 86400 if seconds < 0 else seconds, 3)  # negative: the run crossed midnight


def previous_durations(run_dir: Optional[Path]) -> dict[str, float]:
    """Task name -> seconds each step that succeeded took in a finished local run, read from its logs.

    The console writes each step's log (``<run>/logs/<task>.log``) with kfp.local's time-stamped
    lines in it: the step's first and the one saying it finished. A task that ran more than once
    (a loop's iterations) gets the sum. A missing folder, an old one without logs, and logs of
    steps that failed or never finished give nothing.

    Args:
        run_dir: a run folder (``local_outputs/latest``, :func:`previous_run_dir`); None for none.

    Returns:
        The durations; empty when there are none.
    """
    logs = Path(run_dir) / "logs" if run_dir is not None else None
    if logs is None or not logs.is_dir():
        return {}
    out: dict[str, float] = {}
    for path in sorted(logs.glob("*.log")):
        found = _log_duration(path) if path.name != "pipeline.log" else None
        if found is not None:
            out[found[0]] = out.get(found[0], 0.0) + found[1]
    return out


def previous_run_dir(root: Path, name: str) -> Optional[Path]:
    """The newest run folder of the pipeline ``name`` under ``root`` with logs (``<name>-*``), or None.

    Called before a run starts, it is the previous run's.
    """
    runs = [p for p in Path(root).glob(f"{name}-*") if (p / "logs").is_dir()]
    return max(runs, key=lambda p: (p / "logs").stat().st_mtime) if runs else None


def display_names(pipeline: Any) -> dict[str, str]:
    """Task name (as kfp.local names it) -> display name of every step of a compiled pipeline, in
    the order they can run.

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
                # kfp.local names a task after its component: they differ where a nested pipeline
                # is used twice (each rung of a search), whose second copy is ``comp-<task>-2``.
                local_name = task_spec.component_ref.name.removeprefix("comp-")
                found.append((level(task), local_name, task_spec.task_info.name or task))

    walk(spec.root.dag, 0)
    return {task: name for _, task, name in sorted(found)}


def upstream_steps(pipeline: Any) -> dict[str, frozenset[str]]:
    """Task name (as kfp.local names it) -> the steps it runs after, directly or through a group.

    A step inside a group (a loop, a condition, an exit handler's body) runs after what the group
    runs after; a step that waits for a group waits for every step in it: an exit task
    (``dsl.ExitHandler``) runs after its whole body, so every failure in the body comes before it.

    Args:
        pipeline: a ``@dsl.pipeline`` function (its ``pipeline_spec``).
    """
    spec = pipeline.pipeline_spec
    components = dict(spec.components.items())
    found: dict[str, frozenset[str]] = {}

    def dag_of(task_spec: Any) -> Any:
        component = components.get(task_spec.component_ref.name)
        return component.dag if component is not None and component.WhichOneof("implementation") == "dag" else None

    def leaves(task_spec: Any) -> set[str]:
        dag = dag_of(task_spec)
        if dag is None:
            return {task_spec.component_ref.name.removeprefix("comp-")}
        return set().union(*(leaves(t) for t in dag.tasks.values()))

    def walk(dag: Any, inherited: frozenset[str]) -> None:
        before: dict[str, frozenset[str]] = {}

        def upstream(task: str) -> frozenset[str]:
            if task not in before:
                deps = [d for d in dag.tasks[task].dependent_tasks if d in dag.tasks]
                names = set(inherited).union(*(leaves(dag.tasks[d]) | upstream(d) for d in deps))
                before[task] = frozenset(names)
            return before[task]

        for task, task_spec in dag.tasks.items():
            inner = dag_of(task_spec)
            if inner is not None:
                walk(inner, upstream(task))
            else:
                found[task_spec.component_ref.name.removeprefix("comp-")] = upstream(task)

    walk(spec.root.dag, frozenset())
    return found


def _step_indent(lines: list[str]) -> str:
    """How far kfp.local indented a step's own output: four spaces, or more in a process where
    its ``indented_print`` was left nested (two loop iterations run at once each wrap ``print``
    and restore the other's wrapper), read off the KFP executor's first line.
    """
    for raw in lines:
        line = strip_ansi(raw)
        start = line.find("[KFP Executor")
        if start >= 0 and not line[:start].strip():
            return line[:start]
    return "    "


def own_output(lines: list[str]) -> list[str]:
    """A step's log lines as the step wrote them, less what says nothing of it to a person.

    Left out: kfp.local's own lines (its time-stamped records, its warnings while the step runs),
    the KFP executor's lines (``[KFP Executor ...]`` and the executor input it echoes), the steps'
    ``@@progress`` lines (the console drew them), blank lines, and a traceback's frames (its
    exception line stays: the step's error).
    """
    out: list[str] = []
    skip = ""  # "echo": the executor input's JSON; "trace": a traceback's frames; "warning": its source line
    pad = _step_indent(lines)
    for raw in lines:
        line = strip_ansi(raw).rstrip()
        line = line[len(pad) :] if line.startswith(pad) else line  # kfp.local indents a step's output
        if skip == "echo":
            skip = "" if line == "}" else skip
            continue
        indented = not line or line[0].isspace()
        if indented and skip in ("warning", "trace"):  # a warning's source line, a traceback's frame
            skip = "" if skip == "warning" else skip
            continue
        skip = ""
        if line == _TRACEBACK or line.startswith(_CHAINED):
            skip = "trace"
        elif line.endswith("Got executor_input:"):
            skip = "echo"
        elif _KFP_WARNING.search(line):
            skip = "warning"
        elif line.strip() and not (" - INFO - " in line or " - ERROR - " in line or line.startswith("[KFP Executor")):
            out += [line] if progress.parse(line) is None else []
    return out


def error_line(lines: list[str]) -> Optional[str]:
    """The last exception line of a step's log (``package.module.SomeError: message``), or None."""
    found = [m for m in (_ERROR.match(line.strip()) for line in own_output(lines)) if m]
    return f"{found[-1].group(1)}: {found[-1].group(2)}" if found else None


def short_error(error: str) -> str:
    """An error line with its exception's bare class name: ``PredictError: ...``."""
    name, sep, message = error.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}{sep}{message}"


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
    printed_at: Optional[float] = None  # when its last plain progress line was printed
    told_eta: bool = False  # a plain progress line with its time left was printed
    bar: str = ""


class QuietConsole(io.TextIOBase):
    """A text stream that turns kfp.local's output into a build tool's console and per-step logs.

    Args:
        out: where the console's own lines go (the real stdout).
        log_dir: where each task's log ``<task>.log`` (and ``pipeline.log``) is written.
        names: task name -> display name (:func:`display_names`).
        headline: task name -> its headline figure once it succeeded ("" for none).
        tty: draw a live bar (None: ask ``out``).
        verbose: also pass every line through unchanged (``make run VERBOSE=1``).
        previous_seconds: task name -> how long it took in the previous run of the pipeline
            (:func:`previous_durations`); with them the training's lines say the run's time left.
        upstream: task name -> the steps it runs after (:func:`upstream_steps`): a later failure
            of a step after the first failed one is its consequence; None: every later one is.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        out: TextIO,
        log_dir: Path,
        names: Mapping[str, str],
        headline: Callable[[str], str] = lambda task: "",
        tty: Optional[bool] = None,
        verbose: bool = False,
        previous_seconds: Optional[Mapping[str, float]] = None,
        upstream: Optional[Mapping[str, frozenset[str]]] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.out, self.log_dir, self.names, self.headline = out, log_dir, dict(names), headline
        self.tty = out.isatty() if tty is None else tty
        self.verbose = verbose
        self.previous = dict(previous_seconds or {})
        self.upstream = None if upstream is None else dict(upstream)
        self.clock = clock
        self.steps: list[_Step] = []
        # The steps running now, oldest first: kfp.local runs two iterations of a loop at once. Lines
        # go to the newest (kfp.local does not say whose a line is); each ends when its task says so.
        self.open: list[_Step] = []
        # kfp.local lists a task's outputs after it says the task finished: they go to its log too.
        self._ended: Optional[_Step] = None
        self.failures: list[_Step] = []  # the steps that failed, in the order they ended
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

    @property
    def current(self) -> Optional[_Step]:
        """The step started last of those still running, or None."""
        return self.open[-1] if self.open else None

    def _clear_bar(self) -> None:
        step = self.current
        if self.tty and step is not None and step.bar:
            self.out.write("\r\x1b[2K")
            step.bar = ""

    def _progress(self, step: _Step, fields: Mapping[str, Any]) -> None:
        """Draws a step's progress line: the live bar on a terminal, a sparse plain line off one."""
        if self.verbose:
            return
        if fields.get("plan"):
            self.say(f"   {fields['step'] or step.name}: {fields['plan']}")
        done, total, unit = fields["done"], fields["total"], fields["unit"]
        pct = 100 * done // max(total, 1)
        extras = progress_figures(fields, self._run_left(fields))
        now = self.clock()
        if self.tty:
            width = 24
            filled = width * min(done, total) // max(total, 1)
            gauge = "#" * filled + "." * (width - filled)
            bar = f"   {step.name} [{gauge}] {done:,}/{total:,} {unit} {pct}% {now - step.started:.0f}s"
            step.bar = (bar + "".join(f", {x}" for x in extras))[: self._width - 1]
            self.out.write("\r\x1b[2K" + step.bar)
            self.out.flush()
            return
        if not self._plain_line_due(step, fields, now):
            return
        step.printed_at = now
        step.told_eta = step.told_eta or "eta_s" in fields
        what = fields["step"] or step.name
        self.say(f"   {what}: {done:,}/{total:,} {unit} ({pct}%)" + "".join(f", {x}" for x in extras))

    def _plain_line_due(self, step: _Step, fields: Mapping[str, Any], now: float) -> bool:
        """Whether a step's progress line is printed off a terminal.

        One every :data:`PROGRESS_EVERY_S` seconds from the step's start, and the first that
        knows the step's time left at once; a step's last (its end line follows) only with a note
        (``stopped early``).
        """
        if fields["done"] >= fields["total"]:
            return "note" in fields
        if "eta_s" in fields and not step.told_eta:
            return True
        since = step.printed_at if step.printed_at is not None else step.started
        return now - since >= PROGRESS_EVERY_S

    def _run_left(self, fields: Mapping[str, Any]) -> Optional[float]:
        """The run's time left, from a training line with its time left and the previous run's
        durations of the steps not started yet; None without both.
        """
        if fields["step"] != TRAIN_STEP or "eta_s" not in fields or not self.previous:
            return None
        started = {s.task for s in self.steps}
        rest = sum(seconds for task, seconds in self.previous.items() if task not in started and task in self.names)
        return fields["eta_s"] + rest

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
        if _PIPELINE_DONE.search(line):
            # kfp.local does not always say that the last of a loop's iterations ended; a run
            # that succeeded had every task succeed.
            for open_step in list(self.open):
                self._end(open_step, "succeeded")
        ending = next((s for s in self.open if finished and s.task == finished.group(1)), None)
        if ending is not None:
            self._end(ending, "succeeded" if finished.group(2) == "SUCCESS" else "failed")
            return
        if step is None:
            return
        fields = progress.parse(line)
        if fields is not None:
            self._progress(step, fields)

    def _start(self, task: str) -> None:
        # A task that runs again (a loop's iterations: the sweep's cells) gets a log of its own.
        runs = sum(1 for s in self.steps if s.task == task)
        path = self.log_dir / (f"{task}.log" if not runs else f"{task}-{runs + 1}.log")
        path.write_text("", encoding="utf-8")
        step = _Step(task, self.names.get(task, task), self.clock(), path)
        self.steps.append(step)
        self.open.append(step)
        if self.tty and not self.verbose:
            step.bar = f"   {step.name} ..."
            self.out.write(step.bar)
            self.out.flush()
        else:
            self.say(f"-> {step.name}")

    def _end(self, step: _Step, status: str) -> None:
        step.status = status
        step.seconds = self.clock() - step.started
        if status == "succeeded":
            try:
                step.headline = self.headline(step.task)
            except (OSError, ValueError, KeyError, TypeError) as err:  # a figure missing is no failure
                step.headline = f"(no figures: {err})"
            mark = "ok"
        else:
            self.failures.append(step)
            mark = "FAILED"
            error = error_line(step.lines)
            step.headline = short_error(error) if error else ""
        line = f"{mark} {step.name:<22} {step.seconds:6.1f}s  {step.headline}".rstrip()
        if self.tty and status != "succeeded":  # a terminal: the error's start (it is said whole at the end)
            line = line[: max(self._width - 1, 60)]
        self.say(line)
        self.open.remove(step)
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
        for step in list(self.open):
            self._end(step, "failed")
        seen = {s.task for s in self.steps}
        missing = [(task, name) for task, name in self.names.items() if task not in seen]
        for task, name in missing:
            self.steps.append(_Step(task, name, self.clock(), self.log_dir / f"{task}.log", status="not run"))
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
        """The first step that failed, and what failed after it; None when none did.

        Its error is its log's last exception line (else kfp.local's ``error`` when it is the only
        failure, else "the step failed"); its tail is its own output without the traceback. Every
        later failure is a line of ``then``: a step that runs after the first one (an exit task
        after its body) failed as a consequence of it; another failed on its own too.
        """
        if not self.failures:
            return None
        first, later = self.failures[0], self.failures[1:]
        fallback = error if not later and error else "the step failed"
        message = error_line(first.lines) or fallback
        tail = own_output(first.lines)[-TAIL_LINES:]
        then = []
        for step in later:
            after = self.upstream is None or first.task in self.upstream.get(step.task, frozenset())
            how = "failed as a consequence" if after else "failed on its own too"
            then.append(f"{step.name} {how}: {error_line(step.lines) or 'no error line in its log'}")
        return Failure(first.name, message, "\n".join(tail), str(first.log_path), tuple(then))

    def print_failure(self, failure: Failure) -> None:
        """The first failing step's name and error, each later failure, its log's tail and path.

        A tail that is the error line alone is not printed again: the log's path is.
        """
        self.say(f"error: step '{failure.step}' failed: {failure.error}")
        for line in failure.then:
            self.say(f"then: {line}")
        whose = f"the log of '{failure.step}'" if failure.then else "its log"
        tail = failure.log_tail.splitlines()
        if tail in ([], [failure.error]):
            self.say(f"{whose[0].upper()}{whose[1:]}: {failure.log}")
            return
        self.say(f"last lines of {whose} ({failure.log}):")
        for line in tail:
            self.say("  | " + line)


def executor_output(run_dir: Optional[Path], task: str) -> dict[str, Any]:
    """A task's ``executor_output.json`` in a kfp.local run folder ({} when there is none)."""
    if run_dir is None:
        return {}
    path = run_dir / task / "executor_output.json"
    return json.loads(path.read_text()) if path.is_file() else {}

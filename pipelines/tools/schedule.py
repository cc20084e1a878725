"""``make schedule`` / ``make unschedule``: the retrain pipeline as one recurring run on a Kubeflow host.

``python -m pipelines.tools.schedule --host URL --cron '0 0 3 * * *' [--config retrain.yaml]
[--set 'name=value ...'] [--experiment Default] [--name lean-tpu-retrain] [--image IMAGE]``;
``--remove`` deletes it instead. The recurring run holds the compiled ``retrain`` pipeline, runs
with ``max_concurrency=1`` and without catch-up (a paused schedule does not backfill the runs it
missed). Kubeflow cannot update a recurring run in place, so scheduling again replaces it without a
gap: the new one is created disabled, the old ones of that name in that experiment are deleted,
then the new one is enabled; whatever happens, one remains (docs/retraining.md).

KFP's cron has six fields, **seconds first** (``0 0 3 * * *``: 03:00:00 every day), or a
descriptor (``@daily``, ``@every 6h``); a five-field expression is refused with the six-field form.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

NAME = "lean-tpu-retrain"
PIPELINE = "retrain"
DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_EVERY = re.compile(r"@every\s+(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+")
# (field, lowest, highest, names) of KFP's (robfig/cron's) six fields.
_FIELDS = (
    ("seconds", 0, 59, ()),
    ("minutes", 0, 59, ()),
    ("hours", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
_PART = re.compile(r"^(\*|\?|[A-Za-z0-9]+(-[A-Za-z0-9]+)?)(/\d+)?$")


class ScheduleError(ValueError):
    """A schedule that cannot be made; the message says what is wrong and what to do."""


def _value(text: str, low: int, high: int, names: tuple[str, ...]) -> Optional[int]:
    if text.upper() in names:
        return names.index(text.upper()) + low
    return int(text) if text.isdigit() and low <= int(text) <= high else None


def _field_ok(text: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    for part in text.split(","):
        match = _PART.match(part)
        if match is None:
            return False
        if match.group(1) in ("*", "?"):
            continue
        bounds = match.group(1).split("-")
        if any(_value(b, low, high, names) is None for b in bounds):
            return False
    return True


def check_cron(expression: str) -> str:
    """The expression, checked as KFP reads it: six fields (seconds first) or a descriptor.

    Raises:
        ScheduleError: five fields (the message shows the six-field form), another count, or a
            field out of its range (one line naming it).
    """
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text in DESCRIPTORS or _EVERY.fullmatch(text):
            return text
        raise ScheduleError(
            f"cron {expression!r}: unknown descriptor; use one of {', '.join(DESCRIPTORS)} or @every 6h"
        )
    fields = text.split(" ") if text else []
    if len(fields) == 5:
        raise ScheduleError(
            f"cron {expression!r} has 5 fields; KFP's cron has 6, seconds first: give '0 {text}' for the same times"
        )
    if len(fields) != 6:
        raise ScheduleError(
            f"cron {expression!r} has {len(fields)} fields; KFP's cron has 6, seconds first "
            "('0 0 3 * * *': 03:00 daily)"
        )
    for value, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        if not _field_ok(value, low, high, names):
            raise ScheduleError(
                f"cron {expression!r}: {name} {value!r} is not a value in {low}-{high}, *, ?, a list, a range or a step"
            )
    return text


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """What scheduling did: the recurring run now there, and the ones it replaced."""

    recurring_run_id: str
    experiment_id: str
    replaced: tuple[str, ...]


def _by_name(name: str) -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]})


def existing(client: Any, experiment_id: str, name: str) -> list[str]:
    """The ids of the recurring runs named ``name`` in the experiment."""
    found = client.list_recurring_runs(experiment_id=experiment_id, filter=_by_name(name), page_size=100)
    return [r.recurring_run_id for r in found.recurring_runs or () if r.display_name == name]


def schedule(
    client: Any, package: Path, cron: str, arguments: dict[str, Any], *, experiment: str = "Default", name: str = NAME
) -> Scheduled:
    """Creates the recurring run, replacing those of the same name without a gap (the module docstring).

    Raises:
        ScheduleError: a cron KFP cannot read (nothing is asked of the host).
    """
    cron = check_cron(cron)
    experiment_id = client.create_experiment(name=experiment).experiment_id
    old = existing(client, experiment_id, name)
    new = client.create_recurring_run(
        experiment_id=experiment_id, job_name=name, cron_expression=cron, max_concurrency=1, no_catchup=True,
        pipeline_package_path=str(package), params=arguments, enabled=False,
        description=f"the {PIPELINE} pipeline on '{cron}' (make schedule)",
    ).recurring_run_id  # fmt: skip
    try:
        for run_id in old:
            client.delete_recurring_run(run_id)
    except Exception:
        client.delete_recurring_run(new)  # the old one stays, enabled, as it was
        raise
    client.enable_recurring_run(new)
    return Scheduled(new, experiment_id, tuple(old))


def unschedule(client: Any, *, experiment: str = "Default", name: str = NAME) -> list[str]:
    """Deletes the recurring runs named ``name`` in the experiment; returns their ids (none: empty)."""
    found = client.list_experiments(filter=_by_name(experiment), page_size=10).experiments or []
    removed = []
    for exp in found:
        for run_id in existing(client, exp.experiment_id, name):
            client.delete_recurring_run(run_id)
            removed.append(run_id)
    return removed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines.tools.schedule", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="", help="the KFP API endpoint (make's KFP_HOST), e.g. http://localhost:8080")
    parser.add_argument("--cron", default="0 0 3 * * *", help="KFP's 6-field cron, seconds first (default 03:00 daily)")
    parser.add_argument("--remove", action="store_true", help="delete the recurring run instead")
    parser.add_argument("--config", help="a YAML file of the retrain pipeline's run-form parameters")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE ...", help="parameters over --config")
    parser.add_argument("--experiment", default="Default", help="the KFP experiment (made when missing)")
    parser.add_argument("--name", default=NAME, help=f"the recurring run's name (default {NAME})")
    parser.add_argument("--image", help="the image every step runs (default: the project's)")
    parser.add_argument("--dir", type=Path, default=Path("dist/pipelines"), help="where the compiled file goes")
    parser.add_argument("--namespace", default="kubeflow", help="the Kubeflow namespace of the KFP API")
    return parser


def _checked(args: argparse.Namespace) -> Any:
    """The run's parameters, after the host and the cron were checked (nothing asked of the host yet).

    Raises:
        ScheduleError: no host, a bad cron.
        ParameterError: a run-form parameter the retrain pipeline refuses.
    """
    from pipelines.tools.submit_run import submit_parameters

    if not args.host:
        raise ScheduleError(
            "KFP_HOST is not set: give the Kubeflow Pipelines endpoint, e.g. make schedule KFP_HOST=http://localhost:8080"
        )
    if args.remove:
        return None
    check_cron(args.cron)
    return submit_parameters(PIPELINE, args.config, " ".join(args.set or []))


def _act(args: argparse.Namespace, parameters: Any) -> list[str]:
    """Asks the host; returns the lines to print."""
    import kfp

    from pipelines.tools import compile as compiling

    client = kfp.Client(host=args.host, namespace=args.namespace)
    if args.remove:
        removed = unschedule(client, experiment=args.experiment, name=args.name)
        return [f"removed recurring run {r}" for r in removed] or [f"no recurring run {args.name!r} to remove"]
    package = compiling.compile_pipeline(PIPELINE, args.dir, args.image)
    done = schedule(client, package, args.cron, parameters.changed(), experiment=args.experiment, name=args.name)
    lines = [f"recurring run {args.name!r}: {done.recurring_run_id}, cron '{check_cron(args.cron)}', enabled"]
    lines += [f"replaced {r}" for r in done.replaced]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``make schedule``, ``make unschedule``)."""
    import kfp_server_api
    import urllib3

    from components.cli import EXIT_BAD_INPUT, EXIT_FAILED
    from pipelines.tools.params import ParameterError

    args = _parser().parse_args(argv)
    try:
        parameters = _checked(args)
    except ScheduleError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ParameterError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        lines = _act(args, parameters)
    except (urllib3.exceptions.HTTPError, kfp_server_api.ApiException, TimeoutError) as err:
        # Not bad input: the host said no or did not answer.
        why = " ".join(str(err).split())[:300]
        print(f"error: the Kubeflow Pipelines API at {args.host} did not take the schedule: {why}", file=sys.stderr)
        return EXIT_FAILED
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

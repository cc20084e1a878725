"""``make search``: the search pipeline under kfp.local, then its frontier table and pick printed.

``python -m pipelines.tools.run_search [--search search.yaml] [--dry-run] [--config form.yaml]
[--set 'name=value ...'] [--pipeline-root local_outputs]``. The default search is 12 trials on
Fashion-MNIST (pipelines/search.py ``LOCAL_SEARCH``); ``--search`` takes a search file (docs/sweep.md,
"Search"); ``--dry-run`` plans and prices the rungs and prints them without running anything.
The console is ``make run``'s (``pipelines/tools/runner.py``); the last lines are the table, the
pick's settings and model, and the results page. The pipeline is compiled with the rungs the file
asks for.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import yaml

from components.sweep.component import join_search
from pipelines import search
from pipelines.tools import params
from pipelines.tools.params import Layer, ParameterError, RunParameters
from pipelines.tools.runner import Finished, Summary, Tool


def _search_layer(path: Path) -> Layer:
    """``--search file.yaml`` as the ``search`` parameter."""
    if not path.is_file():
        raise ParameterError([f"SEARCH {path}: no such file; give a search file (docs/sweep.md, 'Search')"])
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParameterError([f"SEARCH {path} is not YAML: {' '.join(str(err).split())}"]) from None
    return Layer(f"SEARCH {path}", {"search": spec})


def search_parameters(args: argparse.Namespace, pipeline: Any = search.pipeline) -> RunParameters:
    """The search's parameters: the form's defaults, ``CONFIG``, ``SEARCH``, ``SET``.

    Raises:
        ParameterError: an unknown name, a wrong type (one line each).
    """
    layers = []
    if args.config:
        layers.append(params.read_config(args.config))
    if args.search:
        layers.append(_search_layer(args.search))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    return params.resolve(params.run_form(pipeline), layers, search.NAME)


def dry_run(values: dict[str, Any]) -> str:
    """The plan of the search, priced, without running anything: what ``--dry-run`` prints."""
    from components.sweep.search.folder import search_settings
    from components.sweep.search.plan import describe_plan, plan_search
    from components.sweep.search.space import SearchSpec

    defaults, context = search_settings(
        values["model"], values["model_options"], values["batch_size_per_replica"], values["learning_rate"],
        values["source"], values["limit_per_split"],
    )  # fmt: skip
    plan = plan_search(
        SearchSpec.from_dict(values["search"]), price_table=values["price_table"] or None, defaults=defaults,
        context=context,
    )  # fmt: skip
    return describe_plan(plan)


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--search", type=Path, help="a search file (default: the local search on Fashion-MNIST)")
    parser.add_argument("--dry-run", action="store_true", help="plan and price the rungs, run nothing")


def _rungs(resolved: RunParameters) -> int:
    return int((resolved.values["search"] or {}).get("rungs", search.DEFAULT_RUNGS))


def before(args: argparse.Namespace, resolved: RunParameters) -> Optional[int]:
    """The search file checked (its rungs a number); with ``--dry-run``, its plan printed and 0."""
    from components.sweep.search.space import SearchError

    try:
        _rungs(resolved)
    except (ValueError, TypeError, AttributeError):
        rungs = resolved.values["search"]
        raise ParameterError([f"search: a mapping whose rungs is a whole number, got {rungs!r}"]) from None
    if not args.dry_run:
        return None
    try:
        print(dry_run(resolved.values))
    except SearchError as err:
        raise ParameterError(getattr(err, "problems", None) or [str(err)]) from None
    return 0


def last_lines(done: Finished) -> Summary:
    """The table and frontiers, the pick's settings and model, and the results page.

    The page is the join's HTML artifact (the frontier charts and every trial), copied to
    ``<run folder>/search.html``: the artifact has no extension, which a browser wants.
    """
    from pipelines.tools.console import executor_output

    report = done.folder / join_search.name / "report"
    if not report.is_file():
        return Summary(
            [] if done.failure else [f"error: no search table under {done.folder}/{join_search.name}"], ok=False
        )
    lines = [report.read_text().rstrip()]
    result = executor_output(done.folder, join_search.name).get("parameterValues", {}).get("Output") or {}
    folder = result.get("folder")
    if folder and (result.get("choice") or {}).get("key"):
        lines.append(f"the pick's settings: make run CONFIG={folder}/best.yaml")
        lines.append(f"the pick's model: {result['choice'].get('model_uri', '')}")
    page = done.folder / "search.html"
    shutil.copyfile(report.with_name("chart"), page)
    lines.append(f"results page: {page}")
    return Summary(lines)


TOOL = Tool(
    search, __doc__, search_parameters, last_lines, flags=_flags, before=before,
    build=lambda resolved: search.build(rungs=_rungs(resolved)), figures=lambda step: "trial" not in step,
)  # fmt: skip
_parser = TOOL.parser
main = TOOL.main


if __name__ == "__main__":
    sys.exit(main())

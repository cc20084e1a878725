"""``make search``: the search pipeline under kfp.local, then its frontier table and pick printed.

``python -m pipelines.tools.run_search [--search search.yaml] [--dry-run] [--config form.yaml]
[--set 'name=value ...'] [--pipeline-root local_outputs]``. The default search is 12 trials on
Fashion-MNIST (pipelines/search.py ``LOCAL_SEARCH``); ``--search`` takes a search file (docs/sweep.md,
"Search"); ``--dry-run`` plans and prices the rungs and prints them without running anything.
The console is ``make run``'s. The pipeline is compiled with the rungs the file asks for.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from pipelines import search
from pipelines.tools import params
from pipelines.tools.params import Layer, ParameterError, RunParameters


def _search_layer(path: Path) -> Layer:
    """``--search file.yaml`` as the ``search`` parameter."""
    if not path.is_file():
        raise ParameterError([f"SEARCH {path}: no such file; give a search file (docs/sweep.md, 'Search')"])
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParameterError([f"SEARCH {path} is not YAML: {' '.join(str(err).split())}"]) from None
    return Layer(f"SEARCH {path}", {"search": spec})


def search_parameters(args: argparse.Namespace, pipeline: Any) -> RunParameters:
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", type=Path, help="a search file (default: the local search on Fashion-MNIST)")
    parser.add_argument("--dry-run", action="store_true", help="plan and price the rungs, run nothing")
    parser.add_argument("--config", help="a YAML file of the search pipeline's run-form parameters")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE ...", help="parameters over --config")
    parser.add_argument("--pipeline-root", type=Path, default=Path("local_outputs"))
    parser.add_argument("--verbose", action="store_true", help="also print kfp.local's whole output as it comes")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the search locally behind the quiet console and prints its table, or plans it (``--dry-run``)."""
    from components.sweep.search.space import SearchError
    from pipelines.tools.console import executor_output
    from pipelines.tools.run_local import headline, run_in_console

    args = _parser().parse_args(argv)
    try:
        resolved = search_parameters(args, search.pipeline)
        rungs = int((resolved.values["search"] or {}).get("rungs", search.DEFAULT_RUNGS))
        if args.dry_run:
            print(dry_run(resolved.values))
            return 0
    except (ParameterError, SearchError) as err:
        for line in getattr(err, "problems", None) or [str(err)]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    pipeline = search.build(rungs=rungs)
    root = args.pipeline_root.resolve()
    started = time.monotonic()
    lines = [f"lean-tpu-pipelines: the {search.NAME} pipeline under kfp.local", f"parameters: {resolved.describe()}"]
    done = run_in_console(
        pipeline, search.NAME, resolved.values, root, out=sys.stdout, tty=None, verbose=args.verbose,
        first_lines=lines, headline=lambda run_dir, step: "" if "trial" in step else headline(run_dir, step),
    )  # fmt: skip
    console = done.console
    failure = console.failure(done.error)
    if failure is not None:
        console.print_failure(failure)
    report = done.folder / "join-search" / "report"
    if not report.is_file():
        console.say(f"error: no search table under {done.folder}/join-search")
        return 1
    console.say(report.read_text().rstrip())
    result = executor_output(done.folder, "join-search").get("parameterValues", {}).get("Output") or {}
    folder = result.get("folder")
    if folder and (result.get("choice") or {}).get("key"):
        console.say(f"the pick's settings: make run CONFIG={folder}/best.yaml")
        console.say(f"the pick's model: {result['choice'].get('model_uri', '')}")
    console.say(f"chart: {report.with_name('chart')}")
    console.say(f"logs:  {console.log_dir}/")
    console.say(f"search wall time: {time.monotonic() - started:.1f} s")
    return 0 if failure is None and done.error is None else 1


if __name__ == "__main__":
    sys.exit(main())

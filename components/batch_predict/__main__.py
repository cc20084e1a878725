r"""Command line: ``python -m components.batch_predict {plan,shard,join,run} ...`` (no Kubeflow needed).

plan   lists the input, pins the model, cuts the shards and prices them (``manifest.json``)
shard  scores one shard of the plan under --output-uri (skipped when already done)
join   joins what the shards wrote: summary.json, coco_results.json, report.md, report.html
run    all three in this process, the shards one after another

Examples::

    python -m components.batch_predict run --data photos/ --stage staging --model-name detector \
        --stages-root local_outputs/stages --output-uri out/predictions
    python -m components.batch_predict shard --output-uri out/predictions --index 3
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from components.batch_predict.config import PredictConfig
from components.cli import EXIT_FAILED, EXIT_OK, add_config_flags, fail, flags_to_fields, load_section
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.batch_predict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 1 some shard failed (run again to redo it), 2 bad input (one 'error: ...' line).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{plan,shard,join,run}")
    for name, text in (("plan", "plan the shards"), ("run", "plan, score every shard, join")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--config", help="YAML: PredictConfig fields")
        add_config_flags(cmd, PredictConfig, exclude=("read_threads",) if name == "plan" else ())
        cmd.add_argument("--accelerator-type", default="", help="what each shard's pod requests (price key)")
        cmd.add_argument("--accelerator-count", type=int, default=0, help="how many of it")
    shard = sub.add_parser("shard", help="score one shard")
    shard.add_argument("--output-uri", required=True, help="where the plan is")
    shard.add_argument("--index", type=int, required=True, help="the shard")
    shard.add_argument("--accelerator-type", default="", help="what this pod requested (price key)")
    shard.add_argument("--accelerator-count", type=int, default=0, help="how many of it")
    shard.add_argument("--price-table", help="a YAML price table over the defaults")
    shard.add_argument("--read-threads", type=int, default=8, help="threads reading image bytes")
    join = sub.add_parser("join", help="join the shards' results")
    join.add_argument("--output-uri", required=True, help="where the plan and the shards' files are")
    return p


def _plan(args: argparse.Namespace):
    from components.batch_predict.plan import describe_plan, plan

    config = load_section(PredictConfig, args.config, flags_to_fields(args))
    result = plan(config, accelerator_type=args.accelerator_type, accelerator_count=args.accelerator_count)
    for line in describe_plan(result):
        print(line)
    return config, result


def _shard(output_uri: str, index: int, args: argparse.Namespace, price_table, read_threads: int) -> int:
    from components.batch_predict.score import score_shard
    from components.progress import reporter

    r = score_shard(
        output_uri,
        index,
        accelerator_type=args.accelerator_type,
        accelerator_count=args.accelerator_count,
        price_table=price_table,
        read_threads=read_threads,
        on_progress=reporter(f"shard {index}", "images", every_s=5.0),
    )
    print(f"shard {index}: {r.status}, {r.scored} of {r.images} scored, {r.failed_images} unreadable {r.reason}")
    return EXIT_OK if r.status == "ok" else EXIT_FAILED


def _join(output_uri: str) -> int:
    from components.batch_predict.join import join
    from components.batch_predict.page import write_reports
    from components.batch_predict.run import COCO_RESULTS, SUMMARY
    from trainer import storage

    joined = join(output_uri)
    write_reports(output_uri, joined)
    s = joined.summary
    print(
        f"{s.scored:,} of {s.images:,} images scored ({s.failed_images:,} unreadable) in {s.shards_ok} of "
        f"{s.shards} shards at {s.images_per_sec:,.1f} images/s per shard; billed {s.billed_s:,.1f} s, ${s.cost:,.4f}"
    )
    for name, value in s.metrics.items():
        print(f"{name}: {value:.4f}")
    for f in s.failed_shards:
        print(f"incomplete: {f['shard']}: {f['reason']}; run again to redo it")
    coco = storage.join(output_uri, COCO_RESULTS)
    print(f"wrote: {storage.join(output_uri, SUMMARY)}" + (f", {coco}" if storage.exists(coco) else ""))
    return EXIT_OK if s.complete else EXIT_FAILED


def _run(args: argparse.Namespace) -> int:
    config, result = _plan(args)
    status = EXIT_OK
    for spec in result.shards:
        status = max(status, _shard(result.output_uri, spec.index, args, config.price_table, config.read_threads))
    return max(status, _join(result.output_uri))


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments and runs the sub-command.

    Returns:
        The exit status: 0 done, 1 a shard failed, 2 bad input.
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.batch_predict.run import PredictError
    from components.image_input.sources import SourceError
    from trainer.budget.pricing import PriceTableError
    from trainer.tasks import TaskError
    from trainer.tfrecords import DatasetError

    try:
        if args.command == "plan":
            _plan(args)
            return EXIT_OK
        if args.command == "shard":
            return _shard(args.output_uri, args.index, args, args.price_table, args.read_threads)
        if args.command == "join":
            return _join(args.output_uri)
        return _run(args)
    except (ConfigError, PredictError, SourceError, PriceTableError, TaskError, DatasetError) as err:
        return fail(err)


if __name__ == "__main__":
    sys.exit(main())

"""The ``search`` pipeline: the best model for the money, by successive halving over a search file.

Convert (once) -> plan the search (its trials, rungs and worst-case cost; every bad input fails
here) -> for each rung: its trials fanned out (each continues its own schedule from its own
checkpoints, to the rung's budget, and is scored on the test split) -> the selection promotes the
best 1/eta by the objective -> ... -> the join as the exit task: every trial's row, the frontiers
of quality against cost and time, the objective's pick (its settings as a ``CONFIG`` file, its
model) and what stopping early saved.

A pipeline of its own rather than a parameter of ``sweep``: its DAG is rungs of fan-outs with a
selection between them, which KFP cannot build inside one pipeline at run time (no loops), so the
number of rungs is compiled in (``make compile SEARCH_RUNGS=3``), as the parallelism is
(``SWEEP_PARALLELISM``). Trial tasks never fail on their own errors (a failed trial is a row with its
reason), so a ``dsl.Collected`` selection always runs; a pod killed from outside stops the search
at that rung, and the join, reading the rows from storage, gives the frontier of what finished and
says so. TPU VM types need compile-time node selectors: one compiled search per preset, as for the
grid (``build(preset=...)``). The form's data and model, and the local search's metric, are a
task's (``build(task=...)``: its ``run_defaults`` and headline metric; by default ``TASK``). No
TensorFlow here.
"""

from typing import Optional

from kfp import dsl, kubernetes

from components.convert.component import convert_to_tfrecords
from components.launchers.identity import POD_FIELD_PATHS
from components.sweep.component import join_search, plan_search, select_search_rung, train_search_trial
from pipelines import accelerators, grid, platform
from trainer.tasks import get_task

NAME = "search"
TASK = "classification"  # the local search's: its form's data and model are this task's run defaults
DEFAULT_RUNGS = 3
RUNGS_ENV = "SEARCH_RUNGS"


def local_search(task: str = TASK) -> dict:
    """The search form's default: a small local search, ranked by the task's headline metric.

    On 5,000 images per split of the task's built-in data (Fashion-MNIST for classification): 12
    trials over learning rate and batch, a quarter of them at a learning rate (0.2) far too high, 3
    rungs with eta 3 (12, 4, 2 trials) of 30 s, 90 s and 270 s each.
    """
    return {
        "space": {
            "learning_rate": [0.0005, 0.002, 0.02, 0.2],
            "batch_size_per_replica": [16, 32, 64],
        },
        "sampling": "grid",
        "rungs": 3,
        "eta": 3,
        "max_budget": "270s",
        "objective": "frontier",
        "metric": get_task(task).headline_metric,
        "fixed": {"accelerator": "cpu"},
    }


LOCAL_SEARCH = local_search()


def trial_pipeline(preset: Optional[str] = None, index: int = 0):
    """The per-trial nested pipeline: the trial task with its accelerator request.

    Nested for the reason the grid's cell is (pipelines/sweep.py): a loop item's fields used in a
    resource request must be the inputs of a pipeline to compile to run-time placeholders.

    Args:
        preset: None for the trial's own run-time request; a compile-time preset to give every
            trial that preset's resources, node selectors and tolerations instead.
        index: the rung it trains (its display name).
    """

    @platform.pipeline(name="search-trial", nested=True, part_of=NAME, labels=platform.preset_labels(preset))
    def trial_on(
        dataset: dsl.Input[dsl.Dataset], trial: dict, rung: int, accelerator_type: str, accelerator_count: str
    ) -> dict:
        task = train_search_trial(dataset=dataset, trial=trial, rung=rung).set_display_name(
            f"Rung {index}: train a trial"
        )
        if preset is None:
            # Retries: a preempted pod kills the trial; the retried one resumes from its checkpoints.
            accelerators.set_accelerator(task, accelerator_type, accelerator_count)
        else:
            accelerators.apply_preset(task, preset)
        for name, field_path in POD_FIELD_PATHS.items():
            kubernetes.use_field_path_as_env(task, name, field_path)
        task.set_caching_options(False)  # a trial's rows under rows_root say what is done, not KFP's cache
        return task.outputs["Output"]

    return trial_on


DESCRIPTION = (
    "A cost-aware search: successive halving over a search file's trials (image size, budget, learning "
    "rate, batch, model options, accelerator), each trial priced from the price table; the frontier of "
    "quality against cost and time, the objective's pick with its settings and model, and what stopping "
    "bad trials early saved."
)


def build(
    parallelism: int = grid.DEFAULT_PARALLELISM,
    rungs: int = DEFAULT_RUNGS,
    preset: Optional[str] = None,
    task: str = TASK,
):
    """The search pipeline with its rungs, its concurrency limit and optionally one compile-time preset.

    Args:
        parallelism: trials at once (0: no limit), a literal in the YAML.
        rungs: rungs of successive halving (the search file must ask for as many).
        preset: see :func:`trial_pipeline`.
        task: the task whose run defaults give the form's data and model, and whose headline
            metric the default search ranks by (``trainer.tasks``).

    Returns:
        The ``@dsl.pipeline`` function.
    """
    if rungs < 1:
        raise ValueError(f"{RUNGS_ENV}: a search has at least one rung, got {rungs}")
    trial_on = [trial_pipeline(preset, rung) for rung in range(rungs)]  # outside the pipeline: kfp nests none there
    defaults, default_search = get_task(task).run_defaults, local_search(task)

    @platform.pipeline(name=NAME, description=DESCRIPTION, labels=platform.preset_labels(preset))
    def pipeline(
        search: dict = default_search,
        source: str = defaults.data,
        limit_per_split: int = 5000,
        model: str = defaults.model,
        model_options: dict = {},  # noqa: B006
        batch_size_per_replica: int = 32,
        learning_rate: float = 0.001,
        rows_root: str = "",
        price_table: str = "",
    ):
        """Plans and runs a search by successive halving and joins its frontier.

        Args:
            search: the search file (docs/sweep.md, "Search"): space, trials, sampling, seed,
                rungs, eta, min_budget/max_budget, objective, metric, spend_cap, fixed.
            source: the dataset to convert once (digits, fashion-mnist, shapes, a COCO file...).
            limit_per_split: keep at most this many images per split; 0 keeps all.
            model: the model builder for trials that name none.
            model_options: its options for trials that give none.
            batch_size_per_replica: for trials that give none.
            learning_rate: for trials that give none (for a global batch of 128).
            rows_root: where the search keeps its plan, trials' checkpoints and rows; empty for
                ``<pipeline root>/sweep-rows``. A re-run of the same search there reuses its
                finished trials.
            price_table: a YAML price table over the defaults (a path in the container).
        """
        settings = {
            "search": search,
            "model": model,
            "model_options": model_options,
            "batch_size_per_replica": batch_size_per_replica,
            "learning_rate": learning_rate,
            "source": source,
            "limit_per_split": limit_per_split,
        }
        search_steps(trial_on, parallelism, settings, rows_root, price_table)

    return pipeline


def search_steps(trial_on: list, parallelism: int, settings: dict, rows_root, price_table) -> None:
    """The tasks: convert, plan, each rung's fan-out and selection, and the join as the exit task.

    Args:
        trial_on: each rung's per-trial nested pipeline (:func:`trial_pipeline`).
        parallelism: trials at once (0: no limit).
        settings: the search file and the trials' defaults and context.
        rows_root: where the search keeps its trials.
        price_table: a YAML price table over the defaults.
    """
    common = {"rows_root": rows_root, "pipeline_root": dsl.PIPELINE_ROOT_PLACEHOLDER, "price_table": price_table}
    join = join_search(**settings, **common).set_display_name("Frontier")
    join.set_caching_options(False)  # it reads rows written outside KFP's view
    with dsl.ExitHandler(join, name="search"):
        converted = convert_to_tfrecords(
            source=settings["source"], limit_per_split=settings["limit_per_split"]
        ).set_display_name("Convert to TFRecords")
        rungs = len(trial_on)
        planned = plan_search(**settings, **common, rungs=rungs).set_display_name("Plan the search")
        planned.set_caching_options(False)
        trials = planned.output
        for rung in range(rungs):
            with grid.fan_out(trials, parallelism, name=f"rung-{rung}") as trial:
                ran = trial_on[rung](
                    dataset=converted.outputs["dataset"],
                    trial=trial,
                    rung=rung,
                    accelerator_type=trial.accelerator_type,
                    accelerator_count=trial.accelerator_count,
                ).set_display_name(f"Rung {rung}")
            if rung < rungs - 1:
                selected = select_search_rung(rows=dsl.Collected(ran.output), rung=rung)
                selected.set_display_name(f"Select after rung {rung}").set_caching_options(False)
                trials = selected.output


pipeline = build()

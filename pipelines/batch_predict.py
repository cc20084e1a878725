"""The ``batch_predict`` pipeline: score a bucket of images with what a stage serves, over shards.

Plan (list the input, pin the model, cut and price the shards) -> one task per shard in a
``ParallelFor``, each on the accelerator the run asks for -> the join as the exit task, which reads
what the shards wrote under ``output_uri``. A shard task never fails on its own errors (its
summary says ``failed`` and why); the join runs whichever shards finished and names the ones
that did not, so a lost shard is named, not hidden. Re-running the same prediction (same input,
model and settings) redoes only the shards that did not finish: the shards' results live under
the stable ``output_uri``, not in KFP's cache. How many shards run at once is a compile-time
setting, as for the sweep's cells (``make compile SWEEP_PARALLELISM=4``). No TensorFlow here.
"""

from kfp import dsl

from components.batch_predict.component import join_batch_prediction, plan_batch_prediction, predict_shard
from pipelines import accelerators, grid, platform

NAME = "batch-predict"
DESCRIPTION = (
    "Scores a folder, gs:// prefix, list, COCO file or dataset of images with the model a stage serves "
    "(or a model folder), in shards over pods: one JSONL prediction per image, COCO results for a "
    "detector, images per dollar; resumable under a stable output location."
)


def build(parallelism: int = grid.DEFAULT_PARALLELISM):
    """The batch prediction pipeline with a compile-time limit on the shards run at once.

    Args:
        parallelism: shards at once (0: no limit), a literal in the YAML.

    Returns:
        The ``@dsl.pipeline`` function.
    """

    @platform.pipeline(name=NAME, description=DESCRIPTION)
    def pipeline(
        data: str,
        output_uri: str,
        stage: str = "",
        model_name: str = "",
        model_dir: str = "",
        stages_root: str = "",
        split: str = "test",
        batch_size: int = 64,
        score_threshold: float = 0.0,
        top_k: int = 0,
        prediction_options: dict = {},  # noqa: B006 (a pipeline default, never mutated)
        images_per_shard: int = 5000,
        images_per_sec: float = 0.0,
        accelerator_type: str = "",
        accelerator_count: int = 0,
        price_table: str = "",
        read_threads: int = 8,
        serving_format: str = "",
    ):
        """Scores the images in shards and joins the predictions.

        Args:
            data: the images: a folder or gs:// prefix, a CSV/JSONL list (column path, optional
                label), a COCO file, or a converted dataset folder.
            output_uri: where the predictions go (a stable location: a re-run reuses the shards
                already scored there; another input or model there is refused).
            stage: score the version this stage serves (demo, staging, prod), pinned when the
                shards are planned; empty to score model_dir.
            model_name: the served model name at the stage; empty: the one model it serves.
            model_dir: a model folder (saved_model/ inside) or SavedModel folder, instead of a stage's.
            stages_root: the stage store; empty for <pipeline root>/stages.
            split: the split scored when data is a converted dataset.
            batch_size: images per model call.
            score_threshold: leave out predictions scoring below it; 0 keeps all the model
                returns (a detector's export already leaves out boxes below 0.05).
            top_k: the most predictions per image; 0: the task's (5 classes, 100 boxes).
            prediction_options: the model's task's own settings, e.g. {coco: false} (detection:
                coco, write coco_results.json, default true); empty: the task's defaults.
            images_per_shard: images one shard (one pod) scores.
            images_per_sec: the rate the cost estimate assumes (the inference benchmark's images/s
                for this model and accelerator); 0: a rate recorded earlier, else no estimate.
            accelerator_type: the accelerator each shard's pod requests (nvidia.com/gpu); empty
                for CPU only. A TPU is not offered yet: shards run the exported model.
            accelerator_count: how many of it (0 for CPU only).
            price_table: a YAML price table over the defaults (a path in the container).
            read_threads: threads per shard reading image bytes (they overlap gs:// latency).
            serving_format: the form scored: saved_model or a portable format of the model's
                export (litert, litert_int8, onnx, onnx_int8; docs/export.md); empty: what the
                stage serves it in (a model folder: its SavedModel).
        """
        settings = dict(
            data=data, stage=stage, model_name=model_name, model_dir=model_dir, stages_root=stages_root,
            split=split, batch_size=batch_size, score_threshold=score_threshold, top_k=top_k,
            prediction_options=prediction_options, images_per_shard=images_per_shard, images_per_sec=images_per_sec,
            serving_format=serving_format,
        )  # fmt: skip
        steps(parallelism, settings, output_uri, accelerator_type, accelerator_count, price_table, read_threads)

    return pipeline


def steps(parallelism: int, settings: dict, output_uri, accelerator_type, accelerator_count, price_table, read_threads):
    """The pipeline's tasks: the plan, the shards' fan-out, and the join as the exit task.

    Called inside the pipeline function (its arguments are the pipeline's parameters, as channels).

    Args:
        parallelism: shards at once (0: no limit).
        settings: the plan's parameters (data, stage, ..., images_per_sec).
        output_uri: where the predictions go.
        accelerator_type: what each shard's pod requests.
        accelerator_count: how many of it.
        price_table: a YAML price table over the defaults.
        read_threads: threads per shard reading image bytes.
    """
    join = join_batch_prediction(output_uri=output_uri).set_display_name("Join the predictions")
    join.set_caching_options(False)  # it reads what the shards wrote outside KFP's view
    with dsl.ExitHandler(join, name="predict"):
        planned = plan_batch_prediction(
            **settings,
            output_uri=output_uri,
            price_table=price_table,
            pod_accelerator_type=accelerator_type,
            pod_accelerator_count=accelerator_count,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        ).set_display_name("Plan the shards")
        planned.set_caching_options(False)  # the stage's version is resolved now, not when first cached
        with grid.fan_out(planned.output, parallelism, name="shards") as shard:
            task = predict_shard(
                output_uri=output_uri,
                shard=shard,
                pod_accelerator_type=accelerator_type,
                pod_accelerator_count=accelerator_count,
                price_table=price_table,
                read_threads=read_threads,
            ).set_display_name("Score a shard")
            task.set_caching_options(False)  # a shard skips itself when its results exist
            # Retries: a preempted pod redoes its shard (a shard skips itself once done).
            accelerators.set_accelerator(task, accelerator_type, accelerator_count)


pipeline = build()

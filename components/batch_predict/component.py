"""KFP components of batch prediction: plan the shards, score one shard, join what they wrote."""

from typing import Optional

from kfp.dsl import HTML, Markdown, Output

from components.images import project_component


@project_component
def plan_batch_prediction(
    data: str,
    output_uri: str,
    stage: Optional[str] = None,
    model_name: Optional[str] = None,
    model_dir: Optional[str] = None,
    stages_root: Optional[str] = None,
    split: str = "test",
    batch_size: int = 64,
    score_threshold: float = 0.0,
    top_k: int = 0,
    prediction_options: Optional[dict] = None,
    images_per_shard: int = 5000,
    images_per_sec: Optional[float] = None,
    price_table: Optional[str] = None,
    pod_accelerator_type: str = "",
    pod_accelerator_count: int = 0,
    pipeline_root: str = "",
    serving_format: Optional[str] = None,
) -> list:
    """Lists the input, pins the model, cuts the shards and prices them (``manifest.json``).

    Every bad input fails here, before a shard asks for an accelerator.

    Args:
        data: the images: a folder or gs:// prefix, a CSV/JSONL list, a COCO file or a dataset folder.
        output_uri: where the predictions go (a stable location: a re-run reuses what is there).
        stage: score what this stage serves (demo, staging, prod); empty: model_dir.
        model_name: the served model name at the stage; empty: the one it serves.
        model_dir: a model folder or SavedModel folder, instead of a stage's model.
        stages_root: the stage store; empty for ``<pipeline root>/stages``.
        split: the split scored when data is a converted dataset.
        batch_size: images per model call.
        score_threshold: leave out predictions below this score; 0 keeps all the model returns.
        top_k: the most predictions per image; 0: the task's.
        prediction_options: the model's task's own settings (detection: coco, write COCO results,
            default true); empty: the task's defaults.
        images_per_shard: images one shard (pod) scores.
        images_per_sec: the rate the cost estimate assumes; empty: a recorded one.
        price_table: a YAML price table over the defaults (a path in the container).
        pod_accelerator_type: the accelerator each shard's pod requests (empty for CPU only).
        pod_accelerator_count: how many of it (0 for CPU only).
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        serving_format: the form scored: saved_model or a portable format of the model's export
            (litert, litert_int8, onnx, onnx_int8, openvino, openvino_int8); empty: what the stage
            serves it in.

    Returns:
        The shards, for the fan-out: ``{"index", "images"}`` each.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.batch_predict.config import PredictConfig
    from components.batch_predict.plan import describe_plan, plan
    from components.params import none_if_empty

    config = PredictConfig(
        data=data,
        output_uri=output_uri,
        stage=none_if_empty(stage),
        model_name=none_if_empty(model_name),
        model_dir=none_if_empty(model_dir),
        stages_root=none_if_empty(stages_root),
        split=split,
        batch_size=batch_size,
        score_threshold=score_threshold,
        top_k=top_k,
        prediction_options=prediction_options or {},
        images_per_shard=images_per_shard,
        images_per_sec=none_if_empty(images_per_sec),
        price_table=none_if_empty(price_table),
        serving_format=none_if_empty(serving_format),
    )
    result = plan(
        config,
        accelerator_type=pod_accelerator_type,
        accelerator_count=pod_accelerator_count,
        pipeline_root=pipeline_root,
    )
    for line in describe_plan(result):
        print(line, flush=True)
    return [{"index": s.index, "images": s.images} for s in result.shards]


@project_component
def predict_shard(
    output_uri: str,
    shard: dict,
    pod_accelerator_type: str = "",
    pod_accelerator_count: int = 0,
    price_table: Optional[str] = None,
    read_threads: int = 8,
) -> dict:
    """Scores one shard of the plan; succeeds with ``status: failed`` and the reason when it fails.

    A shard already scored for this plan is not scored again.

    Args:
        output_uri: where the plan and the predictions are.
        shard: the shard (``{"index", "images"}``, from the plan).
        pod_accelerator_type: the accelerator this pod requested (its price key); empty for CPU only.
        pod_accelerator_count: how many of it.
        price_table: a YAML price table over the defaults (a path in the container).
        read_threads: threads reading image bytes (they overlap gs:// latency).

    Returns:
        The shard's result (``ShardResult.to_dict``).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.batch_predict.score import score_shard
    from components.params import none_if_empty
    from components.progress import reporter

    index = int(shard["index"])  # kfp.local hands a dict's numbers over as floats
    result = score_shard(
        output_uri,
        index,
        accelerator_type=pod_accelerator_type,
        accelerator_count=pod_accelerator_count,
        price_table=none_if_empty(price_table),
        read_threads=read_threads,
        on_progress=reporter(f"shard {index}", "images", every_s=10.0),
    )
    print(
        f"shard {result.index}: {result.status}, {result.scored} of {result.images} images scored at "
        f"{result.images_per_sec:,.1f} images/s, {result.failed_images} unreadable"
        + (f"; {result.reason}" if result.reason else ""),
        flush=True,
    )
    return result.to_dict()


@project_component
def join_batch_prediction(
    output_uri: str,
    report: Output[Markdown],
    page: Output[HTML],
) -> dict:
    """Joins what the shards wrote: the summary, the COCO results, the report; names lost shards.

    It runs as the pipeline's exit task, after every shard, failed ones included.

    Args:
        output_uri: where the plan and the predictions are.
        report: the summary as Markdown (the Kubeflow UI).
        page: the summary as an HTML page.

    Returns:
        ``summary.json``'s content.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.batch_predict.join import join
    from components.batch_predict.page import write_reports

    joined = join(output_uri)
    md, html = write_reports(output_uri, joined)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(md)
    with open(page.path, "w", encoding="utf-8") as f:
        f.write(html)
    s = joined.summary
    lost = ", ".join(f["shard"] for f in s.failed_shards)
    print(
        f"{s.scored:,} of {s.images:,} images scored in {s.shards_ok} of {s.shards} shards"
        + (f"; incomplete, redo by running again: {lost}" if lost else ""),
        flush=True,
    )
    return s.to_dict()

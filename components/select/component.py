"""KFP component of the select step: over a pool of unlabelled images, the ones worth labelling next."""

from typing import Optional

from kfp.dsl import HTML, Markdown, Output

from components.images import project_component


@project_component
def select_images(
    data: str,
    output_uri: str,
    report: Output[Markdown],
    page: Output[HTML],
    stage: Optional[str] = None,
    model_name: Optional[str] = None,
    model_dir: Optional[str] = None,
    stages_root: Optional[str] = None,
    dataset: Optional[str] = None,
    count: int = 100,
    strategy: str = "auto",
    selection_options: Optional[dict] = None,
    diversity: str = "hash",
    near_bits: int = 4,
    seed: int = 0,
    batch_size: int = 64,
    read_threads: int = 8,
    pipeline_root: str = "",
) -> dict:
    """Scores the pool, leaves out what the dataset has, ranks, keeps the picks apart, writes them.

    Args:
        data: the pool of unlabelled images: a folder or gs:// prefix, a CSV/JSONL list, a COCO
            file, any source batch prediction reads.
        output_uri: where the pick goes (selection.json, images/, label_studio.json,
            cvat_coco.zip, yolo/, report.html).
        report: the pick as Markdown (the Kubeflow UI).
        page: the pick as an HTML page, the images drawn.
        stage: score with what this stage serves (demo, staging, prod); empty: model_dir.
        model_name: the served model name at the stage; empty: the one it serves.
        model_dir: a model folder or SavedModel folder, instead of a stage's model.
        stages_root: the stage store; empty for ``<pipeline root>/stages``.
        dataset: the labelled dataset folder: its images (by sha256) are never picked; empty: none.
        count: how many images to pick.
        strategy: auto (the task's first), random (the baseline), or a strategy of the model's
            task (classification: least_confidence, margin, entropy; detection: uncertainty,
            threshold, flip).
        selection_options: the model's task's own settings (detection: threshold, match_iou).
        diversity: hash, kcenter or none.
        near_bits: near-copies differ in at most this many of their perceptual hashes' 64 bits.
        seed: the random order's seed.
        batch_size: images per model call.
        read_threads: threads reading image bytes.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.

    Returns:
        The counts and where the files are: ``{"picked", "pool", "scored", "labelled", "strategy", "files"}``.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.params import none_if_empty
    from components.progress import reporter
    from components.select.config import SelectConfig
    from components.select.selection import describe, select

    config = SelectConfig(
        data=data,
        output_uri=output_uri,
        stage=none_if_empty(stage),
        model_name=none_if_empty(model_name),
        model_dir=none_if_empty(model_dir),
        stages_root=none_if_empty(stages_root),
        dataset=none_if_empty(dataset),
        count=count,
        strategy=strategy,
        selection_options=selection_options or {},
        diversity=diversity,
        near_bits=near_bits,
        seed=seed,
        batch_size=batch_size,
        read_threads=read_threads,
    )
    result = select(config, pipeline_root=pipeline_root, on_progress=reporter("select", "images", every_s=10.0))
    for line in describe(result):
        print(line, flush=True)
    from components.select.page import read_reports

    md, html = read_reports(output_uri)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(md)
    with open(page.path, "w", encoding="utf-8") as f:
        f.write(html)
    return {
        "picked": len(result.picks), "pool": result.pool, "scored": result.scored, "labelled": result.labelled,
        "strategy": result.strategy, "files": dict(result.files),
    }  # fmt: skip

"""KFP component: a blessed model's portable forms (LiteRT, ONNX; float32 and int8), checked and priced."""

from typing import Optional

from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from components.images import project_component


@project_component
def export_model(
    model: Input[Model],
    dataset: Input[Dataset],
    blessed: bool,
    metrics: Output[Metrics],
    report: Output[Markdown],
    export_formats: list = ["litert", "litert_int8", "onnx", "onnx_int8"],  # noqa: B006 (KFP reads a literal)
    export_tolerances: dict = {  # noqa: B006
        "litert": 0.5,
        "onnx": 0.5,
        "openvino": 1.0,
        "litert_int8": 2.0,
        "onnx_int8": 2.0,
        "openvino_int8": 2.0,
    },
    eval_images: int = 300,
    calibration_images: int = 200,
    batch_size: int = 64,
    timed_batches: int = 5,
    onnx_scheme: str = "qdq",
    seed: int = 0,
    accelerator: str = "cpu-8",
    price_table: Optional[str] = None,
) -> dict:
    """Converts the blessed model to each format, scores, times and prices it, and gates it.

    Args:
        model: the trained model folder; ``export/`` is written into it (``export.json`` last).
        dataset: the TFRecord dataset: test images scored, training images for int8 calibration.
        blessed: the evaluation's decision; a model that was not blessed gets no export.
        metrics: per format: ``<format>_images_per_dollar_vs_served``, ``<format>_<headline>``,
            ``<format>_passed`` (1/0).
        report: the format table (Markdown).
        export_formats: the formats converted (litert, litert_int8, onnx, onnx_int8, openvino,
            openvino_int8).
        export_tolerances: per format, the points of the headline metric it may lose against the
            float32 rebuild; a format without one is refused.
        eval_images: test images each format is scored on.
        calibration_images: training images int8 is calibrated on.
        batch_size: the timed batch (the benchmark's).
        timed_batches: timed calls per batch size.
        onnx_scheme: onnxruntime's int8 format (qdq, qoperator).
        seed: the calibration draw's seed.
        accelerator: the price key of what this runs on.
        price_table: a YAML price table over the defaults (a path in the container).

    Returns:
        ``passed`` (best images per dollar first), ``headline`` and ``rows`` (``export.json``).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.export.config import ExportConfig
    from components.export.run import export_step

    config = ExportConfig(
        export_formats=tuple(export_formats) if blessed else (),
        export_tolerances=export_tolerances,
        eval_images=eval_images,
        calibration_images=calibration_images,
        batch_size=batch_size,
        timed_batches=timed_batches,
        onnx_scheme=onnx_scheme,
        seed=seed,
        accelerator=accelerator,
        price_table=price_table,
    )
    record, scalars, table = export_step(model.path, dataset.path, config)
    for name, value in scalars.items():
        metrics.log_metric(name, value)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(table)
    return record

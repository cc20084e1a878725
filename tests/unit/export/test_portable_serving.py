"""A detector served in a portable format rebuilds what its decoding needs without the Keras model:
the anchors from its trained options equal the model's own generator's, and the encoded images
are letterboxed exactly as ``serving_default`` letterboxes them. The suite's tiny detector
(tests/detection_fixtures.py)."""

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_a_detector_s_portable_decoding_needs_only_its_options(tmp_path):
    import tensorflow as tf

    from components.export.run import trained_task
    from components.serving.portable import trained_options
    from tests.detection_fixtures import tiny_detection
    from trainer.tasks import get_task
    from trainer.tasks.detection.export import letterboxed
    from trainer.tasks.detection.input import read_detection_split
    from trainer.tfrecords import load_dataset_info

    assets = tiny_detection()
    trained = trained_task(assets["model"]).portable()
    trained.body(trained.load(f"{assets['model']}/model.keras"))  # binds the model's own anchors
    options = trained_options(assets["model"], "")
    served = get_task("detection", options).portable()  # what a stage's serving.json rebuilds
    size = served.options.image_size
    classes = load_dataset_info(assets["dataset"]).classes
    served.bind(classes, (size, size, 3))
    np.testing.assert_array_equal(served._bound["anchors"].numpy(), trained._bound["anchors"].numpy())

    encoded = [r["encoded"] for r in read_detection_split(load_dataset_info(assets["dataset"]), "test", 3)]
    images, context = served.serving_inputs(encoded, (size, size, 3))
    for image, meta, data in zip(images, context, encoded, strict=True):
        boxed, scale, height, width = letterboxed(tf.constant(data), size)
        np.testing.assert_array_equal(image, boxed.numpy())
        assert list(meta) == [float(scale), float(height), float(width)]
    np.testing.assert_array_equal(served.tensor_inputs(2, (size, size, 3)), [[1.0, size, size]] * 2)

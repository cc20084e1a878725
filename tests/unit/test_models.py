"""Model builders: the notebook's CNN layer for layer, the transfer classifier, errors."""

import numpy as np
import pytest

from trainer.tasks.classification.model import MODELS, ModelError, build_model


def test_mnist_cnn_is_the_notebooks_network():
    model = build_model("mnist_cnn", (28, 28, 1), 10)
    got = []
    for layer in model.layers:
        cfg = layer.get_config()
        kind = type(layer).__name__
        if kind == "Conv2D":
            got.append((kind, cfg["filters"], tuple(cfg["kernel_size"]), cfg["padding"], cfg["activation"]))
        elif kind == "MaxPooling2D":
            got.append((kind, tuple(cfg["pool_size"])))
        elif kind == "Dropout":
            got.append((kind, cfg["rate"]))
        elif kind == "Dense":
            got.append((kind, cfg["units"], cfg["activation"]))
        else:
            got.append((kind,))
    assert got == [
        ("Conv2D", 64, (2, 2), "same", "relu"),
        ("MaxPooling2D", (2, 2)),
        ("Dropout", 0.3),
        ("Conv2D", 32, (2, 2), "same", "relu"),
        ("MaxPooling2D", (2, 2)),
        ("Dropout", 0.3),
        ("Flatten",),
        ("Dense", 256, "relu"),
        ("Dropout", 0.5),
        ("Dense", 10, "softmax"),
    ]
    # The notebook's parameter count for 28x28x1 -> 10 classes.
    assert model.count_params() == 320 + 8224 + 1568 * 256 + 256 + 2570
    probs = model(np.zeros((2, 28, 28, 1), np.float32)).numpy()
    assert probs.shape == (2, 10) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def test_output_stays_float32_under_mixed_precision():
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_model("mnist_cnn", (28, 28, 1), 3)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert model.layers[0].compute_dtype == "bfloat16"
    assert model.outputs[0].dtype == "float32"


def test_transfer_classifier_takes_small_grayscale_images_without_weights():
    model = build_model("transfer_classifier", (28, 28, 1), 4, backbone="mobilenet_v3_small")
    assert model.input_shape == (None, 28, 28, 1)
    assert model.output_shape == (None, 4)
    # Only the new head trains by default.
    assert len(model.trainable_weights) == 2


def test_transfer_classifier_loads_local_weights(tmp_path):
    import keras

    base = keras.applications.MobileNetV3Small(include_top=False, weights=None, input_shape=(32, 32, 3), pooling="avg")
    base.set_weights([np.full(w.shape, 0.01, w.dtype) for w in base.get_weights()])
    path = tmp_path / "backbone.weights.h5"
    base.save_weights(path)
    model = build_model("transfer_classifier", (32, 32, 3), 2, backbone="mobilenet_v3_small", weights=str(path))
    inner = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    assert np.allclose(inner.get_weights()[0], 0.01)


@pytest.mark.parametrize(
    "name, shape, classes, kwargs, message",
    [
        ("resnet9000", (28, 28, 1), 10, {}, "unknown model 'resnet9000'"),
        ("mnist_cnn", (28, 28), 10, {}, "input_shape"),
        ("mnist_cnn", (28, 28, 1), 1, {}, "at least 2 classes"),
        ("mnist_cnn", (28, 28, 1), 10, {"backbone": "x"}, "unknown argument(s) backbone"),
        ("transfer_classifier", (28, 28, 1), 10, {"backbone": "vgg99"}, "unknown 'vgg99'"),
        ("transfer_classifier", (28, 28, 2), 10, {}, "1 or 3 channels"),
        ("transfer_classifier", (28, 28, 1), 10, {"weights": "/nonexistent/w.h5"}, "does not exist"),
    ],
)
def test_bad_requests_name_the_problem(name, shape, classes, kwargs, message):
    with pytest.raises(ModelError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_model(name, shape, classes, **kwargs)


def test_registry_lists_the_builders():
    assert {"mnist_cnn", "transfer_classifier"} <= set(MODELS)

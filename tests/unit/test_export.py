import numpy as np
import pytest

from tests.promote_models import CLASS_NAMES, IMAGE_SHAPE, digits, png_bytes, train_tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import tensorflow as tf

    from trainer.tasks.classification.export import export_saved_model

    model = train_tiny_model(steps=30)
    path = export_saved_model(model, str(tmp_path_factory.mktemp("export") / "sm"), CLASS_NAMES, IMAGE_SHAPE)
    return model, path, tf.saved_model.load(path)


def test_signatures_match_the_contract(exported):
    _, _, loaded = exported
    assert set(loaded.signatures) == {"serving_default", "serving_tensors"}
    _, kwargs = loaded.signatures["serving_default"].structured_input_signature
    assert list(kwargs) == ["image_bytes"]
    assert kwargs["image_bytes"].dtype.name == "string" and kwargs["image_bytes"].shape.as_list() == [None]
    _, kwargs = loaded.signatures["serving_tensors"].structured_input_signature
    assert kwargs["images"].shape.as_list() == [None, 8, 8, 1]
    for name in ("serving_default", "serving_tensors"):
        outputs = loaded.signatures[name].structured_outputs
        assert set(outputs) == {"probabilities", "classes"}
        assert outputs["probabilities"].dtype.name == "float32"
        assert outputs["classes"].dtype.name == "int64"


def test_bytes_prediction_equals_keras_prediction(exported):
    import tensorflow as tf

    model, _, loaded = exported
    images, _ = digits()
    batch = images[:12]
    encoded = tf.constant([png_bytes(im) for im in batch])
    served = loaded.signatures["serving_default"](image_bytes=encoded)
    expected = model.predict(batch[..., None].astype("float32") / 255.0, verbose=0)
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(served["classes"].numpy(), expected.argmax(-1))
    tensors = loaded.signatures["serving_tensors"](images=tf.constant(batch[..., None] / 255.0, tf.float32))
    np.testing.assert_allclose(tensors["probabilities"].numpy(), expected, atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "fmt"),
    [("L", "PNG"), ("RGB", "PNG"), ("RGBA", "PNG"), ("RGB", "JPEG"), ("L", "GIF"), ("L", "BMP")],
)
def test_every_format_and_channel_count_decodes(exported, mode, fmt):
    import tensorflow as tf

    _, _, loaded = exported
    image = digits()[0][3]
    reference = loaded.signatures["serving_default"](image_bytes=tf.constant([png_bytes(image)]))
    out = loaded.signatures["serving_default"](image_bytes=tf.constant([png_bytes(image, mode, fmt)]))
    tol = 0.05 if fmt == "JPEG" else 1e-3  # JPEG is lossy; the others give the same pixels
    np.testing.assert_allclose(out["probabilities"].numpy(), reference["probabilities"].numpy(), atol=tol)


def test_other_sizes_are_resized(exported):
    import tensorflow as tf

    _, _, loaded = exported
    big = np.kron(digits()[0][5], np.ones((4, 3), np.uint8))  # 32x24
    out = loaded.signatures["serving_default"](image_bytes=tf.constant([png_bytes(big, "RGB")]))
    assert out["probabilities"].shape == (1, 10)
    assert abs(float(out["probabilities"].numpy().sum()) - 1.0) < 1e-4


def test_undecodable_bytes_raise(exported):
    import tensorflow as tf

    _, _, loaded = exported
    with pytest.raises(tf.errors.InvalidArgumentError, match="image"):
        loaded.signatures["serving_default"](image_bytes=tf.constant([b"not an image"]))


def test_labels_are_in_assets(exported):
    from trainer.tasks.classification.export import read_class_names

    _, path, _ = exported
    assert read_class_names(path) == CLASS_NAMES


def test_bad_arguments_are_explained(exported, tmp_path):
    from trainer.tasks.classification.export import export_saved_model

    model, path, _ = exported
    with pytest.raises(ValueError, match="outputs 10 scores"):
        export_saved_model(model, str(tmp_path / "a"), ["a", "b"], IMAGE_SHAPE)
    with pytest.raises(ValueError, match="channels must be 1"):
        export_saved_model(model, str(tmp_path / "b"), CLASS_NAMES, (8, 8, 2))
    with pytest.raises(ValueError, match="already holds a SavedModel"):
        export_saved_model(model, path, CLASS_NAMES, IMAGE_SHAPE)

"""The TensorFlow side of lean-tpu-pipelines: data, models, training, evaluation, benchmarks.

Nothing here imports kfp. TensorFlow itself is imported lazily by the modules that need it.
Importing the package changes nothing in the environment: entry points call
``trainer.runtime.configure_tensorflow_env()`` before TensorFlow loads.
"""

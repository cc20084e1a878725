"""The TensorFlow side of lean-tpu-pipelines: data, models, training, evaluation, benchmarks.

Nothing here imports kfp. TensorFlow itself is imported lazily by the modules that need it.
"""

import os

# oneDNN kernels make CPU training about 2x faster here but TensorFlow leaves them off on AVX2-only
# CPUs, and the switch is read once, when TensorFlow is imported. Every entry point (component,
# CLI, tests) imports this package before TensorFlow, so setting it here covers them all;
# a value the user set wins.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

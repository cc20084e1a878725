"""Settings shared by every test: quiet TensorFlow, CPU only, no network."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

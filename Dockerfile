# The project image: TensorFlow + kfp + this package. Every pipeline step runs in it.
#   docker build --build-arg VARIANT=cpu|gpu|tpu|tpu-vm -t REGISTRY/lean-tpu-pipelines:TAG[-gpu|-tpu|-tpu-vm] .
#   (make images builds the four, with Docker or Podman)
# cpu: tensorflow (the wheel keras-hub's tensorflow-text needs); gpu: tensorflow[and-cuda] (CUDA libraries from pip, any recent driver);
# tpu: stock tensorflow, which talks to a TPU Node over gRPC (GKE's cloud-tpus.google.com path).
# For TPU VM node pools (google.com/tpu) build with VARIANT=tpu-vm: tensorflow-tpu + libtpu, and
# keras-hub without its tensorflow-text (which would bring a second TensorFlow; detection does not use it).
# BASE_IMAGE: python:3.11-slim-bookworm, or a base made locally whose PATH puts a Python virtualenv first
# (where no registry can be reached: a debootstrap Debian, PEP 668 leaves its system Python to apt).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG VARIANT=cpu
# Extra pip arguments: where no index can be reached from inside a build, a wheelhouse made on the
# host with `pip download` and mounted into the build (podman build -v WHEELHOUSE:/wheelhouse:ro
# --build-arg PIP_ARGS="--no-index --find-links /wheelhouse"; .ci/images does this).
ARG PIP_ARGS=""
# TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import: oneDNN kernels on (about 2x faster CPU
# training; TensorFlow leaves them off on AVX2-only CPUs). The entry points set the same values
# (trainer/runtime.py) for runs outside the image; a value given to the container wins over both.
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 TF_CPP_MIN_LOG_LEVEL=1 TF_ENABLE_ONEDNN_OPTS=1

# Fashion-MNIST for the demo run (the converter's built-in "fashion-mnist" source). The other
# built-in, "digits", ships inside the package (components/image_input/digits.npz): no scikit-learn here.
RUN apt-get update \
 && apt-get install -y --no-install-recommends dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/lean-tpu-pipelines
# Installed editable so the package finds manifests/ beside it (the kubernetes promotion target)
# and the demo notebook is at /opt/lean-tpu-pipelines/components/notebook/examples/gpu_vs_tpu.ipynb
# (pipelines.notebook.DEMO_NOTEBOOK).
COPY pyproject.toml README.md ./
COPY trainer trainer
COPY components components
COPY pipelines pipelines
COPY manifests manifests
RUN case "$VARIANT" in \
      cpu|gpu|tpu) pip install $PIP_ARGS -e ".[$VARIANT]" ;; \
      tpu-vm) pip install $PIP_ARGS -e ".[tpu-vm]" -f https://storage.googleapis.com/libtpu-releases/index.html \
              && pip install $PIP_ARGS --no-deps keras-hub==0.32.0 ;; \
      *) echo "unknown VARIANT=$VARIANT (cpu, gpu, tpu, tpu-vm)" >&2; exit 1 ;; \
    esac \
 && python -c "import trainer, kfp, tensorflow as tf; print('TensorFlow', tf.__version__)" \
 && python -c "import keras_hub, trainer.tasks.detection.model; print('keras-hub', keras_hub.__version__)" \
 && python -c "from components.image_input.sources import open_source; print('digits', len(open_source('digits').items))"

# Components run as the pipeline's user; nothing needs root at run time.
RUN useradd --uid 1000 --create-home runner
USER 1000

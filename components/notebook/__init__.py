"""The notebook step: a Jupyter notebook run with papermill as a pipeline step (on a TPU by default)."""

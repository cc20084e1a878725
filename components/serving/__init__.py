"""Serving services shared by several steps (promote, evaluate, benchmark, monitor).

- ``stages``: the stage registry (model versions, ``current.json``, ``history.jsonl``).
- ``server``: the local TensorFlow-Serving-compatible model server.
- ``checks``: the serving checks run after a deploy (each runnable alone).
- ``load``: a short, bounded load test.
- ``deploy``: a stage on Kubernetes (render, pin the version, apply, wait, roll back).
- ``targets``: where a stage serves (``local``, ``kubernetes``), by name: ``get_target(name)``.
- ``serve``: ``make serve``, the ``local`` target of every serving stage until Ctrl-C.

This package is not a step: it has no ``component.py``, and any step may import it.
"""

"""Serving services shared by several steps (promote, evaluate, benchmark, monitor).

- ``stages``: the stage registry, ``StageRegistry(root)`` (model versions, ``current.json``, ``history.jsonl``).
- ``server``: the local TensorFlow-Serving-compatible model server.
- ``checks``: the serving checks run after a deploy (each runnable alone).
- ``load``: a short, bounded load test.
- ``targets``: where a stage serves (``local``, ``kubernetes``, ``kserve``, and any ``LTP_EXTENSIONS``
  module's), by name: ``get_target(name, registry, serving_options)``; each target module holds its
  own mechanics (``targets.kubernetes``: render, pin the versions, apply, wait) and its typed options.
- ``serve``: ``make serve``, the ``local`` target of every serving stage until Ctrl-C.

This package is not a step: it has no ``component.py``, and any step may import it.
"""

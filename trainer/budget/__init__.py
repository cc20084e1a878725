"""Budgets of a training: what it may spend, what that buys, and what stops it.

- ``limits``: ``time_budget``, ``cost_budget``, ``patience`` and ``stop_at`` read once into one
  typed value (:class:`trainer.budget.limits.Limits`), no TensorFlow;
- ``layout``: the schedule a budget buys (the plan, laid out after the calibration) and its clock;
- ``pricing``: the price table and the price key of an accelerator (budgets, benchmarks, the grid);
- ``calibrate``: timing real steps once compiled, and the precision measured faster (Keras);
- ``stopping``: the callbacks that end a training early: the budget's guard, a rung's stop, early
  stopping (Keras);
- ``schedules``: the learning-rate schedule whose length the plan sets (Keras).

The modules are imported by name (``from trainer.budget import layout``): importing this package
imports none of them, so the TensorFlow-free ones stay free of Keras.
"""

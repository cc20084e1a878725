"""The parts of a training (``trainer.train.train`` is the loop over them), one job a module.

``run`` (the state passed along, ``state.json``) <- ``checks`` (before TensorFlow), ``setup``
(settings, the fit to the data, model, inputs), ``watch`` (validation, early stopping, the
guard, progress) <- ``budgeting`` (clock, calibration, plan) and ``summary`` (``training.json``,
the export, the model card).
"""

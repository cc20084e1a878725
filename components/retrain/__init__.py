"""The retrain step: whether a scheduled retraining has anything to do (docs/retraining.md)."""

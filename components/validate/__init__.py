"""The validate step: statistics and checks of a converted dataset before training (docs/validation.md)."""

"""The evaluate step hands its progress callback to a task that takes one, and scores any other silently."""

from components.evaluate.run import score


class _Quiet:
    def evaluate(self, saved_model_dir, dataset_dir, config, limit=None):
        return ("quiet", saved_model_dir, limit)


class _Reporting:
    def evaluate(self, saved_model_dir, dataset_dir, config, limit=None, on_progress=None):
        for done in (50, 100):
            on_progress(done, 100)
        return ("reporting", saved_model_dir, limit)


def test_a_task_that_takes_on_progress_reports_through_it():
    calls = []
    result = score(_Reporting(), "sm", "ds", None, 7, lambda done, total, **fields: calls.append((done, total)))
    assert result == ("reporting", "sm", 7) and calls == [(50, 100), (100, 100)]


def test_a_task_without_it_scores_silently():
    assert score(_Quiet(), "sm", "ds", None, None, lambda done, total: None) == ("quiet", "sm", None)
    assert score(_Quiet(), "sm", "ds", None) == ("quiet", "sm", None)

"""The evaluate step hands its progress and answers callbacks to a task that takes them; others score silently."""

import pytest

from components.evaluate.run import ReferenceAnswers, score


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


class _Answering:
    def evaluate(self, saved_model_dir, dataset_dir, config, limit=None, on_progress=None, on_answers=None):
        for start in (0, 2, 4):
            on_answers(
                [b"img%d" % i for i in range(start, start + 2)], [{"probabilities": [i]} for i in (start, start + 1)]
            )
        return ("answering", on_progress)


def test_a_task_that_takes_on_answers_hands_them_and_the_first_images_are_kept():
    kept = ReferenceAnswers(limit=3)
    assert score(_Answering(), "sm", "ds", None, None, None, kept.take) == ("answering", None)
    assert kept.images == [b"img0", b"img1", b"img2"] and kept.answers == [{"probabilities": [i]} for i in range(3)]
    assert score(_Quiet(), "sm", "ds", None, None, None, kept.take) == ("quiet", "sm", None)  # a task without it


def test_answers_that_do_not_match_their_images_are_refused():
    with pytest.raises(ValueError, match="1 answers for 2 images"):
        ReferenceAnswers().take([b"a", b"b"], [{}])

"""Runs started from the app go to their own process (services/background.py): a real spawned process
on the real study, progress and the result back, a cancel honoured, an error shown, the lease kept."""

from __future__ import annotations

import os
import threading

import pytest

from workbench.study import StudyError


def test_a_detached_run_labels_everything_in_another_process(small_study):
    seen = []
    summary = small_study.start_run_detached("dev", on_progress=lambda p: seen.append((p.done, p.total, os.getpid())))
    assert summary.status == "finished" and summary.calls_made == summary.calls_total == 160
    assert seen and seen[-1][:2] == (160, 160)  # the child's progress arrived here, the last one included
    run = small_study.run_info(summary.run_id)
    assert run.status == "finished" and run.lease_holder is None  # the child held and released the lease
    assert small_study.predictions(summary.run_id)["value"].notna().all()
    same = small_study.start_run("dev")  # the same answers as a run in this process (the call cache agrees)
    assert same.calls_reused == 160


def test_a_detached_run_can_be_cancelled(small_study):
    cancel = threading.Event()
    cancel.set()  # cancelled before the child starts: it must not label anything
    summary = small_study.start_run_detached("dev", cancel=cancel)
    assert summary.status == "cancelled" and summary.calls_made == 0


def test_an_error_in_the_child_is_raised_here(small_study):
    with pytest.raises(StudyError, match="unknown label 'no_such_label'"):
        small_study.start_run_detached("dev", labels=["no_such_label"])

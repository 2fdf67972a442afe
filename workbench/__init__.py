"""Clinician-in-the-loop prompt-optimisation workbench for LLM labelling of chest X-ray reports.

`from workbench import score` scores generated reports with a frozen bundle (Ran Score).
"""

__version__ = "0.1.0"


def score(*args, **kwargs):
    """Score generated reports against reference reports with a bundle; see workbench.scoring.score."""
    from workbench.scoring import score as _score

    return _score(*args, **kwargs)


def robustness(*args, **kwargs):
    """Paraphrase/significant-change robustness of a bundle; see workbench.scoring.robustness."""
    from workbench.scoring import robustness as _robustness

    return _robustness(*args, **kwargs)

"""Clinician-in-the-loop prompt-optimisation workbench for LLM labelling of chest X-ray reports.

`from workbench import score` scores generated reports with a frozen bundle (Ran Score);
`from workbench import robustness` checks a bundle on paraphrases and significant changes.
Both are workbench.scoring's own functions (real signatures and help), imported on first use so that
`import workbench` stays light. See docs/python-api.md.
"""

__version__ = "0.1.0"

_SCORING = ("score", "robustness", "ScoreResult", "GeneratorScore", "RanScore", "RobustnessResult")
__all__ = list(_SCORING)


def __getattr__(name: str):
    """workbench.score and friends, from workbench.scoring on first use."""
    if name in _SCORING:
        from workbench import scoring

        return getattr(scoring, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")

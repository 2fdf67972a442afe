"""The Disagreements page on a real model's replayed replies (issue 33): the JSON recipe's answers with their
made-up evidence, and each case's raw reply, as the engineer sees them (tests/test_real_replies.py has the rest)."""

from __future__ import annotations

import pytest
from fake_llm_server import running_server
from real_replies import Replay, build_study, recorded
from test_app_pages import all_text, open_page

from workbench.ui import state


@pytest.fixture(scope="module")
def replayed_study(tmp_path_factory):
    """The replay study labelled by the replayed model with json_mode and the schema."""
    replay = Replay()
    with running_server(body_fn=replay, owned_by="me") as srv:
        study, _ = build_study(tmp_path_factory.mktemp("json"), srv.url, "json")
    assert not replay.missing
    return study


def test_disagreements_show_a_real_reply_and_its_made_up_evidence(replayed_study):
    at = open_page(replayed_study, "disagreements")
    pick = at.session_state[state.DIS_PICK]
    replies = {c["choices"][0]["message"]["content"] for c in recorded().values()}
    shown = [c.value for c in at.code]
    assert any(code in replies for code in shown), "the case's raw reply, as the model wrote it"
    text = all_text(at)
    assert pick[0] in text or pick[0] in str(at.session_state[state.DIS_PICK])
    assert "short summary of the report" in text  # the evidence the model copied from the prompt, shown as such

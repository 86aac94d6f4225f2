"""A server address in a message never carries its password, whatever the
password holds (``@``, ``/``, ``:``): the old pattern stopped at the first
``@`` or ``/`` and printed the rest."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.remote_profile import RemoteSettings
from cleveragents.infrastructure.acms.milvus_common import redact_userinfo

secret = st.text(st.characters(codec="ascii", exclude_characters="\r\n"), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(user=st.from_regex(r"[a-z]{1,8}", fullmatch=True), password=secret)
def test_no_part_of_a_password_survives(user: str, password: str) -> None:
    uri = f"http://{user}:{password}@127.0.0.1:19530"
    shown = redact_userinfo(uri)
    assert shown == "http://***@127.0.0.1:19530"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("http://root:p@ss@127.0.0.1:19631", "http://***@127.0.0.1:19631"),
        ("http://root:pa/ss@127.0.0.1:1", "http://***@127.0.0.1:1"),
        ("http://127.0.0.1:19530", "http://127.0.0.1:19530"),
        ("/var/lib/milvus.db", "/var/lib/milvus.db"),
    ],
)
def test_the_reported_cases(uri: str, shown: str) -> None:
    assert redact_userinfo(uri) == shown


def test_the_settings_log_line_hides_it_too() -> None:
    settings_ = RemoteSettings(
        milvus_uri="http://root:pa/ss@127.0.0.1:1",
        sparql_query_url="http://h/q",
        sparql_update_url="http://h/u",
        sparql_store_url="http://h/s",
    )
    assert settings_.public()["milvus_uri"] == "http://***@127.0.0.1:1"

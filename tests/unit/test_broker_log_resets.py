"""Which lines of pulsar-lite's log make the embedded broker restart: a connection dropped on
an I/O error (docs/backend.md, "A reset connection leaves its consumers behind"), and no
other. The lines are pulsar-lite 0.2.0's, copied from a real run's log."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.backend.embedded import reset_peers

RESET = (
    b"[2026-11-27T21:06:45Z ERROR pulsar_lite] Connection error from 127.0.0.1:54694:"
    b" Connection reset by peer (os error 104)\n"
)
# a refused subscribe: the broker closes the connection, but removes its consumers
REFUSED = (
    b"[2026-11-27T21:06:45Z ERROR pulsar_lite::broker::service::server_cnx] Error handling"
    b" command: Consumer 5 already exists\n"
    b"[2026-11-27T21:06:45Z ERROR pulsar_lite] Connection error from 127.0.0.1:54696:"
    b" Consumer 5 already exists\n"
)


def test_a_reset_connection_is_named() -> None:
    assert reset_peers(RESET) == ["127.0.0.1:54694"]


def test_a_refused_subscribe_is_not_a_reset() -> None:
    assert reset_peers(REFUSED) == []


def test_several_resets_in_log_order() -> None:
    second = RESET.replace(b"54694", b"54700")
    assert reset_peers(REFUSED + RESET + REFUSED + second) == [
        "127.0.0.1:54694",
        "127.0.0.1:54700",
    ]


@given(st.binary(max_size=2000), st.binary(max_size=2000))
def test_any_log_text_around_a_reset_finds_it_and_never_fails(before: bytes, after: bytes) -> None:
    """Whatever else the log holds (it is the broker's, but its text is not ours to trust),
    a reset line on a line of its own is found, and nothing raises."""
    found = reset_peers(before + b"\n" + RESET + after)
    assert "127.0.0.1:54694" in found
    assert isinstance(reset_peers(before + after), list)

"""Parity's record digests: equal records agree, and any change of key, value, header
name, header value, header order or null-ness changes the content digest and the
digest of the part that changed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.tools.parity.fingerprint import fingerprint

keys = st.one_of(st.none(), st.binary(max_size=12))
values = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=4
)


@given(keys, values, headers)
def test_same_record_same_digests(key, value, hdrs) -> None:
    assert fingerprint(key, value, hdrs) == fingerprint(key, value, list(hdrs))


@given(keys, values, headers, keys, values, headers)
def test_different_records_differ_in_content(k1, v1, h1, k2, v2, h2) -> None:
    a, b = fingerprint(k1, v1, h1), fingerprint(k2, v2, h2)
    if (k1, v1, h1) != (k2, v2, h2):
        assert a[3] != b[3]
        changed = [k1 != k2, v1 != v2, h1 != h2]
        digests = [a[0] != b[0], a[1] != b[1], a[2] != b[2]]
        # a part that differs has a differing digest (CRC-32 collisions aside,
        # which hypothesis' small inputs do not reach)
        assert all(d for c, d in zip(changed, digests, strict=True) if c)


def test_boundaries_and_nulls_are_not_confused() -> None:
    assert fingerprint(b"ab", b"c", [])[3] != fingerprint(b"a", b"bc", [])[3]
    assert fingerprint(None, b"", [])[3] != fingerprint(b"", b"", [])[3]
    assert fingerprint(b"k", None, [])[3] != fingerprint(b"k", b"", [])[3]
    assert (
        fingerprint(b"k", b"v", [("a", b"1"), ("b", b"2")])[3]
        != fingerprint(b"k", b"v", [("b", b"2"), ("a", b"1")])[3]
    )

"""The Kafka codecs of the data path are compiled when the listener starts
(`protocol.compile_codecs`), not by the first client's request: a first Fetch after a
restart paid some 0.1-0.3 s for compiling its response's codec (issue 32, py-spy)."""

from __future__ import annotations

from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol import SUPPORTED, compile_codecs, encode_response

FETCH = 1


def test_after_compile_codecs_a_first_fetch_compiles_nothing() -> None:
    protocol._compiled.cache_clear()
    assert compile_codecs() > 0
    compiled = protocol._compiled.cache_info().misses
    low, high = SUPPORTED[FETCH]
    for version in range(low, high + 1):
        body = {"responses": []} if version < 13 else {"responses": [], "session_id": 0}
        encode_response(FETCH, version, 7, body)
    assert protocol._compiled.cache_info().misses == compiled


def test_every_data_path_api_is_compiled_in_every_version() -> None:
    protocol._compiled.cache_clear()
    compile_codecs()
    tables = protocol._messages()
    for api_key in protocol.DATA_PATH_APIS:
        low, high = SUPPORTED[api_key]
        for version in range(low, high + 1):
            for table in (tables.REQUESTS, tables.RESPONSES):
                misses = protocol._compiled.cache_info().misses
                protocol._compiled(table[(api_key, version)])
                assert protocol._compiled.cache_info().misses == misses, (api_key, version)

"""Tests of the Kafka codec: spec-derived round trips, hand-checked bytes, fuzzing, freshness.

Round trips prove the codec agrees with itself for every generated version; hand-checked bytes
and aiokafka's independently written structs prove it agrees with the protocol; the fuzz tests
prove that hostile input only ever raises KafkaDecodeError.
"""

from __future__ import annotations

import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pulsar_gateway.kafka_codec.protocol as kp
from harness.hypothesis_budget import examples
from pulsar_gateway.kafka_codec.protocol import (
    API_NAMES,
    SUPPORTED,
    KafkaDecodeError,
    KafkaEncodeError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    generator,
    messages,
    parse_request_header,
    vocabulary,
)
from pulsar_gateway.kafka_codec.protocol.wire_types import ZERO_UUID

CASES = sorted(
    [(key, version, False) for key, version in messages.REQUESTS]
    + [(key, version, True) for key, version in messages.RESPONSES]
)
CASE_IDS = [f"{API_NAMES[k]}{'Response' if r else 'Request'}-v{v}" for k, v, r in CASES]

REQUIRED_APIS = (
    "ApiVersions Metadata Produce Fetch ListOffsets CreateTopics DeleteTopics CreatePartitions "
    "DescribeConfigs DescribeCluster FindCoordinator JoinGroup SyncGroup Heartbeat LeaveGroup "
    "OffsetCommit OffsetFetch ListGroups DescribeGroups DeleteGroups OffsetDelete InitProducerId "
    "SaslHandshake SaslAuthenticate DescribeProducers DeleteRecords OffsetForLeaderEpoch "
    "AlterConfigs IncrementalAlterConfigs"
).split()

INT_RANGES = {
    "_I8": (-(2**7), 2**7 - 1),
    "_I16": (-(2**15), 2**15 - 1),
    "_I32": (-(2**31), 2**31 - 1),
    "_I64": (-(2**63), 2**63 - 1),
    "_U16": (0, 2**16 - 1),
    "_U32": (0, 2**32 - 1),
}


def definition(key: int, version: int, response: bool) -> vocabulary.KafkaStruct:
    return (messages.RESPONSES if response else messages.REQUESTS)[(key, version)]


def encode(key: int, version: int, response: bool, body: dict[str, Any]) -> bytes:
    """The full message, size prefix included."""
    if response:
        return encode_response(key, version, 7, body)
    return encode_request(key, version, 7, "tester", body)


def decode(key: int, version: int, response: bool, message: bytes) -> dict[str, Any]:
    """Decode what ``encode`` wrote, the way the server and the client-side gateway would."""
    frame = memoryview(message)[4:]
    if response:
        return decode_response(key, version, frame)
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (key, version, 7)
    assert header.client_id == "tester"
    return decode_request(key, version, frame[header.body_offset :])


def body_of(key: int, version: int, response: bool, message: bytes) -> memoryview:
    """The body bytes of an encoded message (after the size prefix and the header)."""
    frame = memoryview(message)[4:]
    if not response:
        return frame[parse_request_header(frame).body_offset :]
    flexible = kp._is_flexible(messages.RESPONSE_FLEXIBLE_FROM, key, version) and key != 18
    return frame[5:] if flexible else frame[4:]


# --------------------------------------------------------------------------------------------
# Values derived from the schema
# --------------------------------------------------------------------------------------------


def sample(con: Any, nulls: bool) -> Any:
    """A filled-in value: ``nulls`` puts null wherever allowed, extremes and no tagged fields;
    otherwise every field is set, two elements per array, all tagged fields present."""
    if isinstance(con, vocabulary.KafkaStruct):
        value = {name: sample(sub, nulls) for name, sub, _ in con.fields}
        if not nulls:
            value.update({name: sample(sub, False) for name, sub in con.tagged.values()})
        return value
    if isinstance(con, vocabulary.NullableStructField):
        return None if nulls else sample(con.subcon, False)
    if isinstance(con, vocabulary.ArrayField):
        if nulls:
            return None if con.nullable else [sample(con.subcon, True)]
        return [sample(con.subcon, False), sample(con.subcon, False)]
    if isinstance(con, vocabulary.StringField):
        return None if nulls and con.nullable else "topic-é"
    if isinstance(con, vocabulary.BytesField):
        return None if nulls and con.nullable else b"\x00\x01\xfe\xff"
    if isinstance(con, vocabulary.UuidField):
        return uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    if isinstance(con, vocabulary.BoolField):
        return not nulls
    if isinstance(con, vocabulary.Fixed):
        if con.fmt_name == "_F64":
            return -1.5 if nulls else 2.25
        low, high = INT_RANGES[con.fmt_name]
        return low if nulls else high
    raise TypeError(con)


def defaults_of(con: vocabulary.KafkaStruct) -> dict[str, Any]:
    """What encoding an empty dict decodes to: every field at its default, no tagged fields."""
    result = {}
    for name, sub, default in con.fields:
        if isinstance(sub, vocabulary.KafkaStruct):
            result[name] = defaults_of(sub)
        else:
            result[name] = default
    return result


_STRATEGIES: dict[tuple[int, bool], st.SearchStrategy[Any]] = {}


def strategy(con: Any, nullable: bool = True) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for any valid value of a construct (cached per construct).

    ``nullable=False`` leaves out null: tagged fields are only written when not None.
    """
    cached = _STRATEGIES.get((id(con), nullable))
    if cached is None:
        cached = _STRATEGIES[(id(con), nullable)] = _strategy(con, nullable)
    return cached


def _strategy(con: Any, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(con, vocabulary.KafkaStruct):
        return st.fixed_dictionaries(
            {name: strategy(sub) for name, sub, _ in con.fields},
            optional={name: strategy(sub, False) for name, sub in con.tagged.values()},
        )
    if isinstance(con, vocabulary.NullableStructField):
        return st.none() | strategy(con.subcon) if nullable else strategy(con.subcon)
    if isinstance(con, vocabulary.ArrayField):
        items = st.lists(strategy(con.subcon), max_size=3)
        return st.none() | items if con.nullable and nullable else items
    if isinstance(con, vocabulary.StringField):
        text = st.text(max_size=12)
        return st.none() | text if con.nullable and nullable else text
    if isinstance(con, vocabulary.BytesField):
        blob = st.binary(max_size=12)
        return st.none() | blob if con.nullable and nullable else blob
    if isinstance(con, vocabulary.UuidField):
        return st.uuids()
    if isinstance(con, vocabulary.BoolField):
        return st.booleans()
    if isinstance(con, vocabulary.Fixed):
        if con.fmt_name == "_F64":
            return st.floats(allow_nan=False)
        return st.integers(*INT_RANGES[con.fmt_name])
    raise TypeError(con)


# --------------------------------------------------------------------------------------------
# The tables
# --------------------------------------------------------------------------------------------


def test_supported_covers_the_apis_the_gateway_needs() -> None:
    names = set(API_NAMES.values())
    assert not [name for name in REQUIRED_APIS if name not in names]
    assert SUPPORTED[0] == (0, 11) and SUPPORTED[18] == (0, 4) and SUPPORTED[1] == (0, 17)
    assert set(SUPPORTED) == set(API_NAMES)
    assert {26, 68} <= messages.LATEST_VERSION_UNSTABLE <= set(SUPPORTED)  # EndTxn v5, KIP-848
    for key, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            assert (key, version) in messages.REQUESTS and (key, version) in messages.RESPONSES


def test_snake_case_names() -> None:
    assert generator.snake("TopicId") == "topic_id"
    assert generator.snake("ApiKeys") == "api_keys"
    assert generator.snake("KRaftVersionFeature") == "k_raft_version_feature"
    assert generator.snake("isKRaftController") == "is_k_raft_controller"
    assert generator.java_int("0x7fffffff") == 2**31 - 1 and generator.java_int("-1") == -1


# --------------------------------------------------------------------------------------------
# Round trips: every API, every version, both directions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version", "response"), CASES, ids=CASE_IDS)
def test_round_trip_every_version(key: int, version: int, response: bool) -> None:
    con = definition(key, version, response)
    for nulls in (False, True):
        value = sample(con, nulls)
        message = encode(key, version, response, value)
        assert struct.unpack_from(">i", message)[0] == len(message) - 4
        assert decode(key, version, response, message) == value
        # the uncompiled construct agrees with the compiled one, both ways
        body = body_of(key, version, response, message)
        assert con.build(value) == bytes(body)
        assert con.parse(body) == value
    assert decode(key, version, response, encode(key, version, response, {})) == defaults_of(con)


SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


# Every (API, version, direction) is round-tripped by test_round_trip_every_version, with and
# without nulls, and the APIs every client sends get 500 more random values below: 1,000
# random values here (two or so per case) over the 562 cases, at half the time of 2,000.
@settings(max_examples=examples(1000), deadline=None, suppress_health_check=SLOW_OK)
@given(st.data())
def test_round_trip_property(data: st.DataObject) -> None:
    key, version, response = data.draw(st.sampled_from(CASES))
    value = data.draw(strategy(definition(key, version, response)))
    message = encode(key, version, response, value)
    assert decode(key, version, response, message) == value
    # decoding then re-encoding reproduces the bytes (tagged fields only when present)
    assert encode(key, version, response, decode(key, version, response, message)) == message


@settings(max_examples=examples(500), deadline=None, suppress_health_check=SLOW_OK)
@given(st.data())
def test_round_trip_property_hot_apis(data: st.DataObject) -> None:
    """More examples for what every client sends: Produce, Fetch, Metadata, ApiVersions."""
    key = data.draw(st.sampled_from([0, 1, 3, 18]))
    version = data.draw(st.integers(*SUPPORTED[key]))
    response = data.draw(st.booleans())
    value = data.draw(strategy(definition(key, version, response)))
    assert decode(key, version, response, encode(key, version, response, value)) == value


def test_records_decode_to_a_view_of_the_input() -> None:
    records = bytes(range(256)) * 4
    body = {"acks": 1, "topic_data": [{"name": "t", "partition_data": [{"records": records}]}]}
    frame = bytearray(encode_request(0, 9, 1, None, body)[4:])
    header = parse_request_header(memoryview(frame))
    decoded = decode_request(0, 9, memoryview(frame)[header.body_offset :])
    view = decoded["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(view, memoryview) and view == records
    frame[-4] ^= 0xFF  # the view shares memory with the frame: no copy was made
    assert view[-1] == records[-1] ^ 0xFF
    for blob in (bytearray(b"ab"), memoryview(b"ab"), None):
        body["topic_data"][0]["partition_data"][0]["records"] = blob
        out = decode(0, 3, False, encode(0, 3, False, body))
        assert out["topic_data"][0]["partition_data"][0]["records"] == blob


def test_missing_fields_take_spec_defaults() -> None:
    decoded = decode(3, 9, False, encode(3, 9, False, {"topics": [{"name": "t"}]}))
    assert decoded["allow_auto_topic_creation"] is True  # "default": "true"
    decoded = decode(1, 12, True, encode(1, 12, True, {"responses": [{"partitions": [{}]}]}))
    partition = decoded["responses"][0]["partitions"][0]
    assert partition["last_stable_offset"] == -1 and partition["preferred_read_replica"] == -1
    assert partition["records"] is None and partition["aborted_transactions"] is None
    assert decode(1, 13, True, encode(1, 13, True, {"responses": [{}]}))["responses"] == [
        {"topic_id": uuid.UUID(int=0), "partitions": []}
    ]
    # fields of other versions are ignored; None in a non-nullable field means the default
    decoded = decode(3, 0, False, encode(3, 0, False, {"topics": None, "topic_id": 5}))
    assert decoded == {"topics": []}


def test_zero_topic_ids_decode_to_one_shared_object() -> None:
    """A client that knows topics by name sends the zero id with each (Metadata v10+): one
    shared UUID, not one object per topic of a 99,999-topic request (api key 3); other ids
    decode."""
    some = uuid.uuid4()
    topics = [{"name": "a", "topic_id": uuid.UUID(int=0)}, {"name": "b", "topic_id": some}]
    frame = memoryview(kp.encode_request(3, 12, 1, "c", {"topics": topics}))[4:]
    body = decode_request(3, 12, frame[parse_request_header(frame).body_offset :])
    first, second = body["topics"]
    assert first["topic_id"] is ZERO_UUID
    assert second["topic_id"] == some


def test_trailing_bytes_are_ignored() -> None:
    """Kafka ignores bytes after the body; so do we."""
    assert decode_request(12, 0, h("0001 67 00000001 0001 6d") + b"junk") == {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
    }


def test_tagged_fields_only_when_given() -> None:
    bare = encode_response(18, 3, 1, {"finalized_features_epoch": None})
    assert bare.endswith(b"\x00\x00\x00\x00\x00")  # throttle_time_ms, then no tagged fields
    assert "finalized_features_epoch" not in decode_response(18, 3, bare[4:])
    tagged = encode_response(18, 3, 1, {"finalized_features_epoch": 5, "zk_migration_ready": False})
    decoded = decode_response(18, 3, tagged[4:])
    assert decoded["finalized_features_epoch"] == 5 and decoded["zk_migration_ready"] is False


def test_unknown_tags_are_skipped() -> None:
    message = encode_response(18, 3, 1, {"finalized_features_epoch": 9})
    body = bytearray(message[8:])
    assert body[-11:] == b"\x01\x01\x08" + struct.pack(">q", 9)
    # replace the tagged section: unknown tag 0x7f (3 bytes), known tag 1, unknown tag 300
    body[-11:] = (
        b"\x03\x7f\x03abc\x01\x08" + struct.pack(">q", 9) + b"\xac\x02\x00"  # 300 as a varint
    )
    decoded = decode_response(18, 3, struct.pack(">i", 1) + bytes(body))
    assert decoded["finalized_features_epoch"] == 9 and "abc" not in str(decoded)


def test_encode_errors_name_the_field() -> None:
    body = {"responses": [{"name": "t", "partition_responses": [{"error_code": "bad"}]}]}
    with pytest.raises(KafkaEncodeError, match=r"responses\[0\]\.partition_responses\[0\]"):
        encode_response(0, 9, 1, body)
    with pytest.raises(KafkaEncodeError, match="records"):
        encode_request(0, 9, 1, None, {"topic_data": [{"partition_data": [{"records": "x"}]}]})
    with pytest.raises(KafkaEncodeError, match="no response definition"):
        encode_response(18, 99, 1, {})
    with pytest.raises(KafkaEncodeError, match="32767"):
        encode_response(3, 1, 1, {"brokers": [{"host": "h" * 40000}]})


# --------------------------------------------------------------------------------------------
# Bytes checked by hand against the Kafka protocol guide
# --------------------------------------------------------------------------------------------


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_api_versions_v0_request_bytes() -> None:
    #               size     key  ver  corr     client "kcat"
    expected = h("0000000e 0012 0000 00000001 0004 6b636174")
    assert encode_request(18, 0, 1, "kcat", {}) == expected
    header = parse_request_header(memoryview(expected)[4:])
    assert header == kp.RequestHeader(18, 0, 1, "kcat", 14)
    assert decode_request(18, 0, memoryview(expected)[4 + header.body_offset :]) == {}


def test_api_versions_v0_response_bytes() -> None:
    body = {
        "api_keys": [
            {"api_key": 0, "min_version": 0, "max_version": 11},
            {"api_key": 18, "min_version": 0, "max_version": 4},
        ]
    }
    #            size     corr     err  count    key  min  max   key  min  max
    expected = h("00000016 00000005 0000 00000002 0000 0000 000b  0012 0000 0004")
    assert encode_response(18, 0, 5, body) == expected
    assert decode_response(18, 0, expected[4:]) == {"error_code": 0, **body}


def test_api_versions_v3_response_has_header_v0_and_no_tagged_fields() -> None:
    """librdkafka 2.0.2 (kcat) reads this exact shape; extra tagged fields break it."""
    body = {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    # size, corr (header v0: no tagged section), err, compact count 1+1, key/min/max, element
    # tags, throttle_time_ms, body tags
    expected = h("00000013 00000009 0000 02 0012 0000 0004 00 00000000 00")
    assert encode_response(18, 3, 9, body) == expected
    with_epoch = encode_response(18, 3, 9, {**body, "finalized_features_epoch": 5})
    assert with_epoch == h("0000001d 00000009 0000 02 0012 0000 0004 00 00000000") + h(
        "01 01 08 0000000000000005"  # one tagged field: tag 1, 8 bytes, int64 5
    )


def test_metadata_v1_request_bytes() -> None:
    #                    size     key  ver  corr     client  topics: 1, "foo"
    assert encode_request(3, 1, 42, None, {"topics": [{"name": "foo"}]}) == h(
        "00000013 0003 0001 0000002a ffff 00000001 0003 666f6f"
    )
    # v1+: a null topic array asks for every topic
    assert encode_request(3, 1, 42, None, {"topics": None})[-4:] == h("ffffffff")
    assert decode_request(3, 1, h("ffffffff")) == {"topics": None}
    assert decode_request(3, 1, h("00000001 0003 666f6f")) == {"topics": [{"name": "foo"}]}


def test_metadata_v9_request_flexible_header_bytes() -> None:
    message = encode_request(3, 9, 42, "cli", {"topics": [{"name": "foo"}]})
    header = h("0003 0009 0000002a 0003 636c69 00")  # header v2: client id NOT compact, then tags
    # topics: compact count 1+1, compact name 3+1 "foo", element tags; auto-create (default
    # true); include cluster ops; include topic ops; body tags
    body = h("02 04 666f6f 00 01 00 00 00")
    assert message == struct.pack(">i", len(header) + len(body)) + header + body
    parsed = parse_request_header(memoryview(message)[4:])
    assert parsed == kp.RequestHeader(3, 9, 42, "cli", len(header))


def test_produce_v9_request_bytes() -> None:
    body = {
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}],
    }
    expected_body = h(
        "00 ffff 00007530"  # transactional id null (compact), acks -1, timeout 30000
        "02 02 74"  # one topic, name "t"
        "02 00000000 04 616263 00"  # one partition: index 0, records "abc", tags
        "00 00"  # topic tags, body tags
    )
    header = h("0000 0009 00000001 ffff 00")  # header v2: null client id, no tags
    message = encode_request(0, 9, 1, None, body)
    assert message == struct.pack(">i", len(header) + len(expected_body)) + header + expected_body
    assert decode_request(0, 9, expected_body) == {"transactional_id": None, **body}


def test_flexible_response_header_v1_bytes() -> None:
    # Heartbeat v4 response: size, corr, header tags, throttle, error, body tags
    assert encode_response(12, 4, 3, {"error_code": 27}) == h(
        "0000000c 00000003 00 00000000 001b 00"
    )
    assert decode_response(12, 4, h("00000003 00 00000000 001b 00")) == {
        "throttle_time_ms": 0,
        "error_code": 27,
    }


def test_nullable_struct_marker_bytes() -> None:
    """A nullable struct is an int8 marker (-1 null, 1 present) before its fields."""
    null = encode_request(75, 0, 1, None, {"topics": [], "response_partition_limit": 5})
    assert null.endswith(h("01 00000005 ff 00"))
    present = encode_request(75, 0, 1, None, {"cursor": {"topic_name": "t", "partition_index": 2}})
    # no topics, partition limit default 2000, marker 1, topic "t", partition 2, struct tags
    assert present.endswith(h("01 000007d0 01 02 74 00000002 00 00"))


def test_unknown_api_and_version_headers_still_parse() -> None:
    frame = h("03e7 0001 00000004 0002 6869 99 99")  # api key 999
    assert parse_request_header(frame) == kp.RequestHeader(999, 1, 4, "hi", 12)
    frame = h("0012 0063 00000004 ffff 00 00")  # ApiVersions v99: v1 layout, no tags read
    assert parse_request_header(frame) == kp.RequestHeader(18, 99, 4, None, 10)
    with pytest.raises(KafkaDecodeError, match="no request definition"):
        decode_request(18, 99, b"")


@settings(max_examples=examples(200), deadline=None)
@given(
    key=st.sampled_from(sorted(SUPPORTED)),
    version=st.integers(0, 20),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | st.text(max_size=20),
)
def test_struct_header_parser_matches_the_generated_header(
    key: int, version: int, correlation_id: int, client_id: str | None
) -> None:
    """The hand-written struct parser reads what the spec's RequestHeader construct writes."""
    flexible = kp._is_flexible(messages.REQUEST_FLEXIBLE_FROM, key, version)
    header_con = messages.REQUEST_HEADERS[2 if flexible else 1]
    fields = {"request_api_key": key, "request_api_version": version}
    raw = header_con.build({**fields, "correlation_id": correlation_id, "client_id": client_id})
    parsed = parse_request_header(raw + b"body")
    assert parsed == (key, version, correlation_id, client_id, len(raw))


# aiokafka's hand-written structs are an independent oracle. Where they disagree, the spec
# was checked by hand: these are aiokafka's modelling choices or bugs, not the codec's.
AIOKAFKA_DIFFERENT = {
    # topics modelled as Array(String): the same bytes, but it takes strings, not 1-tuples
    "MetadataRequest": range(0, 6),
    # current_leader_epoch encoded as Int64, the spec says int32 (aiokafka never sends v4/v5)
    "OffsetRequest": range(4, 6),
    # v2 is flexible in the spec; aiokafka encodes it like v1
    "DescribeAclsRequest": range(2, 3),
    "DescribeAclsResponse": range(2, 3),
    # the tagged section is an explicit "tags" member there
    "DeleteRecordsRequest": range(2, 3),
    "DeleteRecordsResponse": range(2, 3),
    "AlterPartitionReassignmentsRequest": range(0, 1),
    "AlterPartitionReassignmentsResponse": range(0, 1),
    "ListPartitionReassignmentsRequest": range(0, 1),
    "ListPartitionReassignmentsResponse": range(0, 1),
    # count and assignments nested in a "new_partitions" struct
    "CreatePartitionsRequest": range(0, 2),
}


def _aiokafka_structs() -> dict[tuple[int, int, bool], type]:
    import importlib

    from aiokafka.protocol.api import RequestStruct, Response

    found = {}
    for name in "metadata produce fetch offset commit group coordination admin transaction".split():
        module = importlib.import_module(f"aiokafka.protocol.{name}")
        for cls in vars(module).values():
            if (
                isinstance(cls, type)
                and issubclass(cls, RequestStruct | Response)
                and isinstance(getattr(cls, "API_VERSION", None), int)
                and isinstance(getattr(cls, "API_KEY", None), int)
            ):
                found[(cls.API_KEY, cls.API_VERSION, issubclass(cls, Response))] = cls
    return found


def _positional(con: Any, value: Any) -> Any:
    """Our dict as aiokafka's positional tuples."""
    if isinstance(con, vocabulary.KafkaStruct):
        return tuple(_positional(sub, value[name]) for name, sub, _ in con.fields)
    if isinstance(con, vocabulary.NullableStructField):
        return None if value is None else _positional(con.subcon, value)
    if isinstance(con, vocabulary.ArrayField):
        return None if value is None else [_positional(con.subcon, item) for item in value]
    return value


def test_bytes_match_aiokafka_structs() -> None:
    same = 0
    for (key, version, response), cls in sorted(_aiokafka_structs().items()):
        base = cls.__name__.rsplit("_v", 1)[0]
        if version in AIOKAFKA_DIFFERENT.get(base, ()):
            continue
        con = definition(key, version, response)
        for nulls in (False, True):
            value = sample(con, nulls)
            assert con.build(value) == cls(*_positional(con, value)).encode(), cls.__name__
            same += 1
    assert same >= 350  # about 190 message versions, two samples each


# --------------------------------------------------------------------------------------------
# Hostile input: only KafkaDecodeError, and fast
# --------------------------------------------------------------------------------------------


def _decode_or_reject(key: int, version: int, response: bool, data: bytes) -> None:
    try:
        if response:
            decode_response(key, version, data)
        else:
            decode_request(key, version, data)
    except KafkaDecodeError:
        pass


@settings(max_examples=examples(2000), deadline=None)
@given(case=st.sampled_from(CASES), data=st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(case: tuple[int, int, bool], data: bytes) -> None:
    _decode_or_reject(*case, data)


# Most of the time goes into drawing a valid message: each one drawn is mutated three times
# over, independently, so 700 draws decode 2,100 mutated messages (2,000 from one each before).
@settings(max_examples=examples(700), deadline=None, suppress_health_check=SLOW_OK)
@given(st.data())
def test_mutated_messages_raise_only_decode_error(data: st.DataObject) -> None:
    key, version, response = data.draw(st.sampled_from(CASES))
    value = data.draw(strategy(definition(key, version, response)))
    valid = body_of(key, version, response, encode(key, version, response, value))
    for _ in range(3):
        body = bytearray(valid)
        for _ in range(data.draw(st.integers(1, 4))):
            if body:
                body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
        if response:  # decode_response wants the header: correlation id, tags when flexible
            flexible = kp._is_flexible(messages.RESPONSE_FLEXIBLE_FROM, key, version) and key != 18
            body[:0] = b"\x00\x00\x00\x07" + (b"\x00" if flexible else b"")
        _decode_or_reject(key, version, response, bytes(body))


@settings(max_examples=examples(1000), deadline=None)
@given(st.binary(max_size=64))
def test_random_headers_raise_only_decode_error(data: bytes) -> None:
    try:
        header = parse_request_header(data)
    except KafkaDecodeError:
        return
    assert header.body_offset <= len(data)


@pytest.mark.parametrize(("key", "version", "response"), CASES, ids=CASE_IDS)
def test_every_truncation_is_rejected(key: int, version: int, response: bool) -> None:
    """A decoder consumes exactly what the encoder wrote, so every proper prefix must fail."""
    message = encode(key, version, response, sample(definition(key, version, response), False))
    frame = memoryview(message)[4:]
    if response:
        cuts, whole = [frame[:n] for n in range(len(frame))], frame
        for cut in cuts:
            with pytest.raises(KafkaDecodeError):
                decode_response(key, version, cut)
        decode_response(key, version, whole)
        return
    offset = parse_request_header(frame).body_offset
    body = frame[offset:]
    for n in range(len(body)):
        with pytest.raises(KafkaDecodeError):
            decode_request(key, version, body[:n])
    for n in range(offset):
        with pytest.raises(KafkaDecodeError):
            parse_request_header(frame[:n])


HUGE_LENGTHS = [
    # (api key, version, body): each announces far more data than follows
    (0, 3, h("ffff ffff 00007530 00000001 0001 74 00000001 00000000 7fffffff 00")),  # records
    (0, 9, h("00 ffff 00007530 02 02 74 02 00000000 ffffffff0f 00")),  # compact records
    (0, 3, h("ffff 0001 00000000 7fffffff")),  # topic array count 2^31-1
    (0, 9, h("00 0001 00000000 ffffffff0f")),  # compact array count ~2^32
    (3, 1, h("00000001 7fff 61")),  # string of 32767 bytes, one present
    (3, 9, h("02 808080808001")),  # varint longer than 5 bytes
    (36, 0, h("7fffffff")),  # SASL auth bytes
    (18, 3, h("02 61 02 61 ffffffff0f")),  # body tagged section: 2^32 fields
    (18, 3, h("02 61 02 61 01 00 ffffffff0f")),  # one tagged field of ~2^32 bytes
]


@pytest.mark.parametrize(("key", "version", "body"), HUGE_LENGTHS)
def test_huge_length_prefixes_fail_fast(key: int, version: int, body: bytes) -> None:
    """A decoder that believed one of these lengths would loop or allocate for minutes; the
    bound leaves a loaded machine room (the codec is built first, outside the measure: a
    cold build under two busy loops can alone take tens of milliseconds)."""
    with pytest.raises(KafkaDecodeError):
        decode_request(key, version, b"")
    start = time.perf_counter()
    with pytest.raises(KafkaDecodeError):
        decode_request(key, version, body)
    assert time.perf_counter() - start < 0.5


def test_huge_lengths_in_headers_and_responses() -> None:
    with pytest.raises(KafkaDecodeError, match="client id"):
        parse_request_header(h("0012 0000 00000001 7fff 6b"))
    with pytest.raises(KafkaDecodeError):
        parse_request_header(h("0012 0003 00000001 0000 ffffffff0f"))  # header v2 tags
    with pytest.raises(KafkaDecodeError):
        decode_response(18, 0, h("00000001 0000 7fffffff"))
    with pytest.raises(KafkaDecodeError):
        decode_request(3, 9, h("02 05 ff fe fd fc 00"))  # invalid UTF-8 in a topic name
    with pytest.raises(KafkaDecodeError):
        decode_request(3, 0, h("00000001 ffff"))  # null in a non-nullable string


# --------------------------------------------------------------------------------------------
# The committed messages.py is what the generator writes
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(
    not generator.DEFAULT_SPEC_DIR.is_dir(),
    reason=f"Kafka's JSON specs are not at {generator.DEFAULT_SPEC_DIR} (they sit beside every "
    "development and CI checkout; the project does not carry them), so messages.py is not checked",
)
def test_generated_module_is_up_to_date(tmp_path: Path) -> None:
    output = tmp_path / "messages.py"
    assert generator.main([str(generator.DEFAULT_SPEC_DIR), "--output", str(output)]) == 0
    committed = Path(messages.__file__).read_text(encoding="utf-8")
    assert output.read_text(encoding="utf-8") == committed, (
        "messages.py is stale: run python -m pulsar_gateway.kafka_codec.protocol.generator"
    )


def test_generator_reads_comments_and_versions() -> None:
    text = '{"a": "x // not a comment", // a comment\n "b": "\\"//\\""}'
    assert generator.strip_comments(text) == '{"a": "x // not a comment", \n "b": "\\"//\\""}'
    assert 3 in generator.Versions.parse("3+") and 2 not in generator.Versions.parse("3+")
    assert 4 not in generator.Versions.parse("1-3") and 0 not in generator.Versions.parse("none")

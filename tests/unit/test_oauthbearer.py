"""OAUTHBEARER without a socket: the RFC 7628 message decoder (property-tested), the JWT
checks against a key or a JWKS file, and the Kafka SASL state machine's answers (the error
JSON, then SASL_AUTHENTICATION_FAILED; a session no longer than the token)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.config import ConfigError, load_settings
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.credentials import AuthenticationFailed, NoUsers
from pulsar_gateway.security.oauthbearer import (
    ERROR_JSON,
    MAX_TOKEN_BYTES,
    OAuthConfigError,
    TokenValidator,
    load_validator,
    parse_client_first,
)

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
SECRET = b"a shared secret of at least 32 bytes!"


def _public_pem(key: Any) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _token(key: Any, algorithm: str = "RS256", lifetime: float = 60, **claims: Any) -> str:
    body: dict[str, Any] = {"sub": "olivia", "exp": int(time.time() + lifetime)}
    body.update(claims)
    return jwt.encode(body, key, algorithm=algorithm)


def _forged_hs256(secret: bytes) -> str:
    """The algorithm-confusion attack: HS256 signed with the (public) RSA key's PEM, which
    PyJWT will not make, so made by hand."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = part(json.dumps({"sub": "mallory", "exp": int(time.time()) + 60}).encode())
    signed = f"{header}.{payload}".encode()
    return f"{header}.{payload}.{part(hmac.new(secret, signed, hashlib.sha256).digest())}"


def _message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


@pytest.fixture
def rsa_validator(tmp_path: Path) -> TokenValidator:
    pem = tmp_path / "pub.pem"
    pem.write_bytes(_public_pem(RSA_KEY))
    return load_validator(str(pem), "", ["RS256"])


# ---- the RFC 7628 client message -----------------------------------------------------------


def test_client_first_message_with_extensions() -> None:
    assert parse_client_first(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01") == "abc.def.ghi"
    message = b"n,a=olivia,\x01host=h\x01auth=bearer tok\x01traceId=7\x01\x01"
    assert parse_client_first(message) == "tok"


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,",
        b"n,,\x01auth=Bearer tok\x01",  # no final %x01
        b"p=x,,\x01auth=Bearer tok\x01\x01",  # channel binding is not offered
        b"n,,\x01auth=Basic dXNlcg==\x01\x01",
        b"n,,\x01auth=Bearer \x01\x01",
        b"n,,\x01host=h\x01\x01",
        b"n,,\x01garbage\x01\x01",
        b"n,,\x01auth=Bearer \xff\x01\x01",
        b"n,,\x01auth=Bearer " + b"x" * MAX_TOKEN_BYTES + b"\x01\x01",
    ],
)
def test_malformed_client_messages_are_refused(message: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        parse_client_first(message)


@given(st.binary(max_size=300))
def test_any_bytes_give_a_token_or_authentication_failed(message: bytes) -> None:
    try:
        token = parse_client_first(message)
    except AuthenticationFailed as exc:
        assert len(str(exc)) < 200  # a reason, never the input echoed back
    else:
        assert token and token == token.strip()


@given(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=200))
def test_any_printable_token_round_trips(token: str) -> None:
    assert parse_client_first(_message(token)) == token


# ---- the JWT checks -------------------------------------------------------------------------


def test_a_valid_token_gives_its_subject_and_expiry(rsa_validator: TokenValidator) -> None:
    token = _token(RSA_KEY)
    verified = rsa_validator.verify(token)
    assert verified.principal == "olivia"
    assert time.time() < verified.expires_at <= time.time() + 61


@pytest.mark.parametrize(
    "why, token",
    [
        ("expired", lambda: _token(RSA_KEY, lifetime=-5)),
        ("another key", lambda: _token(rsa.generate_private_key(65537, 2048))),
        ("HS256 keyed with the public key", lambda: _forged_hs256(_public_pem(RSA_KEY))),
        ("no algorithm", lambda: jwt.encode({"sub": "o", "exp": 2**40}, None, algorithm="none")),
        ("not a JWT", lambda: "not-a-token"),
        ("no exp", lambda: jwt.encode({"sub": "o"}, RSA_KEY, algorithm="RS256")),
        ("no sub", lambda: jwt.encode({"exp": 2**40}, RSA_KEY, algorithm="RS256")),
        ("empty sub", lambda: _token(RSA_KEY, sub="")),
    ],
)
def test_bad_tokens_are_refused(rsa_validator: TokenValidator, why: str, token: Any) -> None:
    with pytest.raises(AuthenticationFailed):
        rsa_validator.verify(token())


def test_issuer_and_audience_when_configured(tmp_path: Path) -> None:
    pem = tmp_path / "pub.pem"
    pem.write_bytes(_public_pem(EC_KEY))
    validator = load_validator(str(pem), "", ["ES256"], issuer="idp", audience="kafka")
    assert validator.verify(_token(EC_KEY, "ES256", iss="idp", aud="kafka")).principal == "olivia"
    for claims in ({"iss": "other", "aud": "kafka"}, {"iss": "idp", "aud": "x"}, {}):
        with pytest.raises(AuthenticationFailed):
            validator.verify(_token(EC_KEY, "ES256", **claims))


def test_principal_claim_is_configurable(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET + b"\n")  # a trailing newline is not part of the secret
    validator = load_validator(str(secret), "", ["HS256"], principal_claim="client_id")
    token = _token(SECRET, "HS256", client_id="svc-orders")
    assert validator.verify(token).principal == "svc-orders"


def test_jwks_file_picks_the_key_by_kid(tmp_path: Path) -> None:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}))
    validator = load_validator("", str(jwks), ["RS256"])
    token = jwt.encode(
        {"sub": "olivia", "exp": int(time.time()) + 60}, RSA_KEY, "RS256", headers={"kid": "k1"}
    )
    assert validator.verify(token).principal == "olivia"
    other = jwt.encode({"sub": "o", "exp": 2**40}, RSA_KEY, "RS256", headers={"kid": "k2"})
    with pytest.raises(AuthenticationFailed, match="kid 'k2'"):
        validator.verify(other)


def test_unusable_key_files_stop_start_up_naming_the_setting(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key")
    with pytest.raises(OAuthConfigError, match="kafka.oauthbearer_key_file"):
        load_validator(str(garbage), "", ["RS256"])
    with pytest.raises(OAuthConfigError, match="kafka.oauthbearer_jwks_file"):
        load_validator("", str(garbage), ["RS256"])
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    with pytest.raises(OAuthConfigError, match="at least 32 bytes"):
        load_validator(str(short), "", ["HS256"])
    pem = tmp_path / "pub.pem"
    pem.write_bytes(_public_pem(RSA_KEY))
    with pytest.raises(OAuthConfigError, match="PEM key with HMAC"):
        load_validator(str(pem), "", ["HS256"])


def test_oauthbearer_settings_are_validated(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    key = tmp_path / "pub.pem"
    key.write_bytes(_public_pem(RSA_KEY))
    on = {"kafka.sasl_mechanisms": "OAUTHBEARER"}
    with pytest.raises(ConfigError, match="exactly one of oauthbearer_key_file"):
        load_settings(config, on, environ={})
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(config, {**on, "kafka.oauthbearer_key_file": "/no/key"}, environ={})
    with pytest.raises(ConfigError, match="kafka.oauthbearer_algorithms"):
        load_settings(config, {"kafka.oauthbearer_algorithms": "HS256,RS256"}, environ={})
    with pytest.raises(ConfigError, match="kafka.oauthbearer_algorithms"):
        load_settings(config, {"kafka.oauthbearer_algorithms": "none"}, environ={})
    settings = load_settings(
        config,
        {**on, "kafka.oauthbearer_key_file": str(key), "kafka.oauthbearer_algorithms": "RS256"},
        environ={},
    )
    assert settings.kafka.oauthbearer_algorithms == ["RS256"]


# ---- the SASL state machine -----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _session(validator: TokenValidator, lifetime_ms: int = 0) -> tuple[SaslSession, Clock]:
    clock = Clock()
    session = SaslSession(
        ["OAUTHBEARER"], NoUsers(), None, lifetime_ms=lifetime_ms, clock=clock, tokens=validator
    )
    assert session.handshake({"mechanism": "OAUTHBEARER"})["error_code"] == ErrorCode.NONE
    return session, clock


def test_a_token_authenticates_for_no_longer_than_it_lives(rsa_validator: TokenValidator) -> None:
    session, clock = _session(rsa_validator)
    answer = session.authenticate({"auth_bytes": _message(_token(RSA_KEY, lifetime=30))})
    assert answer["error_code"] == ErrorCode.NONE and session.authenticated == "olivia"
    assert 25_000 < answer["session_lifetime_ms"] <= 30_000
    clock.now += 31
    assert session.expired and not session.current
    # a shorter configured lifetime wins
    session, _ = _session(rsa_validator, lifetime_ms=5000)
    answer = session.authenticate({"auth_bytes": _message(_token(RSA_KEY, lifetime=30))})
    assert answer["session_lifetime_ms"] == 5000


def test_a_bad_token_gets_the_error_json_then_fails(rsa_validator: TokenValidator) -> None:
    session, _ = _session(rsa_validator)
    answer = session.authenticate({"auth_bytes": _message(_token(RSA_KEY, lifetime=-5))})
    assert answer["error_code"] == ErrorCode.NONE and not session.failed
    assert json.loads(answer["auth_bytes"]) == {"status": "invalid_token"}
    assert answer["auth_bytes"] == ERROR_JSON
    answer = session.authenticate({"auth_bytes": b"\x01"})
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert session.failed and not session.authenticated


def test_reauthentication_with_a_fresh_token_extends_the_session(
    rsa_validator: TokenValidator,
) -> None:
    session, clock = _session(rsa_validator)
    session.authenticate({"auth_bytes": _message(_token(RSA_KEY, lifetime=10))})
    clock.now += 8
    assert session.handshake({"mechanism": "OAUTHBEARER"})["error_code"] == ErrorCode.NONE
    answer = session.authenticate({"auth_bytes": _message(_token(RSA_KEY, lifetime=60))})
    assert answer["error_code"] == ErrorCode.NONE
    clock.now += 30
    assert session.current
    # another principal may not take the session over
    session.handshake({"mechanism": "OAUTHBEARER"})
    answer = session.authenticate({"auth_bytes": _message(_token(RSA_KEY, sub="mallory"))})
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED and session.failed

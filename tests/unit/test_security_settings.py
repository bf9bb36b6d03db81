"""The security settings: validated at start-up, named when wrong, never echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_gateway.gateway.config import ConfigError, load_settings
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.security.tls import TlsConfigError, server_context
from pulsar_gateway.storage.users import UsersStore


def test_sasl_mechanisms_from_a_list_or_a_comma_separated_string(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text('[kafka]\nsasl_mechanisms = ["SCRAM-SHA-512", "PLAIN"]\n')
    assert load_settings(config, environ={}).kafka.sasl_mechanisms == ["SCRAM-SHA-512", "PLAIN"]
    environ = {"PULSAR_GATEWAY_KAFKA__SASL_MECHANISMS": "PLAIN, SCRAM-SHA-256"}
    settings = load_settings(config, environ=environ)
    assert settings.kafka.sasl_mechanisms == ["PLAIN", "SCRAM-SHA-256"]
    with pytest.raises(ConfigError, match="kafka.sasl_mechanisms"):
        load_settings(config, {"kafka.sasl_mechanisms": "GSSAPI"}, environ={})


@pytest.mark.parametrize("section", ["kafka", "amqp"])
def test_tls_files_must_come_in_pairs_and_exist(tmp_path: Path, section: str) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match=section):
        load_settings(config, {f"{section}.tls_cert_file": str(cert)}, environ={})
    missing = {f"{section}.tls_cert_file": str(cert), f"{section}.tls_key_file": "/no/key"}
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(config, missing, environ={})
    with pytest.raises(ConfigError, match="tls_ca_file"):
        load_settings(config, {f"{section}.tls_ca_file": str(cert)}, environ={})


def test_an_unloadable_certificate_names_the_setting(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("not a certificate")
    with pytest.raises(TlsConfigError, match="kafka.tls_cert_file"):
        server_context("kafka", str(cert), str(cert))


def _message(key: str, payload: bytes, **properties: str) -> StoredMessage:
    return StoredMessage((1, 1, -1), payload, key, properties, 0, 0)


def test_the_users_store_applies_changes_and_skips_its_own_records() -> None:
    store = UsersStore(backend=None, metadata_namespace="public/__gateway")  # type: ignore[arg-type]
    assert store._apply(_message("user/alice", b'{"SCRAM-SHA-256": {}}'))
    assert store.lookup("alice") == {"SCRAM-SHA-256": {}}
    assert not store._apply(_message("__gw.users__", b"", **{"__gw.meta": "marker"}))
    assert not store._apply(_message("user/bob", b"not json"))
    assert store._apply(_message("user/alice", b"", deleted="1"))
    assert store.lookup("alice") is None and store.names() == []


# ---- safe defaults (docs/security.md, "Safe defaults") --------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gateway.example.com"])
def test_a_non_loopback_kafka_listener_needs_authentication(tmp_path: Path, host: str) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    with pytest.raises(ConfigError, match="kafka.allow_anonymous") as refused:
        load_settings(config, {"kafka.host": host}, environ={})
    assert "non-loopback" in str(refused.value)
    for enough in (
        {"kafka.sasl_mechanisms": "SCRAM-SHA-256"},
        {"kafka.allow_anonymous": "true"},
        {"kafka.enabled": "false"},
    ):
        assert load_settings(config, {"kafka.host": host, **enough}, environ={}).kafka.host == host


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_kafka_listener_may_be_anonymous(tmp_path: Path, host: str) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    assert not load_settings(config, {"kafka.host": host}, environ={}).kafka.authenticates


def test_client_certificates_authenticate_only_on_a_tls_only_listener(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    pem = tmp_path / "x.pem"
    pem.write_text("x")  # the files are only loaded at start-up
    tls = {
        "kafka.host": "0.0.0.0",
        "kafka.tls_cert_file": str(pem),
        "kafka.tls_key_file": str(pem),
        "kafka.tls_ca_file": str(pem),
    }
    assert load_settings(config, tls, environ={}).kafka.authenticates
    with pytest.raises(ConfigError, match="kafka.allow_anonymous"):
        load_settings(config, {**tls, "kafka.tls_port": "0"}, environ={})  # plaintext beside


def test_a_wildcard_is_never_advertised(tmp_path: Path) -> None:
    import socket

    from pulsar_gateway.handlers.kafka.server import advertised_host

    config = tmp_path / "g.toml"
    config.write_text("")
    with pytest.raises(ConfigError, match="kafka.advertised_host"):
        load_settings(config, {"kafka.advertised_host": "0.0.0.0"}, environ={})
    assert advertised_host("", "0.0.0.0") == socket.getfqdn()
    assert advertised_host("", "::") == socket.getfqdn()
    assert advertised_host("kafka.example.com", "0.0.0.0") == "kafka.example.com"
    assert advertised_host("", "10.1.2.3") == "10.1.2.3"


def test_bootstrap_user_settings(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    with pytest.raises(ConfigError, match="gateway"):
        load_settings(config, {"gateway.bootstrap_user": "admin"}, environ={})
    missing = {"gateway.bootstrap_user": "admin", "gateway.bootstrap_password_file": "/no/file"}
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(config, missing, environ={})


# ---- toward an external Pulsar (docs/security.md, "Toward Pulsar") ---------------------------


def test_pulsar_security_settings_are_validated_and_never_echoed(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    url = {"pulsar.service_url": "pulsar+ssl://pulsar.example:6651"}
    token = tmp_path / "t"
    token.write_text("tok")
    with pytest.raises(ConfigError, match="need pulsar.service_url"):
        load_settings(config, {"pulsar.auth_token_file": str(token)}, environ={})
    with pytest.raises(ConfigError, match="choose one of") as refused:
        load_settings(
            config,
            {**url, "pulsar.auth_token": "sekrit-value", "pulsar.auth_token_file": str(token)},
            environ={},
        )
    assert "sekrit-value" not in str(refused.value)
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(config, {**url, "pulsar.tls_trust_certs_file": "/no/ca.pem"}, environ={})
    with pytest.raises(ConfigError, match="oauth2_credentials_file must be set together"):
        load_settings(config, {**url, "pulsar.oauth2_issuer_url": "https://idp"}, environ={})
    environ = {"PULSAR_GATEWAY_PULSAR__AUTH_TOKEN": "from-the-environment"}
    settings = load_settings(config, url, environ=environ)
    assert settings.pulsar.auth_method == "token"
    assert "from-the-environment" not in repr(settings)
    assert "from-the-environment" not in settings.model_dump_json()


def test_certificate_users_need_client_certificates(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text("")
    with pytest.raises(ConfigError, match="tls_certificate_users needs tls_ca_file"):
        load_settings(config, {"kafka.tls_certificate_users": "true"}, environ={})

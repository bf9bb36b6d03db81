"""kcat, the console client users point at the gateway first, on both librdkafka versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.kcat import new_librdkafka_dir, run_kcat

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module", params=["librdkafka-2.0.2", "librdkafka-2.16"])
def lib_dir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path | None:
    if request.param == "librdkafka-2.0.2":
        return None
    return new_librdkafka_dir(tmp_path_factory.mktemp("rdkafka"))


def test_list_metadata(gateway, lib_dir, topic_name) -> None:
    produced = run_kcat(["-b", gateway.bootstrap, "-P", "-t", topic_name], lib_dir, b"hello\n")
    assert produced.returncode == 0, produced.stderr
    listed = run_kcat(["-b", gateway.bootstrap, "-L"], lib_dir)
    assert listed.returncode == 0, listed.stderr
    text = listed.stdout.decode()
    assert f'topic "{topic_name}" with 1 partitions' in text
    assert "1 brokers:" in text and f"127.0.0.1:{gateway.kafka_port}" in text


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_each_codec(gateway, lib_dir, topic_name, codec) -> None:
    lines = [f"key{i % 3}:value {i} {codec}" for i in range(200)]
    produced = run_kcat(
        ["-b", gateway.bootstrap, "-P", "-t", topic_name, "-K:", "-z", codec, "-X", "linger.ms=5"],
        lib_dir,
        ("\n".join(lines) + "\n").encode(),
    )
    assert produced.returncode == 0, produced.stderr
    consumed = run_kcat(
        [
            "-b",
            gateway.bootstrap,
            "-C",
            "-t",
            topic_name,
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k:%s:%o\n",
        ],
        lib_dir,
    )
    assert consumed.returncode == 0, consumed.stderr
    got = consumed.stdout.decode().splitlines()
    assert [line.rsplit(":", 1)[0] for line in got] == lines
    assert [int(line.rsplit(":", 1)[1]) for line in got] == list(range(200))

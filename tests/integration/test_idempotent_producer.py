"""An idempotent producer whose connection is cut mid-stream writes every record exactly
once: the client resends the batches it did not get answers for, and the gateway drops
the copies by producer id and sequence (pulsar-lite has no deduplication of its own)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from harness.gateway_process import GatewayProcess, free_port

TOTAL = 20_000


class CuttingProxy:
    """A TCP proxy between client and gateway whose connections can be cut at will."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self.loop = asyncio.new_event_loop()
        self.writers: list[asyncio.StreamWriter] = []
        self.cuts = 0
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        def abort() -> None:
            for writer in self.writers:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
                writer.transport.abort()
            self.writers.clear()

        self.cuts += 1
        self.loop.call_soon_threadsafe(abort)


def test_idempotent_producer_survives_cut_connections(tmp_path, topic_name) -> None:
    gw = GatewayProcess(tmp_path / "gw")
    proxy = CuttingProxy(gw.kafka_port)
    gw.extra = ["--set", f"kafka.advertised_port={proxy.port}"]
    gw.start()
    # start() picks the gateway's ports afresh when one was taken meanwhile ("address
    # already in use"): the proxy then forwarded to a port nobody listened on
    proxy.target_port = gw.kafka_port
    try:
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{proxy.port}",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.num.messages": 500,
                "message.timeout.ms": 120000,
            }
        )
        failed = []
        for i in range(TOTAL):
            while True:
                try:
                    producer.produce(
                        topic_name,
                        f"{i:07d}".encode(),
                        on_delivery=lambda e, m: e and failed.append(e),
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 100 == 0:
                producer.poll(0.005)  # keep requests flowing while connections are cut
                if i % 400 == 0 and i:
                    proxy.cut()
        assert producer.flush(120) == 0
        assert failed == []
        assert proxy.cuts >= 40

        consumer = Consumer(
            {
                "bootstrap.servers": gw.bootstrap,
                "group.id": "idem",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        values = []
        deadline = time.time() + 60
        while time.time() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:
                    break
                continue
            values.append(msg.value())
        consumer.close()
        assert values == [f"{i:07d}".encode() for i in range(TOTAL)]
    finally:
        gw.stop()


def _call(port: int, api_key: int, version: int, body: dict) -> dict:
    from pulsar_gateway.kafka_codec import protocol

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(protocol.encode_request(api_key, version, 1, "test", body))
        size = int.from_bytes(sock.recv(4), "big")
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    return protocol.decode_response(api_key, version, memoryview(data))


def test_a_resent_idempotent_batch_is_written_once(gateway, topic_name) -> None:
    """The exact retry a client makes after losing a response: same producer id, epoch and
    sequence. It gets the first attempt's offset back; a gap gets OUT_OF_ORDER (45)."""
    from pulsar_gateway.kafka_codec.record_batch import encode_batch

    init = _call(
        gateway.kafka_port,
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert init["error_code"] == 0
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def produce(sequence: int, values: list[bytes]) -> dict:
        batch = encode_batch(
            0,
            [(i, 1000, None, v, []) for i, v in enumerate(values)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
        )
        response = _call(
            gateway.kafka_port,
            0,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 10000,
                "topic_data": [
                    {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(batch)}]}
                ],
            },
        )
        return response["responses"][0]["partition_responses"][0]

    first = produce(0, [b"a", b"b"])
    again = produce(0, [b"a", b"b"])
    assert first["error_code"] == again["error_code"] == 0
    assert again["base_offset"] == first["base_offset"]
    assert produce(5, [b"gap"])["error_code"] == 45
    third = produce(2, [b"c"])
    assert third["error_code"] == 0 and third["base_offset"] == first["base_offset"] + 2
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": "idem2",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    values = []
    deadline = time.time() + 30
    while time.time() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:
                break
            continue
        values.append(msg.value())
    consumer.close()
    assert values == [b"a", b"b", b"c"]

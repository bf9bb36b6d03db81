"""How many entries a consumer asks a broker for at once when the broker counts a permit per
entry (pulsar-lite): the window of `consumer.Consumer`'s flow control (docs/pulsar-protocol.md,
"Flow control")."""

from __future__ import annotations

# brokers (by the start of their CONNECTED server_version) that count a permit per entry,
# except on Shared subscriptions: pulsar-lite's Shared dispatcher wants a batch's messages'
# worth, and a consumer granting per entry got 3 batched entries and then nothing
PER_ENTRY_BROKERS = ("Pulsar-Lite",)
# on those, at most this many entries are asked for at once: pulsar-lite dispatches up to
# 20 entries per FLOW it gets, and rounds that overlap send entries twice; more permits in
# flight only meant more copies
PER_ENTRY_WINDOW = 20
# a consumer sizing its window by bytes (`window_bytes`) asks for at most this many
# entries at once: reading entries of 10 records, windows of 20/50/100/200 read 19-35k,
# 26-48k, 33-44k, 48-53k records/s with 0.01-0.32 copies an entry; of 1,000 records,
# windows of 100-200 drew 1-9 copies an entry and read 2-8x slower than 20
MAX_PER_ENTRY_WINDOW = 100


def window_for(entry_bytes: int, window_bytes: int, least: int) -> int:
    """As many entries as `window_bytes` holds of entries of `entry_bytes`, at least `least`
    and at most MAX_PER_ENTRY_WINDOW: small entries come many to a FLOW (pulsar-lite sends
    at most the permits asked for at once), large ones `least` at a time."""
    return max(least, min(window_bytes // max(entry_bytes, 1), MAX_PER_ENTRY_WINDOW))

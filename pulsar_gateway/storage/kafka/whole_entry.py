"""`read_batches.kafka_batch` as the gateway runs it: from the module's compiled twin when
the build made one from its current source, else the module itself (docs/compiled.md,
gateway/compiled_twins.py). It is the one step of a fetch after a restart that runs for
every record; compiled, the gateway spends about a third less CPU a record there."""

from __future__ import annotations

from pulsar_gateway.gateway.compiled_twins import compiled_twin, is_twin
from pulsar_gateway.gateway.messages import WholeEntry
from pulsar_gateway.storage.kafka import read_batches

_CHOSEN = compiled_twin(read_batches)
# what writes a stored batched entry as one Kafka batch (read_batches.kafka_batch)
kafka_batch: WholeEntry = _CHOSEN.kafka_batch
# whether that is compiled code, and how the gateway says so when it starts
COMPILED = is_twin(_CHOSEN)
HOT_MODULES = "compiled" if COMPILED else "interpreted (make compiles them)"

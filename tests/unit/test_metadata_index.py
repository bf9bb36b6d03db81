"""The metadata store's folder index (gateway/metadata_store.py, `children`): a folder goes
with its last key, so topics deleted and created again in a loop (each incarnation's
checkpoint folders) do not grow the index for ever."""

from __future__ import annotations

from pulsar_gateway.gateway.metadata_store import MetadataStore


def test_a_folder_leaves_the_index_with_its_last_key() -> None:
    store = MetadataStore(None, "ns")  # type: ignore[arg-type] - the table only
    for incarnation in range(50):
        folder = f"offset-index/persistent://public/default/t={incarnation}-partition-0/"
        store._set(folder + "100", {"offset": 100})
        store._set(folder + "200", {"offset": 200})
        assert [key for key, _ in store.children(folder)] == [folder + "100", folder + "200"]
        store._unset(folder + "100")
        assert store.children(folder) == [(folder + "200", {"offset": 200})]
        store._unset(folder + "200")
        assert store.children(folder) == []
    assert store._groups == {}

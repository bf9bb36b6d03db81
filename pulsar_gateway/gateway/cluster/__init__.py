"""Gateway cluster: membership, leases and ownership (docs/cluster.md)."""

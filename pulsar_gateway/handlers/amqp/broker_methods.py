"""The one table of channel methods the broker layer answers, and who answers each.

The connection core (connection_state.py) hands a channel method to the broker layer when
its class is in this table; the connection broker (connection_broker.py) calls the named
method of the named collaborator. One table, so the two can never disagree about which
methods exist; the compatibility matrix (docs/compatibility.md) is rendered from it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from pamqp import base, commands


class Role(Enum):
    """The collaborators of a connection broker, one job each."""

    TOPOLOGY = "topology"  # exchange and queue declare, bind, unbind, purge, delete
    DELIVERIES = "deliveries"  # consumers, basic.get, qos, settlement, recover
    PUBLISHING = "publishing"  # publishes and publisher confirms
    TRANSACTIONS = "transactions"  # tx.select, tx.commit, tx.rollback


_B = commands.Basic
_Q = commands.Queue
_E = commands.Exchange
_T = commands.Tx

# method class -> (collaborator, name of its method that answers it)
BROKER_METHODS: Mapping[type[base.Frame], tuple[Role, str]] = MappingProxyType(
    {
        _E.Declare: (Role.TOPOLOGY, "exchange_declare"),
        _E.Delete: (Role.TOPOLOGY, "exchange_delete"),
        _E.Bind: (Role.TOPOLOGY, "exchange_bind"),
        _E.Unbind: (Role.TOPOLOGY, "exchange_unbind"),
        _Q.Declare: (Role.TOPOLOGY, "queue_declare"),
        _Q.Bind: (Role.TOPOLOGY, "queue_bind"),
        _Q.Unbind: (Role.TOPOLOGY, "queue_unbind"),
        _Q.Purge: (Role.TOPOLOGY, "queue_purge"),
        _Q.Delete: (Role.TOPOLOGY, "queue_delete"),
        _B.Qos: (Role.DELIVERIES, "basic_qos"),
        _B.Consume: (Role.DELIVERIES, "basic_consume"),
        _B.Cancel: (Role.DELIVERIES, "basic_cancel"),
        _B.Get: (Role.DELIVERIES, "basic_get"),
        _B.Ack: (Role.DELIVERIES, "basic_ack"),
        _B.Nack: (Role.DELIVERIES, "basic_nack"),
        _B.Reject: (Role.DELIVERIES, "basic_reject"),
        _B.Recover: (Role.DELIVERIES, "basic_recover"),
        _B.RecoverAsync: (Role.DELIVERIES, "basic_recover"),
        commands.Confirm.Select: (Role.PUBLISHING, "confirm_select"),
        _T.Select: (Role.TRANSACTIONS, "tx_select"),
        _T.Commit: (Role.TRANSACTIONS, "tx_commit"),
        _T.Rollback: (Role.TRANSACTIONS, "tx_rollback"),
    }
)

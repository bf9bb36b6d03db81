"""AMQP 0-9-1 (RabbitMQ) protocol handler: a sans-I/O core the listener drives.

frames -> connection_state (with handshake, channel_table, content_assembly,
heartbeat_clock, authentication, connection_settings) -> events for the broker layer:
connection_broker (one connection; its methods answered by topology_methods,
deliveries, publishing and transactions, as broker_methods lists them) -> channel ->
queue_engine, over
vhost_state (one vhost) and broker (every vhost). It validates with
topology_rules / queue_arguments on the topology model, routes with
exchange_routing and stores through the broker_model protocol. Imports run
that one way: channel and queue_engine see their callers only as Protocols.
"""

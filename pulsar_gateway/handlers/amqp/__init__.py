"""AMQP 0-9-1 (RabbitMQ) protocol handler: a sans-I/O core the listener drives.

frames -> connection_state (with content_assembly, heartbeat_clock,
authentication, connection_settings) -> events for the broker layer, which
validates with topology / queue_arguments, routes with exchange_routing and
stores through the broker_model protocol.
"""

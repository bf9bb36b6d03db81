"""Copying a Kafka cluster into the gateway: `pulsar-gateway migrate`."""

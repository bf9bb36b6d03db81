"""The test harness: what the tests and the benches both drive the gateway with (gateway,
tansu, RabbitMQ and worker processes, raw protocol sockets, client scripts, waits on a
condition with a deadline, the in-memory twins of the storage ports). Neither the product
(pulsar_gateway/) nor this package imports a test module; benches import only this."""

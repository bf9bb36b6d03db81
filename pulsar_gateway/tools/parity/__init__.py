"""Migration parity: PySpark jobs that compare a source Kafka cluster with the gateway."""

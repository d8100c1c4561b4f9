"""Kafka plumbing: the embedded broker (Tansu) and its Faust transport fix, topic admin and
plain producer/reader helpers, Kafka's default partitioner, and the consumer-lag meter."""

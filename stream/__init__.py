"""Kafka-native streaming scorer for production LLM traces."""

__version__ = "0.1.0"

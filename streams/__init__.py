"""Kafka and Qdrant plumbing: the Faust app, topics, store backends, embedding, CLI."""

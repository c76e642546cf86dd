"""Agents of dreamstream; each keeps its decision logic pure and apart from Kafka and Qdrant."""

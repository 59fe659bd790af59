"""Relevance and value scoring of chunks over a `SessionView`: recency,
embeddings, structure, the hybrid mix, query terms."""

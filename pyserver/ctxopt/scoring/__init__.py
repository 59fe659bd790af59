"""Relevance and value scoring of chunks: BM25, recency, embeddings, the hybrid mix."""

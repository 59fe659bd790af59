"""Incremental text indexes of a session, importing nothing above `model`:
`analyzer` (text -> BM25 terms), `bm25` (the index), `lines` (echo lines
and the line book)."""

"""What ctxopt saved: `ledger` (one row per call, in the store's database),
`report` (the rows as totals and money), `metrics` (as Prometheus metrics),
`wire` (a report on gRPC), `gain` (the `ctxopt gain` output), and `log`, the
door every front records a call through."""

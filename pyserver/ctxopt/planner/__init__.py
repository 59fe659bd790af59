"""The plan, along its pipeline: `knobs` (every tuning constant), `values`
(what each chunk is worth and the only code that makes shrunk text),
`selection` (unit states of one plan), `order` (unit priorities and each
strategy's `Rules`), `cut` (greedy cut, backfill, max chunks, resume),
`coherence` (the conversation rules and their repairs), `result` (the one
`Plan` factory) and `plan` (`plan_session`, the entry point)."""

"""The plan, along its pipeline: `knobs` (every tuning constant), `values`
(what each chunk is worth and how it would shrink), `line_levels` (each tool
output's line excerpt at two sizes, remembered per session), `texts` (the
only code that writes shrunk text), `selection` (unit states of one plan),
`order` (unit priorities and each strategy's `Rules`), `cut` (greedy cut,
backfill, max chunks, resume), `coherence` (the conversation rules and their
repairs), `result` (the one `Plan` factory) and `plan` (`plan_session`, the
entry point)."""

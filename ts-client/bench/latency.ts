/**
 * The TypeScript leg of `python -m benchmarks.latency`: times `Score` and
 * `Optimize` (forced dry run) through `CtxoptClient` against a session the
 * Python side already loaded, and prints the samples as JSON on stdout.
 *
 *   node dist/bench/latency.js ADDRESS SESSION REPEATS CONTEXT_LIMIT QUERY
 */
import { CtxoptClient } from "../src/client.js";

async function samples(repeats: number, call: () => Promise<unknown>): Promise<number[]> {
  await call(); // warm: connection, first-call code paths
  const out: number[] = [];
  for (let i = 0; i < repeats; i += 1) {
    const start = process.hrtime.bigint();
    await call();
    out.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return out;
}

async function main(): Promise<void> {
  const [address, sessionId, repeatsArg, limitArg, query] = process.argv.slice(2);
  if (!address || !sessionId || !repeatsArg || !limitArg || query === undefined) {
    throw new Error("usage: latency.js ADDRESS SESSION REPEATS CONTEXT_LIMIT QUERY");
  }
  const repeats = Number(repeatsArg);
  const client = new CtxoptClient(address, { deadlineMs: 120_000 });
  try {
    const roots = { recentTurns: 10 };
    const scoreMs = await samples(repeats, () => client.score({ sessionId, query, roots }));
    const optimizeMs = await samples(repeats, () =>
      client.optimize({
        sessionId,
        query,
        roots,
        budget: { contextLimitTokens: Number(limitArg), targetPercent: 60 },
        dryRun: true,
        force: true,
      }),
    );
    process.stdout.write(`${JSON.stringify({ score_ms: scoreMs, optimize_ms: optimizeMs })}\n`);
  } finally {
    client.close();
  }
}

await main();

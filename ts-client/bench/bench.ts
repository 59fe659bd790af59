/**
 * Client-side latency over loopback against a real server:
 *   npm run bench -- [--smoke]
 * 1,000 registered chunks; one prompt build with optimization (shadow mode, so
 * every build plans over the same 1,000 chunks), the first build of a fresh
 * session in `true` mode, and appending a 10-message delta. Prints a table and
 * writes ../benchmarks/results/bench_ts.json (smoke: results/smoke/).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Content } from "@google/genai";
import { CtxoptClient } from "../src/client.js";
import { DEFAULT_FLAGS } from "../src/flags.js";
import { chunksOf, mapContents, systemChunk } from "../src/gemini/mapping.js";
import { PromptBuilder, type PromptInput } from "../src/promptBuilder.js";
import { SessionMirror } from "../src/sessionMirror.js";
import { call, model, response, text, user } from "../test/support/histories.js";
import { repoRoot } from "../test/support/paths.js";
import { startServer } from "../test/support/server.js";

const smoke = process.argv.includes("--smoke");
const ITERATIONS = smoke ? 20 : 300;
const FRESH_SESSIONS = smoke ? 2 : 20;
const EXCHANGES = 250; // 4 parts each: 1,000 chunks
const CONTEXT_LIMIT = 100_000;

/** An agent session of `exchanges` (question, tool call, tool output, answer) rounds. */
function agentHistory(exchanges: number, seed: string): Content[] {
  const history: Content[] = [];
  for (let i = 0; i < exchanges; i += 1) {
    const file = `src/module${i % 37}/part${i}.ts`;
    history.push(
      user(text(`[${seed}] step ${i}: check ${file} for the handler of event ${i % 11}`)),
      model(call("read_file", `c${i}`, { absolute_path: file })),
      user(response("read_file", `c${i}`, Array.from({ length: 30 }, (_, l) => `export const value${l} = compute(${i}, ${l}); // line ${l}`).join("\n"))),
      model(text(`Step ${i}: ${file} registers handler ${i % 11}; nothing to change there.`)),
    );
  }
  return history;
}

function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

async function timed(iterations: number, run: (i: number) => Promise<void>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < iterations; i += 1) {
    const started = performance.now();
    await run(i);
    samples.push(performance.now() - started);
  }
  return samples;
}

interface Row {
  readonly name: string;
  readonly samples: number;
  readonly p50_ms: number;
  readonly p99_ms: number;
  readonly target: string;
}

function row(name: string, samples: number[], target: string): Row {
  return { name, samples: samples.length, p50_ms: percentile(samples, 50), p99_ms: percentile(samples, 99), target };
}

async function main(): Promise<void> {
  const server = await startServer();
  const client = new CtxoptClient(server.address, { deadlineMs: 10_000 });
  const flags = { ...DEFAULT_FLAGS, address: server.address, deadlineMs: 10_000 };
  try {
    const history = agentHistory(EXCHANGES, "bench");
    const base: PromptInput = { sessionId: "bench-shadow", model: "gemini-2.5-pro", systemInstruction: "You are a CLI agent.", history, message: "which handler fires for event 3?" };

    const shadow = new PromptBuilder({ flags: { ...flags, mode: "shadow" }, client, budget: { contextLimitTokens: CONTEXT_LIMIT } });
    const warm = await shadow.build(base);
    if (warm.summary.outcome !== "shadow" || warm.plan === undefined) throw new Error(`no plan: ${warm.summaryLine}`);
    const build = await timed(ITERATIONS, async () => {
      await shadow.build(base);
    });

    const optimizer = new PromptBuilder({ flags: { ...flags, mode: "true" }, client, budget: { contextLimitTokens: CONTEXT_LIMIT } });
    const fresh = await timed(FRESH_SESSIONS, async (i) => {
      const built = await optimizer.build({ ...base, sessionId: `bench-fresh-${process.pid}-${i}` });
      if (built.summary.outcome !== "optimized") throw new Error(`not optimized: ${built.summaryLine}`);
    });

    const mirror = new SessionMirror(client, "bench-delta");
    let turns = mapContents(history);
    await mirror.sync([systemChunk("system", "You are a CLI agent."), ...chunksOf(turns)]);
    const delta = await timed(ITERATIONS, async (i) => {
      const next = Array.from({ length: 10 }, (_, m) => (m % 2 === 0 ? user(text(`delta ${i}.${m}: run the tests again`)) : model(text(`delta ${i}.${m}: all green`))));
      turns = [...turns, ...mapContents(next, { firstTurn: turns.length, previous: turns.at(-1) })];
      const report = await mirror.sync(chunksOf(turns));
      if (report.appended !== 10) throw new Error(`appended ${report.appended}, expected 10`);
    });

    const rows = [
      row(`prompt build with optimization (shadow, ${warm.plan.decisions.length} decisions over 1,000 chunks)`, build, "p50 <= 5 ms, p99 <= 15 ms"),
      row("first build of a fresh session, true mode (append 1,000 + plan + stash)", fresh, "-"),
      row("append a 10-message delta to 1,000 chunks", delta, "p50 <= 3 ms"),
    ];
    report(rows, warm.summaryLine);
    shadow.close();
    optimizer.close();
  } finally {
    client.close();
    await server.stop();
  }
}

function report(rows: readonly Row[], summaryLine: string): void {
  const width = Math.max(...rows.map((r) => r.name.length));
  console.log(`${"benchmark".padEnd(width)}  samples   p50 ms   p99 ms  target`);
  for (const r of rows) {
    console.log(`${r.name.padEnd(width)}  ${String(r.samples).padStart(7)}  ${r.p50_ms.toFixed(2).padStart(7)}  ${r.p99_ms.toFixed(2).padStart(7)}  ${r.target}`);
  }
  console.log(`\nsample build: ${summaryLine}`);
  const out = join(repoRoot, "benchmarks", "results", ...(smoke ? ["smoke"] : []), "bench_ts.json");
  mkdirSync(dirname(out), { recursive: true });
  const result = { benchmark: "bench_ts", smoke, node: process.version, chunks: EXCHANGES * 4, rows, sample_summary: summaryLine };
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  console.log(`wrote ${out}`);
}

await main();

/**
 * What is in the tail of the bench's prompt build, build by build:
 *   npm run build && node dist/bench/tail.js [DIST] [builds]
 * `DIST` is a `dist/` directory built by `npm run build` (default this one's),
 * so another commit's client can be read the same way. The bench's shadow
 * build over 1,000 chunks (the same history each time, after the session's
 * first plan), timed whole and split into the `Optimize` round trip (the
 * client's call, the server's own `server_ms` inside it), the rest (the
 * builder's own work) and the garbage collections that started during the
 * build (`perf_hooks` gc entries, wall time). Prints percentiles, the first
 * ten builds and the ten slowest, and writes
 * ../benchmarks/results/bench_ts_tail.json. Nothing is left out of the figures.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { PerformanceObserver } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { PromptInput } from "../src/promptBuilder.js";
import { repoRoot } from "../test/support/paths.js";
import { startServer } from "../test/support/server.js";
import { agentHistory } from "./histories.js";
import { percentile } from "./percentile.js";

const here = fileURLToPath(new URL("..", import.meta.url));
const [distArg, buildsArg] = process.argv.slice(2);
const dist = resolve(distArg ?? here);
const BUILDS = Number(buildsArg ?? 300);

interface Build {
  readonly index: number;
  readonly wall_ms: number;
  /** The Optimize call as the client saw it (round trip, encode and decode). */
  readonly optimize_ms: number;
  readonly server_ms: number;
  /** Garbage collections that started during the build, wall time. */
  readonly gc_ms: number;
  readonly gcs: number;
}

interface Timed {
  readonly start: number;
  readonly end: number;
  readonly optimizeMs: number;
  readonly serverMs: number;
}

async function main(): Promise<void> {
  const { CtxoptClient } = (await import(join(dist, "src/client.js"))) as typeof import("../src/client.js");
  const { DEFAULT_FLAGS } = (await import(join(dist, "src/flags.js"))) as typeof import("../src/flags.js");
  const { PromptBuilder } = (await import(join(dist, "src/promptBuilder.js"))) as typeof import("../src/promptBuilder.js");
  const server = await startServer();
  const client = new CtxoptClient(server.address, { deadlineMs: 10_000 });
  const gcs: { start: number; duration: number }[] = [];
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcs.push({ start: entry.startTime, duration: entry.duration });
  });
  observer.observe({ entryTypes: ["gc"] });
  let optimizeMs = 0;
  const optimize = client.optimize.bind(client);
  client.optimize = async (...args) => {
    const started = performance.now();
    try {
      return await optimize(...args);
    } finally {
      optimizeMs += performance.now() - started;
    }
  };
  const flags = { ...DEFAULT_FLAGS, address: server.address, deadlineMs: 10_000, mode: "shadow" as const };
  const builder = new PromptBuilder({ flags, client, budget: { contextLimitTokens: 100_000 } });
  const input: PromptInput = {
    sessionId: "bench-tail",
    model: "gemini-2.5-pro",
    systemInstruction: "You are a CLI agent.",
    history: agentHistory(250, "bench"),
    message: "which handler fires for event 3?",
  };
  const timed: Timed[] = [];
  try {
    await builder.build(input); // the session's first plan, as in the bench
    for (let i = 0; i < BUILDS; i += 1) {
      optimizeMs = 0;
      const start = performance.now();
      const built = await builder.build(input);
      timed.push({ start, end: performance.now(), optimizeMs, serverMs: built.plan?.serverMs ?? 0 });
    }
    await new Promise((done) => setTimeout(done, 50)); // the observer reports after the fact
  } finally {
    observer.disconnect();
    builder.close();
    client.close();
    await server.stop();
  }
  const builds: Build[] = timed.map((t, index) => {
    const during = gcs.filter((g) => g.start >= t.start && g.start < t.end);
    return {
      index,
      wall_ms: t.end - t.start,
      optimize_ms: t.optimizeMs,
      server_ms: t.serverMs,
      gc_ms: during.reduce((sum, g) => sum + g.duration, 0),
      gcs: during.length,
    };
  });
  report(builds);
}

function report(builds: readonly Build[]): void {
  const column = (pick: (b: Build) => number) => builds.map(pick);
  const summary = {
    builds: builds.length,
    wall_p50_ms: percentile(
      column((b) => b.wall_ms),
      50,
    ),
    wall_p99_ms: percentile(
      column((b) => b.wall_ms),
      99,
    ),
    optimize_p50_ms: percentile(
      column((b) => b.optimize_ms),
      50,
    ),
    optimize_p99_ms: percentile(
      column((b) => b.optimize_ms),
      99,
    ),
    builder_p50_ms: percentile(
      column((b) => b.wall_ms - b.optimize_ms),
      50,
    ),
    builder_p99_ms: percentile(
      column((b) => b.wall_ms - b.optimize_ms),
      99,
    ),
    builds_with_gc: builds.filter((b) => b.gcs > 0).length,
    gc_ms_total: builds.reduce((sum, b) => sum + b.gc_ms, 0),
    over_15_ms: builds.filter((b) => b.wall_ms > 15).length,
    over_15_ms_in_first_20: builds.slice(0, 20).filter((b) => b.wall_ms > 15).length,
  };
  const line = (b: Build) =>
    `#${String(b.index).padEnd(4)} wall ${b.wall_ms.toFixed(2).padStart(6)}  Optimize ${b.optimize_ms.toFixed(2).padStart(6)} (server ${b.server_ms.toFixed(2)})  builder ${(b.wall_ms - b.optimize_ms).toFixed(2).padStart(6)}  gc ${b.gc_ms.toFixed(2).padStart(6)} (${b.gcs})`;
  console.log(`dist: ${dist}`);
  for (const [key, value] of Object.entries(summary)) console.log(`${key.padEnd(24)} ${Number.isInteger(value) ? value : value.toFixed(2)}`);
  console.log("first 10 builds:");
  for (const b of builds.slice(0, 10)) console.log(line(b));
  const slowest = [...builds].sort((a, b) => b.wall_ms - a.wall_ms).slice(0, 10);
  console.log("10 slowest builds:");
  for (const b of slowest) console.log(line(b));
  const out = join(repoRoot, "benchmarks", "results", "bench_ts_tail.json");
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ benchmark: "bench_ts_tail", node: process.version, dist, summary, builds }, null, 2)}\n`);
  console.log(`wrote ${out}`);
}

await main();

/**
 * Client-side latency over loopback against a real server:
 *   npm run bench -- [--smoke]
 * 1,000 registered chunks; one prompt build with optimization (shadow mode, so
 * every build plans over the same 1,000 chunks), the first build of a fresh
 * session in `true` mode, appending a 10-message delta, and tool-loop steps:
 * one model call and its tool response appended since the last build, then
 * the next build, as Gemini CLI's tool loop does (also with the history
 * handed back deep-copied, as Gemini CLI's getHistory does). In `true` mode a
 * step between collections stays under the threshold; in shadow mode every
 * step plans. Prints a table and writes ../benchmarks/results/bench_ts.json
 * (smoke: results/smoke/): wall time, the client process's CPU time, and the
 * server's own time (server_ms) of the builds that planned.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Content, Part } from "@google/genai";
import { CtxoptClient } from "../src/client.js";
import { DEFAULT_FLAGS } from "../src/flags.js";
import { chunksOf, mapContents, systemChunk } from "../src/gemini/mapping.js";
import { PromptBuilder, type PromptInput } from "../src/promptBuilder.js";
import { SessionMirror } from "../src/sessionMirror.js";
import { call, model, response, text, user } from "../test/support/histories.js";
import { agentHistory } from "./histories.js";
import { percentile } from "./percentile.js";
import { repoRoot } from "../test/support/paths.js";
import { startServer } from "../test/support/server.js";

const smoke = process.argv.includes("--smoke");
const ITERATIONS = smoke ? 20 : 300;
const FRESH_SESSIONS = smoke ? 2 : 20;
const EXCHANGES = 250; // 4 parts each: 1,000 chunks
const CONTEXT_LIMIT = 100_000;
/** Tool-loop steps per session; sessions start over from the 1,000-chunk history. */
const STEPS_PER_SESSION = smoke ? 10 : 100;

/** Step `i` of a tool loop: the model's call, and the tool's response (the next message). */
function toolStep(i: number): { call: Content; response: Part } {
  const output = Array.from({ length: 30 }, (_, l) => `PASS test/loop${i}/case${l}.test.ts (${l} ms)`).join("\n");
  return {
    call: model(call("run_shell_command", `loop${i}`, { command: `npm test -- loop${i}` })),
    response: response("run_shell_command", `loop${i}`, output),
  };
}

/**
 * Tool-loop steps through `builder`, `STEPS_PER_SESSION` per session: each
 * step hands back the last build's history and message plus the model's call,
 * with the tool's response as the new message; `deepCopy` hands back a
 * structuredClone of it, as Gemini CLI's getHistory does. Only the builds are timed.
 */
async function toolLoop(
  builder: PromptBuilder,
  base: PromptInput,
  name: string,
  steps: number,
  deepCopy = false,
): Promise<{ timings: Timings; serverMs: number[]; outcomes: Map<string, number> }> {
  const timings = new Timings();
  const serverMs: number[] = [];
  const outcomes = new Map<string, number>();
  for (let session = 0; timings.wall.length < steps; session += 1) {
    let input: PromptInput = { ...base, sessionId: `bench-${name}-${process.pid}-${session}` };
    let built = await builder.build(input);
    for (let i = 0; i < STEPS_PER_SESSION && timings.wall.length < steps; i += 1) {
      const step = toolStep(session * STEPS_PER_SESSION + i);
      const history = [...built.history, built.contents.at(-1)!, step.call];
      input = { ...input, history: deepCopy ? structuredClone(history) : history, message: [step.response] };
      const next = input;
      built = await timings.measure(() => builder.build(next));
      if (built.plan !== undefined) serverMs.push(built.plan.serverMs);
      outcomes.set(built.summary.outcome, (outcomes.get(built.summary.outcome) ?? 0) + 1);
    }
  }
  return { timings, serverMs, outcomes };
}

/**
 * Wall time per sample, and this process's CPU time: the client's own share
 * (the server is another process), steadier than wall time on a busy machine.
 */
class Timings {
  readonly wall: number[] = [];
  readonly cpu: number[] = [];

  async measure<T>(run: () => Promise<T>): Promise<T> {
    const cpu = process.cpuUsage();
    const started = performance.now();
    const result = await run();
    this.wall.push(performance.now() - started);
    const used = process.cpuUsage(cpu);
    this.cpu.push((used.user + used.system) / 1000);
    return result;
  }
}

async function timed(iterations: number, run: (i: number) => Promise<void>): Promise<Timings> {
  const timings = new Timings();
  for (let i = 0; i < iterations; i += 1) await timings.measure(() => run(i));
  return timings;
}

interface Row {
  readonly name: string;
  readonly samples: number;
  readonly p50_ms: number;
  readonly p99_ms: number;
  /** CPU time of the client process per sample (GC and gRPC included). */
  readonly client_cpu_p50_ms: number;
  /** The server's own time (OptimizeResponse.server_ms) of the builds that planned; absent when none did. */
  readonly server_p50_ms?: number;
  readonly target: string;
}

function row(name: string, timings: Timings, target: string, serverMs: readonly number[] = []): Row {
  const server = serverMs.length > 0 ? { server_p50_ms: percentile(serverMs, 50) } : {};
  const { wall, cpu } = timings;
  return { name, samples: wall.length, p50_ms: percentile(wall, 50), p99_ms: percentile(wall, 99), client_cpu_p50_ms: percentile(cpu, 50), ...server, target };
}

function outcomeList(outcomes: ReadonlyMap<string, number>): string {
  return [...outcomes].map(([outcome, count]) => `${count} ${outcome}`).join(", ");
}

async function main(): Promise<void> {
  const server = await startServer();
  const client = new CtxoptClient(server.address, { deadlineMs: 10_000 });
  const flags = { ...DEFAULT_FLAGS, address: server.address, deadlineMs: 10_000 };
  try {
    const history = agentHistory(EXCHANGES, "bench");
    const base: PromptInput = {
      sessionId: "bench-shadow",
      model: "gemini-2.5-pro",
      systemInstruction: "You are a CLI agent.",
      history,
      message: "which handler fires for event 3?",
    };

    const shadow = new PromptBuilder({ flags: { ...flags, mode: "shadow" }, client, budget: { contextLimitTokens: CONTEXT_LIMIT } });
    const warm = await shadow.build(base);
    if (warm.summary.outcome !== "shadow" || warm.plan === undefined) throw new Error(`no plan: ${warm.summaryLine}`);
    const buildServerMs: number[] = [];
    const build = await timed(ITERATIONS, async () => {
      buildServerMs.push((await shadow.build(base)).plan?.serverMs ?? 0);
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
      const next = Array.from({ length: 10 }, (_, m) =>
        m % 2 === 0 ? user(text(`delta ${i}.${m}: run the tests again`)) : model(text(`delta ${i}.${m}: all green`)),
      );
      turns = [...turns, ...mapContents(next, { firstTurn: turns.length, previous: turns.at(-1) })];
      const report = await mirror.sync(chunksOf(turns));
      if (report.appended !== 10) throw new Error(`appended ${report.appended}, expected 10`);
    });

    const loop = await toolLoop(optimizer, base, "loop", ITERATIONS);
    const copiedLoop = await toolLoop(optimizer, base, "copied-loop", ITERATIONS, true);
    const shadowLoop = await toolLoop(shadow, base, "shadow-loop", ITERATIONS);

    const rows = [
      row(
        `prompt build with optimization (shadow, ${warm.plan.decisions.length} decisions over 1,000 chunks)`,
        build,
        "p50 <= 5 ms, p99 <= 15 ms",
        buildServerMs,
      ),
      row("first build of a fresh session, true mode (append 1,000 + plan + stash)", fresh, "-"),
      row("append a 10-message delta to 1,000 chunks", delta, "p50 <= 3 ms"),
      row(`tool-loop step, true mode, 1,000-1,200 chunks (${outcomeList(loop.outcomes)})`, loop.timings, "p50 <= 3 ms", loop.serverMs),
      row(
        `tool-loop step, true mode, history handed back deep-copied (${outcomeList(copiedLoop.outcomes)})`,
        copiedLoop.timings,
        "p50 <= 3 ms",
        copiedLoop.serverMs,
      ),
      row(`tool-loop step, shadow, 1,000-1,200 chunks (append 2 + plan every step)`, shadowLoop.timings, "-", shadowLoop.serverMs),
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
  console.log(`${"benchmark".padEnd(width)}  samples   p50 ms   p99 ms  client CPU p50  server p50  target`);
  for (const r of rows) {
    const server = r.server_p50_ms === undefined ? "-" : r.server_p50_ms.toFixed(2);
    const cells = [
      String(r.samples).padStart(7),
      r.p50_ms.toFixed(2).padStart(7),
      r.p99_ms.toFixed(2).padStart(7),
      r.client_cpu_p50_ms.toFixed(2).padStart(14),
      server.padStart(10),
    ];
    console.log(`${r.name.padEnd(width)}  ${cells.join("  ")}  ${r.target}`);
  }
  console.log(`\nsample build: ${summaryLine}`);
  const out = join(repoRoot, "benchmarks", "results", ...(smoke ? ["smoke"] : []), "bench_ts.json");
  mkdirSync(dirname(out), { recursive: true });
  const result = { benchmark: "bench_ts", smoke, node: process.version, chunks: EXCHANGES * 4, rows, sample_summary: summaryLine };
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  console.log(`wrote ${out}`);
}

await main();

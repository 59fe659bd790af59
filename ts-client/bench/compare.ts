/**
 * Two builds of the client side by side against one server, interleaved (the
 * machine is noisy; alternating the order each round spreads its noise over
 * both):
 *   npm run build && node dist/bench/compare.js OLD_DIST NEW_DIST [iterations]
 * where each DIST is a `dist/` directory built by `npm run build` (e.g. this
 * tree's at another commit). Per variant: the bench's shadow prompt build over
 * 1,000 chunks (the same history each time), and shadow tool-loop steps (the
 * model's call and its tool output appended, then a plan; 1,000-1,100 chunks).
 * Prints wall, client CPU and server p50/p99 and writes
 * ../benchmarks/results/bench_ts_compare.json; both variants must print the
 * same summary line (the same plan, however it travelled).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { Content } from "@google/genai";
import type { PromptBuilder as Builder, PromptInput } from "../src/promptBuilder.js";
import { call, model, response } from "../test/support/histories.js";
import { repoRoot } from "../test/support/paths.js";
import { startServer } from "../test/support/server.js";
import { agentHistory } from "./histories.js";
import { percentile } from "./percentile.js";

const [oldDist, newDist, iterationsArg] = process.argv.slice(2);
if (oldDist === undefined || newDist === undefined) throw new Error("usage: node dist/bench/compare.js OLD_DIST NEW_DIST [iterations]");
const ITERATIONS = Number(iterationsArg ?? 300);
const WARMUP = 30;
const LOOP_STEPS = 50; // a tool-loop session starts over from 1,000 chunks after this many steps

interface Samples {
  wall: number[];
  cpu: number[];
  server: number[];
}

interface Variant {
  readonly name: string;
  readonly builder: Builder;
  readonly close: () => void;
  readonly build: Samples;
  readonly loop: Samples;
  readonly base: PromptInput;
  loopInput: PromptInput;
  loopStep: number;
  loopSession: number;
  summaryLine: string;
}

const history = agentHistory(250, "bench");

async function variant(name: string, dist: string, address: string): Promise<Variant> {
  const root = resolve(dist);
  const { CtxoptClient } = (await import(join(root, "src/client.js"))) as typeof import("../src/client.js");
  const { DEFAULT_FLAGS } = (await import(join(root, "src/flags.js"))) as typeof import("../src/flags.js");
  const { PromptBuilder } = (await import(join(root, "src/promptBuilder.js"))) as typeof import("../src/promptBuilder.js");
  const client = new CtxoptClient(address, { deadlineMs: 10_000 });
  const flags = { ...DEFAULT_FLAGS, address, deadlineMs: 10_000, mode: "shadow" as const };
  const builder = new PromptBuilder({ flags, client, budget: { contextLimitTokens: 100_000 } });
  const base: PromptInput = {
    sessionId: `compare-${name}`,
    model: "gemini-2.5-pro",
    systemInstruction: "You are a CLI agent.",
    history,
    message: "which handler fires for event 3?",
  };
  const first = await builder.build(base);
  if (first.plan === undefined) throw new Error(`${name}: no plan: ${first.summaryLine}`);
  const empty = (): Samples => ({ wall: [], cpu: [], server: [] });
  return {
    name,
    builder,
    close: () => {
      builder.close();
      client.close();
    },
    build: empty(),
    loop: empty(),
    base,
    loopInput: { ...base, sessionId: `compare-${name}-loop-0` },
    loopStep: 0,
    loopSession: 0,
    summaryLine: first.summaryLine.replace(/, [\d.]+ ms.*$/, ""),
  };
}

async function measure(samples: Samples | undefined, run: () => Promise<{ plan?: { serverMs: number } }>): Promise<void> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  const built = await run();
  const wall = performance.now() - started;
  const used = process.cpuUsage(cpu);
  if (samples === undefined) return;
  samples.wall.push(wall);
  samples.cpu.push((used.user + used.system) / 1000);
  samples.server.push(built.plan?.serverMs ?? 0);
}

/** One tool-loop step: the last build's history, the model's call, its output as the message. */
async function loopStep(v: Variant, samples: Samples | undefined): Promise<void> {
  if (v.loopStep === LOOP_STEPS) {
    v.loopSession += 1;
    v.loopStep = 0;
    v.loopInput = { ...v.base, sessionId: `compare-${v.name}-loop-${v.loopSession}` };
    await v.builder.build(v.loopInput); // the new session's first plan is not a step
  }
  const i = v.loopStep;
  v.loopStep += 1;
  const output = Array.from({ length: 30 }, (_, l) => `PASS test/loop${i}/case${l}.test.ts (${l} ms)`).join("\n");
  const callTurn: Content = model(call("run_shell_command", `loop${i}`, { command: `npm test -- loop${i}` }));
  const input: PromptInput = {
    ...v.loopInput,
    history: [...(v.loopInput.history as Content[]), callTurn],
    message: [response("run_shell_command", `loop${i}`, output)],
  };
  let built: Awaited<ReturnType<Builder["build"]>> | undefined;
  await measure(samples, async () => (built = await v.builder.build(input)));
  v.loopInput = { ...input, history: [...built!.history, built!.contents.at(-1)!] };
}

function stats(s: Samples) {
  const round = (x: number) => Math.round(x * 100) / 100;
  return {
    samples: s.wall.length,
    wall_p50_ms: round(percentile(s.wall, 50)),
    wall_p99_ms: round(percentile(s.wall, 99)),
    client_cpu_p50_ms: round(percentile(s.cpu, 50)),
    client_cpu_p99_ms: round(percentile(s.cpu, 99)),
    server_p50_ms: round(percentile(s.server, 50)),
  };
}

async function main(): Promise<void> {
  const server = await startServer();
  const variants: Variant[] = [];
  try {
    variants.push(await variant("before", oldDist!, server.address), await variant("after", newDist!, server.address));
    for (let i = 0; i < WARMUP + ITERATIONS; i += 1) {
      const order = i % 2 === 0 ? variants : [...variants].reverse();
      for (const v of order) {
        const kept = i >= WARMUP;
        await measure(kept ? v.build : undefined, () => v.builder.build(v.base));
        await loopStep(v, kept ? v.loop : undefined);
      }
    }
    const rows = variants.flatMap((v) => [
      { variant: v.name, benchmark: "prompt build (shadow, 1,000 chunks)", ...stats(v.build) },
      { variant: v.name, benchmark: "tool-loop step (shadow, append 2 + plan)", ...stats(v.loop) },
    ]);
    console.log("variant  benchmark                                  samples  wall p50  wall p99  CPU p50  CPU p99  server p50");
    for (const r of rows) {
      const cells = [r.wall_p50_ms, r.wall_p99_ms, r.client_cpu_p50_ms, r.client_cpu_p99_ms, r.server_p50_ms].map((x) => x.toFixed(2).padStart(8));
      console.log(`${r.variant.padEnd(7)}  ${r.benchmark.padEnd(41)}  ${String(r.samples).padStart(7)}  ${cells.join(" ")}`);
    }
    const same = variants[0]!.summaryLine === variants[1]!.summaryLine;
    console.log(`same summary line: ${same} | ${variants[1]!.summaryLine}`);
    const out = join(repoRoot, "benchmarks", "results", "bench_ts_compare.json");
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(
      out,
      `${JSON.stringify({ benchmark: "bench_ts_compare", node: process.version, old: oldDist, new: newDist, rows, same_summary: same }, null, 2)}\n`,
    );
    console.log(`wrote ${out}`);
  } finally {
    for (const v of variants) v.close();
    await server.stop();
  }
}

await main();

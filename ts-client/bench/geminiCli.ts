/**
 * Gemini CLI with and without the adapter, over recorded sessions:
 *   npm run bench:gemini-cli -- [--sessions N] [--window TOKENS] [--smoke]
 * Drives a real GeminiClient (gemini-cli-core 0.61, its fake content
 * generator, no network) over the first N SWE-agent trajectories, once with
 * GEMINI_CONTEXT_OPTIMIZATION=false (Gemini CLI's own path) and once with
 * `true`, through a real server. Prints a table and writes
 * bench/results/gemini_cli.json. Tokens are Gemini CLI's own estimate of the
 * whole prompt (contents, system instruction, tool declarations), which the
 * fake model reports back as Gemini CLI's usage.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { type Drive, driveGeminiCli } from "../test/support/geminiCliDriver.js";
import { packageRoot } from "../test/support/paths.js";
import { startServer } from "../test/support/server.js";
import { loadSessions } from "../test/support/trajectories.js";

const { values } = parseArgs({
  options: { sessions: { type: "string", default: "20" }, window: { type: "string", default: "60000" }, smoke: { type: "boolean", default: false } },
});
const sessionCount = values.smoke ? 2 : Number(values.sessions);
const windowTokens = Number(values.window);
/** Gemini CLI summarises its history with an LLM at this share of the window. */
const GEMINI_CLI_COMPRESSION = 0.5;

const scratch = mkdtempSync(join(tmpdir(), "ctxopt-bench-gemini-"));
process.env["HOME"] = scratch;
process.env["GEMINI_CLI_HOME"] = scratch;
const core = await import("@google/gemini-cli-core");

interface Row {
  mode: string;
  requests: number;
  tokensSent: number;
  meanTokens: number;
  maxTokens: number;
  maxPercent: number;
  overCompressionLine: number;
  overWindow: number;
  collections: number;
  fallbacks: number;
  adapterMsMean: number;
  adapterMsP95: number;
  steadyPrefix: number;
}

function summarise(mode: string, drives: Drive[]): Row {
  const exchanges = drives.flatMap((d) => d.exchanges);
  // The prompt as the model counts it (contents, system instruction, tool declarations): what Gemini CLI's checks read.
  const tokens = exchanges.map((e) => e.reportedPromptTokens);
  const latencies = exchanges.map((e) => e.adapterMs).sort((a, b) => a - b);
  let steady = 0;
  let steadyChecked = 0;
  for (const drive of drives) {
    drive.exchanges.forEach((e, i) => {
      if (i === 0 || e.summary.serverMs > 0 || e.summary.outcome === "fallback") return;
      const previous = drive.exchanges[i - 1]!.sent;
      steadyChecked += 1;
      if (JSON.stringify(e.sent.slice(0, previous.length)) === JSON.stringify(previous)) steady += 1;
    });
  }
  const sum = tokens.reduce((a, b) => a + b, 0);
  return {
    mode,
    requests: exchanges.length,
    tokensSent: sum,
    meanTokens: Math.round(sum / exchanges.length),
    maxTokens: Math.max(...tokens),
    maxPercent: (100 * Math.max(...tokens)) / windowTokens,
    overCompressionLine: tokens.filter((t) => t >= GEMINI_CLI_COMPRESSION * windowTokens).length,
    overWindow: tokens.filter((t) => t > windowTokens).length,
    collections: exchanges.filter((e) => e.summary.serverMs > 0).length,
    fallbacks: exchanges.filter((e) => e.summary.outcome === "fallback").length,
    adapterMsMean: latencies.reduce((a, b) => a + b, 0) / latencies.length,
    adapterMsP95: latencies[Math.floor(latencies.length * 0.95)] ?? 0,
    steadyPrefix: steadyChecked === 0 ? 1 : steady / steadyChecked,
  };
}

const server = await startServer();
const rows: Row[] = [];
try {
  const sessions = loadSessions(Array.from({ length: sessionCount }, (_, i) => i));
  for (const mode of ["false", "true"]) {
    const drives: Drive[] = [];
    for (const session of sessions) {
      drives.push(await driveGeminiCli(core, scratch, session, mode, { address: server.address, sessionId: `bench-${session.id}-${mode}`, windowTokens }));
    }
    rows.push(summarise(mode === "false" ? "Gemini CLI alone" : "with ctxopt", drives));
  }
} finally {
  await server.stop();
  rmSync(scratch, { recursive: true, force: true });
}

const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
console.log(`${sessionCount} sessions, window ${fmt(windowTokens)} tokens, Gemini CLI compresses at ${GEMINI_CLI_COMPRESSION * 100}%`);
console.log(
  "mode              requests  tokens sent  mean/request  max (% window)   >=50%  >window  collections  fallbacks  adapter ms mean/p95  steady prefix",
);
for (const r of rows) {
  const cells = [
    r.mode.padEnd(16),
    String(r.requests).padStart(8),
    fmt(r.tokensSent).padStart(11),
    fmt(r.meanTokens).padStart(12),
    `${fmt(r.maxTokens)} (${r.maxPercent.toFixed(0)}%)`.padStart(14),
    String(r.overCompressionLine).padStart(6),
    String(r.overWindow).padStart(7),
    String(r.collections).padStart(11),
    String(r.fallbacks).padStart(9),
    `${r.adapterMsMean.toFixed(1)} / ${r.adapterMsP95.toFixed(1)}`.padStart(19),
    `${(100 * r.steadyPrefix).toFixed(0).padStart(12)}%`,
  ];
  console.log(cells.join("  "));
}
const out = join(packageRoot, "bench/results", values.smoke ? "gemini_cli_smoke.json" : "gemini_cli.json");
mkdirSync(join(packageRoot, "bench/results"), { recursive: true });
writeFileSync(out, `${JSON.stringify({ sessions: sessionCount, windowTokens, rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
process.exit(0);

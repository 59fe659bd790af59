/**
 * Gemini CLI with and without the adapter, over recorded sessions:
 *   npm run bench:gemini-cli -- [--sessions N] [--window TOKENS | --window-share S] [--ceiling-percent P] [--smoke]
 * Drives a real GeminiClient (gemini-cli-core 0.61, its fake content
 * generator, no network) over the first N SWE-agent trajectories, once with
 * GEMINI_CONTEXT_OPTIMIZATION=false (Gemini CLI's own path) and once with
 * `true`, through a real server. The window is `--window` tokens, or per
 * session its fixed prompt (system instruction and tool declarations) plus
 * `--window-share` of its history at the last call (so every session must be
 * cut); `--ceiling-percent` overrides the adapter's ceiling rule. Prints a
 * table and writes bench/results/gemini_cli.json: tokens are Gemini CLI's own
 * estimate of the whole prompt, which the fake model reports back as Gemini
 * CLI's usage; "lands at" is the mean prompt size of the requests a
 * collection produced, in percent of the window; needed-later recall is the
 * share of the tool-output lines a later model reply writes out that the
 * request still holds (../shared/datasets/README.md).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { Content } from "../src/gemini/types.js";
import { geminiCliCompactionLine } from "../src/pipeline/ceiling.js";
import { estimateContentsTokens } from "../src/gemini/tokens.js";
import { type Drive, driveGeminiCli } from "../test/support/geminiCliDriver.js";
import { packageRoot } from "../test/support/paths.js";
import { startServer } from "../test/support/server.js";
import { loadSessions, type Session } from "../test/support/trajectories.js";

const { values } = parseArgs({
  options: {
    sessions: { type: "string", default: "20" },
    window: { type: "string", default: "60000" },
    "window-share": { type: "string" },
    "ceiling-percent": { type: "string" },
    smoke: { type: "boolean", default: false },
  },
});
const sessionCount = values.smoke ? 2 : positive("--sessions", values.sessions);
const fixedWindow = positive("--window", values.window);
const windowShare = values["window-share"] === undefined ? undefined : positive("--window-share", values["window-share"]);
const ceilingOverride = values["ceiling-percent"] === undefined ? undefined : positive("--ceiling-percent", values["ceiling-percent"]);
/** The model the drives name: Gemini CLI compresses at its line (0.5 x its tokenLimit). */
const MODEL = "gemini-2.5-pro";

function positive(flag: string, text: string): number {
  const value = Number(text);
  if (!(value > 0)) throw new Error(`${flag}: expected a positive number (got ${JSON.stringify(text)})`);
  return value;
}

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
  overWindow: number;
  collections: number;
  fallbacks: number;
  adapterMsMean: number;
  adapterMsP95: number;
  steadyPrefix: number;
  /** Mean prompt size, in percent of the window, of the requests a collection produced (none: null). */
  landsAtPercent: number | null;
  /** Mean needed-later recall over the requests with needed lines (../shared/datasets/README.md). */
  neededLaterRecall: number;
  recallRequests: number;
}

/** Needed-later lines: lines of tool outputs at least this long (../shared/datasets/README.md; benchmarks/quality/metrics.py). */
const MIN_NEEDED_CHARS = 25;

/** The text of every part a model reads: text, a call's command, a response's output. */
function textOf(contents: readonly Content[]): string {
  const texts: string[] = [];
  for (const content of contents) {
    for (const part of content.parts ?? []) {
      if (typeof part.text === "string") texts.push(part.text);
      if (part.functionCall !== undefined) texts.push(JSON.stringify(part.functionCall.args ?? {}));
      const output = part.functionResponse?.response?.["output"];
      if (typeof output === "string") texts.push(output);
    }
  }
  return texts.join("\n");
}

/** Lines of the tool outputs in `received` that a later model reply of the session writes out verbatim. */
function neededLines(received: readonly Content[], later: readonly string[]): string[] {
  const seen = new Set<string>();
  for (const content of received) {
    for (const part of content.parts ?? []) {
      const output = part.functionResponse?.response?.["output"];
      if (typeof output !== "string") continue;
      for (const raw of output.split("\n")) {
        const line = raw.trim();
        if (line.length >= MIN_NEEDED_CHARS) seen.add(line);
      }
    }
  }
  return [...seen].filter((line) => later.some((text) => text.includes(line)));
}

/** Needed-later recall per request of a drive: request i precedes model reply i, whose text and later ones are "later". */
function recalls(session: Session, drive: Drive): number[] {
  const replies = session.steps.map((step) => textOf([{ role: "model", parts: step.model }]));
  const result: number[] = [];
  drive.exchanges.forEach((exchange, i) => {
    const needed = neededLines(exchange.received, replies.slice(i));
    if (needed.length === 0) return;
    const sent = textOf(exchange.sent);
    result.push(needed.filter((line) => sent.includes(line)).length / needed.length);
  });
  return result;
}

/** The window of each session: `--window`, or its fixed prompt plus `--window-share` of its history at the last call (from Gemini CLI's own drive). */
function windowsOf(alone: readonly Drive[]): number[] {
  return alone.map((drive) => {
    if (windowShare === undefined) return fixedWindow;
    const first = drive.exchanges[0]!;
    const fixed = first.reportedPromptTokens - estimateContentsTokens(first.received);
    const final = drive.exchanges.at(-1)!.reportedPromptTokens;
    return Math.round(fixed + windowShare * (final - fixed));
  });
}

function summarise(mode: string, sessions: readonly Session[], drives: Drive[], windows: readonly number[]): Row {
  // Every request with its session's window; tokens are the prompt as the model counts it
  // (contents, system instruction, tool declarations): what Gemini CLI's checks read.
  const exchanges = drives.flatMap((d, i) => d.exchanges.map((e) => ({ ...e, window: windows[i]! })));
  const landed = exchanges.filter((e) => e.summary.serverMs > 0 && e.summary.outcome === "optimized").map((e) => (100 * e.reportedPromptTokens) / e.window);
  const recall = drives.flatMap((drive, i) => recalls(sessions[i]!, drive));
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
    maxPercent: Math.max(...exchanges.map((e) => (100 * e.reportedPromptTokens) / e.window)),
    overWindow: exchanges.filter((e) => e.reportedPromptTokens > e.window).length,
    collections: exchanges.filter((e) => e.summary.serverMs > 0).length,
    fallbacks: exchanges.filter((e) => e.summary.outcome === "fallback").length,
    adapterMsMean: latencies.reduce((a, b) => a + b, 0) / latencies.length,
    adapterMsP95: latencies[Math.floor(latencies.length * 0.95)] ?? 0,
    steadyPrefix: steadyChecked === 0 ? 1 : steady / steadyChecked,
    landsAtPercent: landed.length === 0 ? null : landed.reduce((a, b) => a + b, 0) / landed.length,
    neededLaterRecall: recall.length === 0 ? 1 : recall.reduce((a, b) => a + b, 0) / recall.length,
    recallRequests: recall.length,
  };
}

const server = await startServer();
const rows: Row[] = [];
let windows: number[] = [];
try {
  const sessions = loadSessions(Array.from({ length: sessionCount }, (_, i) => i));
  const drive = async (mode: string, windows?: readonly number[]) => {
    const drives: Drive[] = [];
    for (const [i, session] of sessions.entries()) {
      const options = { address: server.address, sessionId: `bench-${session.id}-${mode}`, windowTokens: windows?.[i] ?? fixedWindow };
      drives.push(
        await driveGeminiCli(core, scratch, session, mode, ceilingOverride === undefined ? options : { ...options, ceilingPercent: ceilingOverride }),
      );
    }
    return drives;
  };
  const alone = await drive("false");
  windows = windowsOf(alone);
  rows.push(summarise("Gemini CLI alone", sessions, alone, windows));
  rows.push(summarise("with ctxopt", sessions, await drive("true", windows), windows));
} finally {
  await server.stop();
  rmSync(scratch, { recursive: true, force: true });
}

const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
const windowText =
  windowShare === undefined
    ? `window ${fmt(fixedWindow)} tokens`
    : `window per session: fixed prompt + ${windowShare} x history (${fmt(Math.min(...windows))}-${fmt(Math.max(...windows))} tokens)`;
const ceilingText = ceilingOverride === undefined ? "the adapter's ceiling rule" : `ceilingPercent ${ceilingOverride}`;
console.log(`${sessionCount} sessions, ${windowText}, Gemini CLI compresses at ${fmt(geminiCliCompactionLine(MODEL))} tokens (${MODEL}), ${ceilingText}`);
console.log(
  "mode              requests  tokens sent  mean/request  max (% window)  >window  collections  fallbacks  adapter ms mean/p95  steady prefix" +
    "  lands at  needed-later recall",
);
for (const r of rows) {
  const cells = [
    r.mode.padEnd(16),
    String(r.requests).padStart(8),
    fmt(r.tokensSent).padStart(11),
    fmt(r.meanTokens).padStart(12),
    `${fmt(r.maxTokens)} (${r.maxPercent.toFixed(0)}%)`.padStart(14),
    String(r.overWindow).padStart(7),
    String(r.collections).padStart(11),
    String(r.fallbacks).padStart(9),
    `${r.adapterMsMean.toFixed(1)} / ${r.adapterMsP95.toFixed(1)}`.padStart(19),
    `${(100 * r.steadyPrefix).toFixed(0).padStart(12)}%`,
    (r.landsAtPercent === null ? "-" : `${r.landsAtPercent.toFixed(1)}%`).padStart(8),
    `${r.neededLaterRecall.toFixed(3)} (${r.recallRequests})`.padStart(19),
  ];
  console.log(cells.join("  "));
}
const out = join(packageRoot, "bench/results", values.smoke ? "gemini_cli_smoke.json" : "gemini_cli.json");
mkdirSync(join(packageRoot, "bench/results"), { recursive: true });
const settings = {
  sessions: sessionCount,
  windowTokens: windowShare === undefined ? fixedWindow : null,
  windowShare: windowShare ?? null,
  ceilingPercent: ceilingOverride ?? null,
};
writeFileSync(out, `${JSON.stringify({ ...settings, windows, rows }, null, 2)}\n`);
console.log(`wrote ${out}`);
process.exit(0);

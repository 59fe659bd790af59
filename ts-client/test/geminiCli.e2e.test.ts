import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Strategy } from "../src/generated/ctxopt/v1/ctxopt.js";
import { findViolations } from "../src/gemini/history.js";
import type { ContextReport } from "../src/explain.js";
import { estimateContentsTokens } from "../src/gemini/tokens.js";
import { type Drive, driveGeminiCli } from "./support/geminiCliDriver.js";
import { cliPath } from "./support/paths.js";
import { type RunningServer, startServer } from "./support/server.js";
import { loadSessions, type Session } from "./support/trajectories.js";

// Gemini CLI keeps its state under HOME: give it a scratch one before it loads.
const scratch = mkdtempSync(join(tmpdir(), "ctxopt-gemini-e2e-"));
process.env["HOME"] = scratch;
process.env["GEMINI_CLI_HOME"] = scratch;
const core = await import("@google/gemini-cli-core");
const { hardenHistory } = await import("@google/gemini-cli-core/dist/src/utils/historyHardening.js");

const WINDOW_TOKENS = 40_000;
// The ceiling at half the window (the override; the default rule would make it the whole window, Gemini CLI's
// line being 524,288 tokens): every session (~23k-46k tokens) is cut, and the largest latest turns still fit.
const CEILING_PERCENT = 50;
const SESSIONS = loadSessions([0, 9, 27]);

let server: RunningServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
  if (!process.env["CTXOPT_E2E_KEEP"]) rmSync(scratch, { recursive: true, force: true });
});

function drive(session: Session, mode: string): Promise<Drive> {
  return driveGeminiCli(core, scratch, session, mode, {
    address: server.address,
    sessionId: `e2e-${session.id}-${mode}`,
    windowTokens: WINDOW_TOKENS,
    ceilingPercent: CEILING_PERCENT,
  });
}

const results = new Map<string, Drive>();
async function driven(session: Session): Promise<Drive> {
  let result = results.get(session.id);
  if (result === undefined) {
    result = await drive(session, "true");
    results.set(session.id, result);
  }
  return result;
}
async function exchangesOf(session: Session): Promise<Drive["exchanges"]> {
  return (await driven(session)).exchanges;
}

for (const session of SESSIONS) {
  test(`${session.id}: every request through the adapter passes Gemini CLI's own checks and fits the window`, async () => {
    const exchanges = await exchangesOf(session);
    assert.equal(exchanges.length, session.steps.length + 1);
    const optimized = exchanges.filter((e) => estimateContentsTokens(e.sent) < estimateContentsTokens(e.received));
    assert.ok(optimized.length >= exchanges.length / 3, `optimized ${optimized.length} of ${exchanges.length} requests`);
    const chat = new core.GeminiChat(config0(), "", [], []);
    exchanges.forEach(({ sent, summary, reportedPromptTokens }, index) => {
      const where = `request ${index} (${summary.outcome}: ${summary.note})`;
      // The whole prompt as the model counts it: contents, system instruction, tool declarations.
      assert.ok(reportedPromptTokens <= WINDOW_TOKENS, `${where}: ${reportedPromptTokens} tokens fit the window`);
      assert.doesNotThrow(() => new core.GeminiChat(config0(), "", [], sent), `${where}: GeminiChat accepts it as a history`);
      chat.setHistory(sent);
      assert.deepEqual(chat.getHistory(true), sent, `${where}: Gemini CLI's curated history keeps every turn`);
      const hardened = hardenHistory(sent.map((content, i) => ({ id: `turn-${i}`, content: structuredClone(content) }))).map((turn) => turn.content);
      assert.deepEqual(hardened, sent, `${where}: hardenHistory changes nothing`);
      assert.deepEqual(findViolations(sent), [], `${where}: Gemini's history rules hold`);
    });
  });

  test(`${session.id}: calls pair with responses by id and name; the latest turn and pending call stay; parallel steps keep their signed call`, async () => {
    const exchanges = await exchangesOf(session);
    exchanges.forEach(({ received, sent }, index) => {
      assert.deepEqual(sent.at(-1), received.at(-1), `request ${index}: the latest turn is sent as received`);
      if ((received.at(-1)?.parts ?? []).some((p) => p.functionResponse !== undefined)) {
        // When every turn between an older model turn and it was removed, the older one's parts are
        // merged in front (roles must alternate); the call's own parts stay as received, in order.
        const pending = received.at(-2)?.parts ?? [];
        assert.deepEqual(sent.at(-2)?.parts?.slice(-pending.length), pending, `request ${index}: the pending call's turn is sent as received`);
        assert.equal(sent.at(-2)?.role, received.at(-2)?.role);
      }
      sent.forEach((content, turn) => {
        const calls = (content.parts ?? []).filter((p) => p.functionCall !== undefined);
        if (content.role !== "model" || calls.length === 0) return;
        const answers = (sent[turn + 1]?.parts ?? []).filter((p) => p.functionResponse !== undefined);
        if (turn + 1 < sent.length) {
          assert.deepEqual(
            answers.map((p) => [p.functionResponse!.id, p.functionResponse!.name]),
            calls.map((p) => [p.functionCall!.id, p.functionCall!.name]),
            `request ${index} turn ${turn}: every call answered by id and name`,
          );
        }
        assert.ok(calls[0]!.thoughtSignature?.startsWith("sig-"), `request ${index} turn ${turn}: the step's first call is the signed one`);
      });
      for (const part of sent.flatMap((c) => c.parts ?? [])) {
        const output = part.functionResponse?.response?.["output"];
        assert.ok(typeof output !== "string" || !output.startsWith("run_shell_command: "), `request ${index}: no tool-name prefix in an output`);
      }
    });
    assert.ok(session.parallelSteps.length > 0, "the session has parallel steps");
  });

  test(`${session.id}: between collections the prompt's prefix is byte-identical from call to call`, async () => {
    const exchanges = await exchangesOf(session);
    let steady = 0;
    if (process.env["CTXOPT_E2E_DEBUG"])
      for (const e of exchanges) console.log(e.summary.outcome, e.summary.tokensBefore, e.summary.tokensAfter, e.summary.serverMs.toFixed(1), e.summary.note);
    for (let i = 1; i < exchanges.length; i += 1) {
      const { summary } = exchanges[i]!;
      const collected = summary.serverMs > 0 || summary.outcome === "fallback";
      if (collected) continue;
      const previous = exchanges[i - 1]!.sent;
      assert.equal(
        JSON.stringify(exchanges[i]!.sent.slice(0, previous.length)),
        JSON.stringify(previous),
        `request ${i} (${summary.outcome}: ${summary.note}) starts with request ${i - 1}`,
      );
      steady += 1;
    }
    assert.ok(steady > exchanges.length / 3, `${steady} steady requests of ${exchanges.length}`);
  });
}

test("with GEMINI_CONTEXT_OPTIMIZATION=false the adapter sends exactly what Gemini CLI gives it", async () => {
  const { exchanges } = await drive(SESSIONS[0]!, "false");
  for (const { received, sent } of exchanges) assert.deepEqual(sent, received);
});

let sharedConfig: InstanceType<typeof core.Config> | undefined;
function config0(): InstanceType<typeof core.Config> {
  sharedConfig ??= new core.Config({ sessionId: "validation", targetDir: scratch, cwd: scratch, debugMode: false, model: "gemini-2.5-pro" });
  return sharedConfig;
}

function explain(args: readonly string[]): ContextReport {
  // A 12.5k window, the ceiling (Gemini CLI's line is far above): a collection now (to TARGET_SHARE of it) must cut
  // into the ~23k-token session.
  const run = spawnSync(process.execPath, [cliPath, ...args, "--addr", server.address, "--context-limit", "12500", "--json"], {
    encoding: "utf8",
    env: { ...process.env, HOME: scratch },
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout) as ContextReport;
}

test("ctxopt-prompt context reads Gemini CLI's own session recording: tokens by category and the largest chunks with decisions", async () => {
  const { recording } = await driven(SESSIONS[0]!);
  const report = explain(["context", recording]);
  const { loadConversationRecord, convertSessionToClientHistory } = core;
  const record = await loadConversationRecord(recording);
  const recorded = convertSessionToClientHistory(record!.messages).map((turn) => turn.content);
  assert.equal(report.totalTokens, estimateContentsTokens(recorded));
  assert.equal(
    Object.values(report.byCategory).reduce((a, b) => a + b, 0),
    report.totalTokens,
  );
  // The test answers tool calls itself (no scheduler records them), so the recording holds their responses only.
  assert.ok(report.byCategory["tool outputs"] > 0, JSON.stringify(report.byCategory));
  assert.ok(report.byCategory["model text"] > 0 && report.byCategory["user text"] > 0);
  assert.equal(report.largest.length, 10);
  assert.deepEqual(
    report.largest.map((c) => c.tokens),
    [...report.largest.map((c) => c.tokens)].sort((a, b) => b - a),
  );
  const removed = report.largest.filter((c) => c.decision !== "KEEP");
  assert.ok(removed.length > 0 && removed.every((c) => c.reasons.length > 0), JSON.stringify(report.largest));
  assert.ok(report.stashedTokens > 0 && report.tokensAfter! < report.totalTokens);
});

test("ctxopt-prompt --explain reads a /chat save checkpoint ({history: Content[]})", async () => {
  const { history } = await driven(SESSIONS[0]!);
  const checkpoint = join(scratch, "checkpoint-tag.json");
  writeFileSync(checkpoint, JSON.stringify({ history }));
  const report = explain(["--explain", "--history", checkpoint]);
  assert.equal(report.totalTokens, estimateContentsTokens(history));
  assert.ok(report.byCategory["user text"] > 0);
  assert.equal(report.noPlan, undefined);
});

test("acting before Gemini CLI's compression threshold keeps the prompt size it sees under that line (without the adapter it crosses it)", async () => {
  // Gemini CLI compresses at 5% of gemini-2.5-pro's 1,048,576 tokens here; the adapter acts at 4% and lands at 3%.
  const compressionLine = 0.05 * 1_048_576;
  const session = SESSIONS[2]!;
  const drives: Record<string, Drive> = {};
  for (const mode of ["false", "true"]) {
    drives[mode] = await driveGeminiCli(
      core,
      scratch,
      session,
      mode,
      { address: server.address, sessionId: `e2e-compression-${mode}`, thresholdPercent: 4, targetPercent: 3 },
      { compressionThreshold: 0.05 },
    );
  }
  const reported = (mode: string) => drives[mode]!.exchanges.map((e) => e.reportedPromptTokens);
  assert.ok(Math.max(...reported("false")) >= compressionLine, `alone: up to ${Math.max(...reported("false"))} tokens`);
  assert.ok(Math.max(...reported("true")) < compressionLine, `with ctxopt: up to ${Math.max(...reported("true"))} tokens`);
  assert.equal(drives["true"]!.compressions, 0);
  assert.ok(
    drives["true"]!.exchanges.some((e) => e.summary.serverMs > 0),
    "the adapter collected",
  );
});

/** Gemini CLI at a compressionThreshold of 3%, read from its config; the reported prompt sizes and the line. */
async function atThreePercent(options: { sessionId: string; strategy?: Strategy }): Promise<{ drive: Drive; reported: number[]; line: number }> {
  const drive = await driveGeminiCli(core, scratch, SESSIONS[2]!, "true", { address: server.address, ...options }, { compressionThreshold: 0.03 });
  return { drive, reported: drive.exchanges.map((e) => e.reportedPromptTokens), line: 0.03 * 1_048_576 };
}

test("with the hybrid strategy's excerpts too, the adapter keeps under Gemini CLI's compression line", async () => {
  // The service plans in its own counts; when the result would still pass the line
  // (excerpts carry Gemini CLI's larger estimate), a second, forced collection lands it.
  const { drive, reported, line } = await atThreePercent({ sessionId: "e2e-compression-hybrid", strategy: Strategy.STRATEGY_HYBRID });
  assert.ok(Math.max(...reported) < line, `with ctxopt: up to ${Math.max(...reported)} tokens`);
  assert.ok(
    drive.exchanges.some((e) => (e.summary.trimmed ?? 0) > 0),
    "the hybrid strategy made excerpts",
  );
});

test("without any percent set the adapter reads Gemini CLI's compressionThreshold from its config and keeps under that line", async () => {
  // The window is the model's (1,048,576 tokens); Gemini CLI compresses at 3% of it: the line is the ceiling.
  const { drive, reported, line: compressionLine } = await atThreePercent({ sessionId: "e2e-compression-read" });
  assert.ok(Math.max(...reported) < compressionLine, `with ctxopt: up to ${Math.max(...reported)} tokens`);
  assert.ok(Math.max(...reported) > 0.8 * compressionLine, `the line is used, not halved: up to ${Math.max(...reported)} tokens`);
  assert.equal(drive.compressions, 0);
  assert.ok(
    drive.exchanges.some((e) => e.summary.serverMs > 0),
    "the adapter collected",
  );
});

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CtxoptClient } from "../src/client.js";
import { DEFAULT_FLAGS, type Flags } from "../src/flags.js";
import { Action, Decision, GcPolicy, Strategy } from "../src/generated/ctxopt/v1/ctxopt.js";
import { findViolations } from "../src/gemini/history.js";
import { chunksOf, mapContents } from "../src/gemini/mapping.js";
import type { Content } from "../src/gemini/types.js";
import {
  GEMINI_CLI_COMPRESSION_PERCENT,
  HOST_PRESSURE_PERCENT,
  HOST_TARGET_PERCENT,
  HOST_THRESHOLD_PERCENT,
  HostHistoryOptimizer,
  type HostOptimizerOptions,
  PRESSURE_SHARE,
  recentRoots,
  signedCallsToKeep,
  STRATEGY,
  TARGET_SHARE,
  THRESHOLD_SHARE,
} from "../src/hostOptimizer.js";
import { PromptBuilder } from "../src/promptBuilder.js";
import { estimateContentsTokens } from "../src/gemini/tokens.js";
import { call, model, response, text, user } from "./support/histories.js";
import { closedPort } from "./support/network.js";
import { type RunningServer, startServer } from "./support/server.js";

let server: RunningServer;
const optimizers: HostHistoryOptimizer[] = [];
before(async () => {
  server = await startServer();
});
after(async () => {
  optimizers.forEach((o) => o.close());
  await server.stop();
});

let sessions = 0;
function optimizer(flags: Partial<Flags> = {}, options: HostOptimizerOptions = {}): HostHistoryOptimizer {
  sessions += 1;
  const made = new HostHistoryOptimizer({
    flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 5000, address: server.address, ...flags },
    sessionId: `host-test-${process.pid}-${sessions}`,
    windowTokens: 8_000,
    ...options,
  });
  optimizers.push(made);
  return made;
}

const SESSION_CONTEXT = "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Monday.\n</session_context>";

/** A tool session: Gemini CLI's environment turn with the task, then `steps` shell calls with ~`outputTokens` of output each. */
function toolSession(steps: number, outputTokens = 400): Content[] {
  const contents: Content[] = [user(text(SESSION_CONTEXT), text("Fix the failing date parser in utils/dates.py."))];
  for (let i = 0; i < steps; i += 1) {
    const id = `c${i}`;
    contents.push(
      model(text(`Step ${i}: look at part ${i}.`), { ...call("run_shell_command", id, { command: `cat part${i}.txt` }), thoughtSignature: `sig-${i}` }),
    );
    const output = Array.from({ length: outputTokens / 10 }, (_, line) => `part ${i} line ${line}: lorem ipsum`).join("\n");
    contents.push(user(response("run_shell_command", id, output)));
  }
  return contents;
}

test("a request ending with a pending functionCall keeps it (and the history stays valid)", async () => {
  const contents = [...toolSession(30), model({ ...call("run_shell_command", "pending", { command: "pytest" }), thoughtSignature: "sig-p" })];
  const result = await optimizer().optimize(contents);
  assert.ok(estimateContentsTokens(result.contents) < estimateContentsTokens(contents), result.summaryLine);
  assert.deepEqual(result.contents.at(-1), contents.at(-1));
  assert.deepEqual(findViolations(result.contents), []);
});

test("PromptBuilder keeps a history's trailing pending call when the message answers it", async () => {
  const history = [...toolSession(30), model({ ...call("run_shell_command", "pending", { command: "pytest" }), thoughtSignature: "sig-p" })];
  const builder = new PromptBuilder({
    flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 5000, address: server.address },
    budget: { contextLimitTokens: 8_000 },
  });
  try {
    const built = await builder.build({
      sessionId: `pb-pending-${process.pid}`,
      model: "gemini-2.5-pro",
      history,
      message: [response("run_shell_command", "pending", "3 passed")],
    });
    assert.equal(built.summary.outcome, "optimized", built.summaryLine);
    assert.deepEqual(built.contents.at(-2), history.at(-1));
    assert.deepEqual(built.history.at(-1), history.at(-1));
  } finally {
    builder.close();
  }
});

test("the local fallback recognises Gemini CLI 0.61's <session_context> turn and keeps it with the user's task", async () => {
  const port = await closedPort();
  const contents = toolSession(30);
  const result = await optimizer({ address: `127.0.0.1:${port}`, deadlineMs: 300 }).optimize(contents);
  assert.equal(result.summary.outcome, "fallback", result.summaryLine);
  assert.ok(result.summary.droppedTurns > 0);
  assert.deepEqual(result.contents[0], contents[0]);
  assert.deepEqual(findViolations(result.contents), []);
});

test("after a failure the circuit breaker skips the service for CTXOPT_BREAKER_MS and the summary says so", async () => {
  const port = await closedPort();
  const host = optimizer({ address: `127.0.0.1:${port}`, deadlineMs: 400, breakerMs: 60_000 });
  const first = await host.optimize(toolSession(30));
  assert.match(first.summary.note, /service unavailable/);
  const second = await host.optimize(toolSession(31));
  assert.equal(second.summary.outcome, "fallback");
  assert.match(second.summaryLine, /service skipped for \d+ s after a failure \(service unavailable in .*; circuit open\)/);
});

test("recent turns the target cannot hold are not made roots: the plan lands under the window instead of falling back", async () => {
  // Asked to keep every turn as a root, the service could not reach the target and the whole exceeds the window.
  const contents = toolSession(12, 1_000);
  const result = await optimizer({}, { windowTokens: 6_000, recentTurns: 100 }).optimize(contents);
  assert.ok(estimateContentsTokens(contents) > 6_000);
  assert.equal(result.summary.outcome, "optimized", result.summaryLine);
  assert.ok(result.summary.tokensAfter <= 6_000, result.summaryLine);
  assert.ok((await serviceCount(result.contents)) <= 6_000, result.summaryLine);
  assert.deepEqual(result.contents.at(-1), contents.at(-1));
  assert.deepEqual(findViolations(result.contents), []);
});

test("PromptBuilder never sends an infeasible plan over the window either", async () => {
  const history = [...toolSession(12, 1_000), model(text("I have read every part."))];
  const builder = new PromptBuilder({
    flags: { ...DEFAULT_FLAGS, mode: "true", deadlineMs: 5000, address: server.address },
    budget: { contextLimitTokens: 6_000, recentTurns: 100 },
  });
  try {
    const built = await builder.build({ sessionId: `pb-infeasible-${process.pid}`, model: "gemini-2.5-pro", history, message: "Go on." });
    assert.ok(built.summary.tokensAfter <= 6_000, built.summaryLine);
    assert.equal(built.summary.outcome, "fallback", built.summaryLine);
    assert.match(built.summary.note, /window/);
    assert.deepEqual(findViolations(built.contents), []);
  } finally {
    builder.close();
  }
});

test("when the host owns the history, a later call sends only the new chunks and removes none", async () => {
  const host = optimizer({}, { thresholdPercent: 1 });
  const first = await host.optimize(toolSession(30));
  assert.ok(first.sync !== undefined && first.sync.appended > 0, first.summaryLine);
  const second = await host.optimize(toolSession(31));
  // Turn 31 adds a model turn (text + call) and a user turn (response): 3 new parts.
  assert.deepEqual({ appended: second.sync?.appended, removed: second.sync?.removed }, { appended: 3, removed: 0 }, second.summaryLine);
});

test("earlier decisions are re-applied without the service while under the threshold: the prefix is byte-identical", async () => {
  const host = optimizer();
  const first = await host.optimize(toolSession(30));
  assert.equal(first.summary.outcome, "optimized", first.summaryLine);
  const second = await host.optimize(toolSession(31));
  assert.equal(second.plan, undefined, second.summaryLine);
  assert.equal(JSON.stringify(second.contents.slice(0, first.contents.length)), JSON.stringify(first.contents));
});

test("a split parallel step keeps its signed call: removing it is undone while a sibling stays", () => {
  const turns = mapContents([
    user(text("go")),
    model({ ...call("read_file", "a"), thoughtSignature: "sig" }, call("read_file", "b")),
    user(response("read_file", "a", "A"), response("read_file", "b", "B")),
  ]);
  const [signed, sibling] = turns[1]!.parts;
  const [answerA] = turns[2]!.parts;
  const stash = (id: string) => Decision.fromPartial({ chunkId: id, action: Action.ACTION_STASH });
  const split = new Map([
    [signed!.chunk.id, stash(signed!.chunk.id)],
    [answerA!.chunk.id, stash(answerA!.chunk.id)],
  ]);
  assert.deepEqual(signedCallsToKeep(turns, split), [signed!.chunk.id, answerA!.chunk.id]);
  const whole = new Map([...split, [sibling!.chunk.id, stash(sibling!.chunk.id)]]);
  assert.deepEqual(signedCallsToKeep(turns, whole), []);
});

test("with the flag off the contents pass through untouched and the service is not asked", async () => {
  const port = await closedPort();
  const contents = toolSession(30);
  const result = await optimizer({ mode: "false", address: `127.0.0.1:${port}` }).optimize(contents);
  assert.equal(result.summary.outcome, "pass-through");
  assert.deepEqual(result.contents, contents);
});

/** 20 shell calls of 300-line logs; one line of log 3 is what the latest question asks about. */
function logSession(): Content[] {
  const contents: Content[] = [user(text("Fix the failing date parser."))];
  for (let i = 0; i < 20; i += 1) {
    const id = `c${i}`;
    contents.push(model(text(`step ${i}`), { ...call("run_shell_command", id, { command: `cat log${i}` }), thoughtSignature: `s${i}` }));
    const lines = Array.from({ length: 300 }, (_, l) => `log ${i} line ${l}: ordinary output number ${l * 7}`);
    if (i === 3) lines[150] = "ERROR ZEBRA_TOKEN_42 failure in parse_date at dates.py:88";
    contents.push(user(response("run_shell_command", id, lines.join("\n"))));
  }
  contents.push(model(text("I looked at all logs.")), user(text("Why does ZEBRA_TOKEN_42 fail in parse_date?")));
  return contents;
}

test("a trimmed tool output is the excerpt itself: no tool-name prefix, name and id kept", async () => {
  const contents = logSession();
  const result = await optimizer({}, { windowTokens: 150_000, thresholdPercent: 40, targetPercent: 30, strategy: Strategy.STRATEGY_HYBRID }).optimize(contents);
  assert.ok(result.summary.trimmed > 0, result.summaryLine);
  const outputs = result.contents.flatMap((c) => (c.parts ?? []).flatMap((p) => (p.functionResponse ? [p.functionResponse] : [])));
  const trimmed = outputs.filter((r) => String(r.response?.["output"]).startsWith("[ctxopt: trimmed"));
  assert.ok(trimmed.length > 0);
  for (const r of outputs) assert.ok(!String(r.response?.["output"]).startsWith("run_shell_command: "), String(r.response?.["output"]).slice(0, 80));
  for (const r of trimmed) assert.equal(r.name, "run_shell_command");
  assert.ok(trimmed.every((r) => typeof r.id === "string" && r.id.startsWith("c")));
  assert.match(JSON.stringify(result.contents), /ZEBRA_TOKEN_42 failure in parse_date/);
});

test("shadow mode asks for a dry plan, reports what it would save and sends the original", async () => {
  const contents = toolSession(30);
  const result = await optimizer({ mode: "shadow" }).optimize(contents);
  assert.equal(result.summary.outcome, "shadow");
  assert.deepEqual(result.contents, contents);
  assert.ok(result.summary.tokensAfter < result.summary.tokensBefore, result.summaryLine);
  assert.match(result.summaryLine, /would save/);
});

test("a chunk restored (and pinned) on the service comes back into the prompt at the next collection", async () => {
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    const host = optimizer();
    const first = await host.optimize(toolSession(30));
    const stashed = first.plan!.decisions.find((d) => d.action === Action.ACTION_STASH && /^t\d+\.0-/.test(d.chunkId));
    assert.ok(stashed !== undefined, first.summaryLine);
    const turn = Number(/^t(\d+)\./.exec(stashed.chunkId)![1]);
    const restoredPart = JSON.stringify(toolSession(30)[turn]!.parts![0]);
    await client.restore({ sessionId: host.sessionId, chunkIds: [stashed.chunkId], force: true });
    await client.updateChunks({ sessionId: host.sessionId, updates: [{ id: stashed.chunkId, pinned: true }] });
    let later = await host.optimize(toolSession(31));
    assert.ok(!JSON.stringify(later.contents).includes(restoredPart), "between collections the earlier decision holds");
    for (let steps = 32; later.plan === undefined && steps < 60; steps += 1) later = await host.optimize(toolSession(steps));
    assert.ok(later.plan !== undefined, "a collection ran");
    assert.ok(later.plan.keptIds.includes(stashed.chunkId));
    assert.ok(JSON.stringify(later.contents).includes(restoredPart), later.summaryLine);
  } finally {
    client.close();
  }
});

/** The service's cl100k count of what a request sends (its parts as chunks, counted by a fresh session). */
async function serviceCount(contents: readonly Content[]): Promise<number> {
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    const chunks = chunksOf(mapContents(contents)).map((c) => ({ ...c, tokens: 0 }));
    const answer = await client.appendChunks({ sessionId: `count-${process.pid}-${(sessions += 1)}`, chunks });
    return answer.chunks.reduce((sum, c) => sum + c.tokens, 0);
  } finally {
    client.close();
  }
}

/** Hex words: cl100k needs about 2.4 times Gemini CLI's chars/4 estimate for them. */
function denseSession(steps: number): Content[] {
  const contents: Content[] = [user(text("Find the corrupted block in the dump."))];
  for (let i = 0; i < steps; i += 1) {
    contents.push(model(text(`Step ${i}.`), call("run_shell_command", `d${i}`, { command: `xxd block${i}` })));
    const words = Array.from({ length: 300 }, (_, w) => ((((i + 1) * 40503 + w) * 2654435761) % 2 ** 32).toString(16).padStart(8, "0"));
    contents.push(user(response("run_shell_command", `d${i}`, words.join(" "))));
  }
  return contents;
}

test("a request fits the window by the service's cl100k count when chars/4 underestimates it (dense hex)", async () => {
  const contents = denseSession(8);
  assert.ok(estimateContentsTokens(contents) < 0.9 * 8_000, "below the threshold by Gemini CLI's estimate");
  assert.ok((await serviceCount(contents)) > 8_000, "over the window by cl100k");
  const result = await optimizer().optimize(contents);
  assert.ok(result.changed, result.summaryLine);
  assert.ok((await serviceCount(result.contents)) <= 8_000, result.summaryLine);
  assert.deepEqual(findViolations(result.contents), []);
});

test("between collections the window count of the uncounted new turns is their UTF-8 bytes: a large new output is counted before it is sent", async () => {
  const host = optimizer();
  const first = await host.optimize(denseSession(3));
  assert.equal(first.summary.outcome, "below-threshold", first.summaryLine);
  const grown = await host.optimize(denseSession(8));
  assert.ok((await serviceCount(grown.contents)) <= 8_000, grown.summaryLine);
});

test("the defaults are shares of the ceiling: the window for optimizeContents, Gemini CLI's compression line inside it", () => {
  const plain = optimizer();
  assert.deepEqual(plain.percents, { threshold: 100 * THRESHOLD_SHARE, target: 100 * TARGET_SHARE, pressure: 100 * PRESSURE_SHARE });
  const cli = optimizer({}, { ceilingPercent: GEMINI_CLI_COMPRESSION_PERCENT });
  assert.deepEqual(cli.percents, { threshold: HOST_THRESHOLD_PERCENT, target: HOST_TARGET_PERCENT, pressure: HOST_PRESSURE_PERCENT });
  assert.ok(HOST_THRESHOLD_PERCENT <= GEMINI_CLI_COMPRESSION_PERCENT, "never past Gemini CLI's own compression line");
  assert.deepEqual(
    optimizer({ thresholdPercent: 30 }).percents,
    { threshold: 30, target: 30, pressure: 100 * PRESSURE_SHARE },
    "a low threshold drags the target along",
  );
});

test("recent turns stay roots only as far as they fit in the room the target leaves", () => {
  const turns = mapContents([user(text("a".repeat(400))), model(text("b".repeat(400))), user(text("c".repeat(400)))]); // 100 tokens each
  assert.equal(recentRoots(turns, 10, 1_000), 3);
  assert.equal(recentRoots(turns, 2, 1_000), 2);
  assert.equal(recentRoots(turns, 10, 250), 2);
  assert.equal(recentRoots(turns, 10, 50), 0);
});

test("a latest tool output larger than the window alone is clipped (head and tail kept) so the request fits", async () => {
  const lines = Array.from({ length: 2_000 }, (_, l) => `line ${l}: ${"output ".repeat(4)}`);
  const contents: Content[] = [
    user(text("Run the tests.")),
    model(call("run_shell_command", "t1", { command: "pytest" })),
    user(response("run_shell_command", "t1", lines.join("\n"))),
  ];
  const result = await optimizer().optimize(contents);
  assert.equal(result.summary.outcome, "fallback", result.summaryLine);
  assert.match(result.summaryLine, /clipped/);
  const output = String(result.contents.at(-1)!.parts![0]!.functionResponse!.response!["output"]);
  assert.ok(output.startsWith("line 0:") && output.endsWith(lines.at(-1)!), "head and tail kept");
  assert.match(output, /\[ctxopt: \d+ characters clipped to fit the window\]/);
  assert.ok((await serviceCount(result.contents)) <= 8_000, result.summaryLine);
});

/** `client` with every Optimize request it sends recorded in `asked`. */
function recording(client: CtxoptClient, asked: Parameters<CtxoptClient["optimize"]>[0][]): CtxoptClient {
  return new Proxy(client, {
    get: (target, property) => {
      if (property === "optimize") {
        return (request: Parameters<CtxoptClient["optimize"]>[0], settings?: Parameters<CtxoptClient["optimize"]>[1]) => {
          asked.push(request);
          return target.optimize(request, settings);
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

test("the service is asked for the adapter's STRATEGY unless the caller names another", async () => {
  const asked: Parameters<CtxoptClient["optimize"]>[0][] = [];
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    await optimizer({}, { client: recording(client, asked) }).optimize(toolSession(30));
    await optimizer({}, { client: recording(client, asked), strategy: Strategy.STRATEGY_HYBRID }).optimize(toolSession(30));
    assert.deepEqual(
      asked.map((r) => r.strategy),
      [STRATEGY, Strategy.STRATEGY_HYBRID],
    );
  } finally {
    client.close();
  }
});

/** A mini-swe-agent-style session: the task as the first user turn, then steps that narrate and call. */
function taskSession(steps: number): Content[] {
  const contents: Content[] = [user(text(`Fix the failing date parser. ${"Details of the report. ".repeat(40)}`))];
  for (let i = 0; i < steps; i += 1) {
    contents.push(
      model(text(`THOUGHT: step ${i} reads part ${i}. ${"reasoning ".repeat(150)}`), call("run_shell_command", `c${i}`, { command: `cat part${i}.txt` })),
    );
    contents.push(user(response("run_shell_command", `c${i}`, Array.from({ length: 30 }, (_, line) => `part ${i} line ${line}: lorem ipsum`).join("\n"))));
  }
  return contents;
}

test("the first prompt (the task) is a root, and a step's narration goes before any tool output", async () => {
  const asked: Parameters<CtxoptClient["optimize"]>[0][] = [];
  const client = new CtxoptClient(server.address, { deadlineMs: 5000 });
  try {
    const contents = taskSession(20);
    const result = await optimizer({}, { client: recording(client, asked) }).optimize(contents);
    assert.equal(result.summary.outcome, "optimized", result.summaryLine);
    const task = mapContents(contents)[0]!.parts[0]!.chunk.id;
    assert.ok(asked[0]?.roots?.rootIds?.includes(task), "the task's chunk is a root");
    const sent = result.contents;
    assert.deepEqual(sent[0], contents[0], "the task is sent as it is");
    const outputs = (cs: Content[]) => cs.flatMap((c) => c.parts ?? []).filter((p) => p.functionResponse !== undefined).length;
    const narrations = (cs: Content[]) =>
      cs
        .filter((c) => c.role === "model")
        .flatMap((c) => c.parts ?? [])
        .filter((p) => p.text !== undefined).length;
    assert.ok(narrations(sent) < narrations(contents), "narration went");
    // narration goes first: while any non-root narration is out, every output but those of the removed steps stays
    assert.equal(outputs(sent), outputs(contents), "every tool output stays while narration can go");
    assert.equal(findViolations(sent).length, 0);
  } finally {
    client.close();
  }
});

test("with the step text at its kind's policy, narration and outputs go by age together", async () => {
  const contents = taskSession(20);
  const result = await optimizer({}, { stepTextPolicy: GcPolicy.GC_POLICY_UNSPECIFIED }).optimize(contents);
  const outputs = (cs: Content[]) => cs.flatMap((c) => c.parts ?? []).filter((p) => p.functionResponse !== undefined).length;
  assert.ok(outputs(result.contents) < outputs(contents), result.summaryLine);
});

test("reportUsage: fewer tokens than counted change nothing, an implausible report is ignored, more shrink the window", async () => {
  // a collection has the service count every part sent, so each report has a basis
  const host = optimizer();
  const windows: number[] = [];
  let last = await host.optimize(toolSession(30));
  for (const ratio of [0.5, 3, 1.25]) {
    host.reportUsage(Math.round(last.summary.tokensAfter * ratio));
    last = await host.optimize(toolSession(30));
    windows.push(Math.round(last.summary.windowTokens));
  }
  assert.deepEqual(windows.slice(0, 2), [8_000, 8_000]);
  assert.ok(Math.abs(windows[2]! - 8_000 / 1.25) <= 1, `${windows[2]}`);
  assert.ok(last.summary.tokensAfter <= 8_000 / 1.25, last.summaryLine);
});

test("a report about a request with parts the service has not counted calibrates nothing (their bytes are no count)", async () => {
  const host = optimizer();
  const first = await host.optimize(toolSession(2));
  assert.equal(first.summary.outcome, "below-threshold");
  host.reportUsage(first.summary.tokensAfter * 1.5);
  assert.equal((await host.optimize(toolSession(2))).summary.windowTokens, 8_000);
});

test("empty parts (a signature's empty text, a silent command's output) do not make the service refuse the request", async () => {
  const contents = toolSession(30);
  contents.push(model({ text: "", thoughtSignature: "sig-empty" }, call("run_shell_command", "silent", { command: "touch done" })));
  contents.push(user(response("run_shell_command", "silent", "")));
  const result = await optimizer().optimize(contents);
  assert.equal(result.summary.outcome, "optimized", result.summaryLine);
  assert.deepEqual(result.contents.at(-1), contents.at(-1));
});

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CtxoptClient } from "../src/client.js";
import { DEFAULT_FLAGS, type OptimizationMode } from "../src/flags.js";
import type { Content } from "../src/gemini/types.js";
import { Action, Decision, OptimizeResponse } from "../src/generated/ctxopt/v1/ctxopt.js";
import { applyPlanDelta } from "../src/planDelta.js";
import { type BuiltPrompt, PromptBuilder, type PromptInput } from "../src/promptBuilder.js";
import { call, model, response, text, user } from "./support/histories.js";
import { type RunningServer, startServer } from "./support/server.js";

const decision = (chunkId: string, score = 0.5): Decision =>
  Decision.fromPartial({ chunkId, action: Action.ACTION_MASK, tokens: 100, tokensAfter: 10, score, replacementText: `[${chunkId}]` });
const held = OptimizeResponse.fromPartial({ planId: "p1", keptIds: ["a", "b", "c", "d"], decisions: [decision("x"), decision("y")], triggered: true });

test("applyPlanDelta copies runs of the held plan, takes new entries in order and sets moved scores", () => {
  const delta = OptimizeResponse.fromPartial({
    planId: "p2",
    basePlanId: "p1",
    keptIds: ["e"],
    keptRuns: [0, 2, -1, 1, 3, 1],
    decisions: [decision("z", 0.9)],
    decisionRuns: [1, 1, -1, 1],
    decisionScores: [0.25, 0.9],
    tokensAfter: 42,
  });
  const plan = applyPlanDelta(held, delta)!;
  assert.deepEqual(plan.keptIds, ["a", "b", "e", "d"]);
  assert.deepEqual(plan.decisions, [{ ...decision("y"), score: 0.25 }, decision("z", 0.9)]);
  assert.equal(plan.tokensAfter, 42);
  assert.equal(plan.planId, "p2");
  assert.equal(plan.basePlanId, "");
  assert.deepEqual([plan.keptRuns, plan.decisionRuns, plan.decisionScores], [[], [], []]);
  // a decision whose score did not move is the held plan's own object
  const same = applyPlanDelta(held, OptimizeResponse.fromPartial({ basePlanId: "p1", decisionRuns: [0, 2], keptRuns: [0, 4] }))!;
  assert.equal(same.decisions[0], held.decisions[0]);
});

test("applyPlanDelta gives a repeated plan the held plan's own lists, and copies a list whose scores moved", () => {
  const repeated = applyPlanDelta(held, OptimizeResponse.fromPartial({ planId: "p2", basePlanId: "p1", keptRuns: [0, 4], decisionRuns: [0, 2] }))!;
  assert.equal(repeated.keptIds, held.keptIds);
  assert.equal(repeated.decisions, held.decisions);
  const unmoved = applyPlanDelta(held, OptimizeResponse.fromPartial({ basePlanId: "p1", keptRuns: [0, 4], decisionRuns: [0, 2], decisionScores: [0.5, 0.5] }))!;
  assert.equal(unmoved.decisions, held.decisions);
  const heldDecisions = [...held.decisions];
  const moved = applyPlanDelta(held, OptimizeResponse.fromPartial({ basePlanId: "p1", keptRuns: [0, 4], decisionRuns: [0, 2], decisionScores: [0.5, 0.75] }))!;
  assert.notEqual(moved.decisions, held.decisions);
  assert.deepEqual(moved.decisions, [decision("x"), decision("y", 0.75)]);
  assert.deepEqual(held.decisions, heldDecisions); // the held plan never changes
  // a part of a list, or a list with entries of its own, is a new array
  assert.notEqual(applyPlanDelta(held, OptimizeResponse.fromPartial({ basePlanId: "p1", keptRuns: [0, 3] }))!.keptIds, held.keptIds);
});

test("applyPlanDelta returns a full answer as it is and refuses a delta that does not fit the plan held", () => {
  const full = OptimizeResponse.fromPartial({ planId: "p2", keptIds: ["a"] });
  assert.equal(applyPlanDelta(undefined, full), full);
  const misfits: Partial<OptimizeResponse>[] = [
    { basePlanId: "other", keptRuns: [0, 4] },
    { keptRuns: [2, 3] }, // past the held kept ids
    { keptRuns: [0, 4], keptIds: ["left over"] },
    { keptRuns: [-1, 1] }, // more new entries than sent
    { keptRuns: [0] },
    { keptRuns: [-2, 1] },
    { decisionRuns: [0, 2], decisionScores: [0.1] }, // a score short
  ];
  for (const misfit of misfits) {
    assert.equal(applyPlanDelta(held, OptimizeResponse.fromPartial({ basePlanId: "p1", ...misfit })), undefined, JSON.stringify(misfit));
  }
  assert.equal(applyPlanDelta(undefined, OptimizeResponse.fromPartial({ basePlanId: "p1" })), undefined);
});

let server: RunningServer;
const clients: CtxoptClient[] = [];
before(async () => {
  server = await startServer();
});
after(async () => {
  clients.forEach((c) => c.close());
  await server.stop();
});

/**
 * A client whose Optimize answers pass through `change` (and are counted),
 * and whose requests ask for deltas only when `deltas` is set: without, the
 * server answers whole plans, as it does for a client that predates them.
 */
function wrappedClient(deltas: boolean, change: (answer: OptimizeResponse) => OptimizeResponse = (a) => a) {
  const client = new CtxoptClient(server.address, { deadlineMs: 10_000 });
  clients.push(client);
  const seen = { calls: 0, deltas: 0 };
  const optimize: CtxoptClient["optimize"] = async (request, settings) => {
    const asked = deltas ? request : { ...request, keepPlan: false, basePlanId: "" };
    const answer = await client.optimize(asked, settings);
    seen.calls += 1;
    if (answer.basePlanId !== "") seen.deltas += 1;
    return change(answer);
  };
  const wrapped = new Proxy(client, {
    get: (target, property) => {
      if (property === "optimize") return optimize;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { client: wrapped, seen };
}

const WINDOW = 20_000;
const output = (step: number) => Array.from({ length: 30 }, (_, l) => `step ${step} line ${l}: compiled module${l % 13}.ts in ${l} ms`).join("\n");
const exchange = (step: number): Content[] => [
  model(call("run_shell_command", `c${step}`, { command: `make step${step}` })),
  user(response("run_shell_command", `c${step}`, output(step))),
  model(text(`step ${step} built; module${step % 13} is next`)),
];

/**
 * Tool-loop builds over a history of ~9,000 tokens (40% of the window is the
 * threshold): each step hands back the last build's history, the model's call
 * and its output; every third build asks the same again (a repeated plan).
 */
async function toolLoop(builder: PromptBuilder, sessionId: string, steps: number): Promise<BuiltPrompt[]> {
  const opening = [user(text("why does the build fail?")), ...Array.from({ length: 30 }, (_, i) => exchange(i)).flat()];
  let input: PromptInput = { sessionId, model: "gemini-2.5-pro", systemInstruction: "You are a CLI agent.", history: opening, message: "look again" };
  const built: BuiltPrompt[] = [];
  for (let step = 0; step < steps; step += 1) {
    const result = await builder.build(input);
    built.push(result);
    if (step % 3 === 1) continue;
    const [callTurn, answer] = exchange(100 + step);
    input = { ...input, history: [...result.history, result.contents.at(-1)!, callTurn!], message: answer!.parts! };
  }
  return built;
}

const builderOn = (client: CtxoptClient, mode: OptimizationMode) =>
  new PromptBuilder({
    flags: { ...DEFAULT_FLAGS, address: server.address, deadlineMs: 10_000, mode },
    client,
    budget: { contextLimitTokens: WINDOW, thresholdPercent: 40, targetPercent: 38 },
  });

/** What a build sends and reports, without timings or plan ids. */
function outcome(built: BuiltPrompt) {
  const plan = built.plan === undefined ? undefined : { ...built.plan, planId: "", serverMs: 0 };
  return { contents: built.contents, history: built.history, plan, summary: { ...built.summary, latencyMs: 0, serverMs: 0 } };
}

for (const mode of ["shadow", "true"] as const) {
  test(`${mode} mode: builds with plan deltas send the same prompts as builds with whole plans`, async () => {
    const withDeltas = wrappedClient(true);
    const whole = wrappedClient(false);
    const a = await toolLoop(builderOn(withDeltas.client, mode), `deltas-${mode}`, 15);
    const b = await toolLoop(builderOn(whole.client, mode), `whole-${mode}`, 15);
    assert.deepEqual(a.map(outcome), b.map(outcome));
    assert.ok(a.filter((built) => built.plan?.triggered).length >= 5, a.map((built) => built.summaryLine).join("\n"));
    if (mode === "true") assert.ok(a.some((built) => built.summary.outcome === "optimized"));
    assert.ok(withDeltas.seen.deltas >= 4, JSON.stringify(withDeltas.seen));
    assert.equal(whole.seen.deltas, 0);
  });
}

test("a delta that does not fit the plan held: a dry run asks for the whole plan, an applied one falls back", async () => {
  // every delta names a plan the client never held
  const broken = (answer: OptimizeResponse) => (answer.basePlanId === "" ? answer : { ...answer, basePlanId: "not-held" });
  const shadow = wrappedClient(true, broken);
  const whole = wrappedClient(false);
  const a = await toolLoop(builderOn(shadow.client, "shadow"), "broken-shadow", 4);
  const b = await toolLoop(builderOn(whole.client, "shadow"), "whole-shadow-2", 4);
  assert.deepEqual(a.map(outcome), b.map(outcome));
  assert.equal(shadow.seen.calls, shadow.seen.deltas + 4); // each misfit asked again

  const applied = wrappedClient(true, broken);
  const builds = await toolLoop(builderOn(applied.client, "true"), "broken-true", 4);
  const misfits = builds.filter((built) => built.summary.note.includes("does not fit"));
  assert.ok(misfits.length > 0, builds.map((built) => built.summaryLine).join("\n"));
  for (const built of misfits) assert.equal(built.summary.outcome, "fallback");
  for (const built of builds) assert.ok(built.summary.tokensAfter <= WINDOW, built.summaryLine);
});

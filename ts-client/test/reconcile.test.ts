import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Content } from "@google/genai";
import { DEFAULT_FLAGS } from "../src/flags.js";
import { PromptBuilder, type PromptInput } from "../src/promptBuilder.js";
import { call, model, response, text, user } from "./support/histories.js";
import { type RunningServer, startServer } from "./support/server.js";

// Shadow mode with a 5% threshold: every build syncs the session and plans, and the history is never rewritten.
let server: RunningServer;
let builder: PromptBuilder;
before(async () => {
  server = await startServer();
  const flags = { ...DEFAULT_FLAGS, mode: "shadow" as const, address: server.address, deadlineMs: 5000, thresholdPercent: 5 };
  builder = new PromptBuilder({ flags, budget: { contextLimitTokens: 10_000 } });
});
after(async () => {
  builder.close();
  await server.stop();
});

function history(steps: number): Content[] {
  const turns: Content[] = [user(text("fix the failing test"))];
  for (let i = 0; i < steps; i += 1) {
    turns.push(
      model(call("run_shell_command", `c${i}`, { command: `npm test -- ${i}` })),
      user(response("run_shell_command", `c${i}`, `FAIL case ${i}\n`.repeat(40))),
    );
  }
  return turns;
}

async function twoBuilds(sessionId: string, again: (first: Content[]) => Content[]) {
  const first = history(6);
  const input: PromptInput = { sessionId, model: "gemini-2.5-pro", history: first, message: "go on" };
  await builder.build(input);
  return builder.build({ ...input, history: again(first) });
}

test("a history handed back as a deep copy maps to the same chunks: nothing is sent again", async () => {
  const built = await twoBuilds("s-deep-copy", (first) => structuredClone(first));
  assert.deepEqual(built.sync, { appended: 0, removed: 0, resynced: false });
});

test("a copy whose parts list their keys in another order is the same history", async () => {
  const reorder = (content: Content): Content => ({
    parts: (content.parts ?? []).map((p) => Object.fromEntries(Object.entries(p).reverse())),
    role: content.role!,
  });
  const built = await twoBuilds("s-key-order", (first) => first.map(reorder));
  assert.deepEqual(built.sync, { appended: 0, removed: 0, resynced: false });
});

test("a part changed inside a copy is noticed: that turn and the ones after it are sent again", async () => {
  const built = await twoBuilds("s-changed", (first) => {
    const copy = structuredClone(first);
    copy[4]!.parts![0]!.functionResponse!.response = { output: "PASS" };
    return copy;
  });
  // Turns 4 to 12 of the history and the message: ten one-part turns with new ids.
  assert.deepEqual(built.sync, { appended: 10, removed: 10, resynced: false });
});

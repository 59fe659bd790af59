import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ContentGenerator } from "@google/gemini-cli-core";
import type { Content, Part } from "../../src/gemini/types.js";
import { type ContextOptimizerOptions, withContextOptimizer } from "../../src/geminiCli.js";
import type { ContextSummary } from "../../src/summary.js";
import { estimateContentsTokens, estimateTextTokens } from "../../src/gemini/tokens.js";
import type { Session } from "./trajectories.js";

type Core = typeof import("@google/gemini-cli-core");

/** One model call: what Gemini CLI handed the content generator, what went on after the adapter. */
export interface Exchange {
  readonly received: Content[];
  readonly sent: Content[];
  readonly summary: ContextSummary;
  /** Time the adapter took, in milliseconds. */
  readonly adapterMs: number;
  /** The prompt size Gemini CLI holds after the turn (what the fake model reported for what was sent). */
  readonly reportedPromptTokens: number;
}

/** Gemini CLI settings for a drive. */
export interface GeminiCliSettings {
  /** Gemini CLI's compression threshold, a share of the model's window (its default is 0.5). */
  readonly compressionThreshold?: number;
}

export interface Drive {
  readonly exchanges: Exchange[];
  /** Gemini CLI's own history at the end (what `/chat save` writes). */
  readonly history: Content[];
  /** The session recording Gemini CLI wrote (chats/session-*.jsonl). */
  readonly recording: string;
  /** ChatCompressed events Gemini CLI emitted (it summarised its history). */
  readonly compressions: number;
}

/**
 * Drives a real GeminiClient over a recorded session through
 * `withContextOptimizer`: Gemini CLI's own FakeContentGenerator answers each
 * model call with the session's next reply (no network), and each tool call is
 * answered with the recorded output. `core` must be loaded with HOME pointing
 * at `scratch` (Gemini CLI keeps its state there).
 */
export async function driveGeminiCli(
  core: Core,
  scratch: string,
  session: Session,
  mode: string,
  options: ContextOptimizerOptions,
  settings: GeminiCliSettings = {},
): Promise<Drive> {
  const project = mkdtempSync(join(scratch, "project-"));
  const replies: Part[][] = [...session.steps.map((s) => s.model), [{ text: "Done." }]];
  const fakeFile = join(project, "responses.jsonl");
  writeFileSync(
    fakeFile,
    replies
      .map((parts) =>
        JSON.stringify({
          method: "generateContentStream",
          response: [{ candidates: [{ content: { role: "model", parts }, finishReason: "STOP", index: 0 }] }],
        }),
      )
      .join("\n"),
  );
  const fake = await core.FakeContentGenerator.fromFile(fakeFile);
  const exchanges: Exchange[] = [];
  const pending: { received?: Content[]; sent?: Content[]; started?: number; adapterMs?: number } = {};
  const summaries: ContextSummary[] = [];
  const recordSent: ContentGenerator = {
    generateContent: (request, id, role) => fake.generateContent(request, id, role),
    generateContentStream: async (request, id, role) => {
      pending.adapterMs = performance.now() - (pending.started ?? performance.now());
      const sent = structuredClone(contentList(request.contents));
      pending.sent = sent;
      // The model reports the prompt it got: contents, system instruction and tool declarations.
      const system = request.config?.systemInstruction;
      const promptTokenCount =
        estimateContentsTokens(sent) +
        (typeof system === "string" ? estimateTextTokens(system) : 0) +
        Math.floor(JSON.stringify(request.config?.tools ?? []).length / 4);
      const stream = await fake.generateContentStream(request, id, role);
      return (async function* () {
        for await (const response of stream) {
          response.usageMetadata = { promptTokenCount };
          yield response;
        }
      })();
    },
    countTokens: (request) => fake.countTokens(request),
    embedContent: (request) => fake.embedContent(request),
  };
  process.env["GEMINI_CONTEXT_OPTIMIZATION"] = mode;
  // As the launcher does, the adapter may read Gemini CLI's own config (made below, asked at the first request).
  let config: InstanceType<Core["Config"]> | undefined;
  const geminiConfig =
    settings.compressionThreshold === undefined ? {} : { geminiConfig: { getCompressionThreshold: () => config!.getCompressionThreshold() } };
  const optimized = withContextOptimizer(recordSent, { ...geminiConfig, ...options, onSummary: (summary) => summaries.push(summary) });
  const recordReceived: ContentGenerator = {
    generateContent: (request, id, role) => optimized.generateContent(request, id, role),
    generateContentStream: async (request, id, role) => {
      pending.received = structuredClone(contentList(request.contents));
      pending.started = performance.now();
      return optimized.generateContentStream(request, id, role);
    },
    countTokens: (request) => fake.countTokens(request),
    embedContent: (request) => fake.embedContent(request),
  };
  config = new core.Config({
    sessionId: `drive-${session.id}-${mode}`,
    targetDir: project,
    cwd: project,
    debugMode: false,
    model: "gemini-2.5-pro",
    interactive: false,
    ...(settings.compressionThreshold === undefined ? {} : { compressionThreshold: settings.compressionThreshold }),
  });
  await config.initialize();
  Reflect.set(config, "contentGenerator", recordReceived);
  const client = config.getGeminiClient();
  let message: Part[] = [{ text: session.task }];
  let compressions = 0;
  for (let step = 0; step <= session.steps.length; step += 1) {
    const calls: string[] = [];
    for await (const event of client.sendMessageStream(message, new AbortController().signal, `prompt-${step}`)) {
      if (event.type === core.GeminiEventType.ToolCallRequest) calls.push(event.value.callId);
      if (event.type === core.GeminiEventType.ChatCompressed) compressions += 1;
      if (event.type === core.GeminiEventType.Error) assert.fail(`Gemini CLI error at step ${step}: ${JSON.stringify(event.value)}`);
    }
    assert.ok(pending.received && pending.sent, `step ${step}: the model was called`);
    exchanges.push({
      received: pending.received,
      sent: pending.sent,
      summary: summaries.at(-1)!,
      adapterMs: pending.adapterMs ?? 0,
      reportedPromptTokens: client.getChat().getLastPromptTokenCount(),
    });
    pending.received = undefined;
    pending.sent = undefined;
    const next = session.steps[step]?.next;
    if (next === undefined) break;
    const recorded = next.flatMap((p) => (p.functionResponse?.id === undefined ? [] : [p.functionResponse.id]));
    // Gemini CLI's scheduler names a call `<tool>__<id>` and answers under that id.
    assert.deepEqual(
      calls,
      recorded.map((id) => `run_shell_command__${id}`),
      `step ${step}: Gemini CLI asked for the recorded calls`,
    );
    message = next.map((p) =>
      p.functionResponse === undefined ? p : { functionResponse: { ...p.functionResponse, id: `run_shell_command__${p.functionResponse.id}` } },
    );
  }
  const chats = join(config.storage.getProjectTempDir(), "chats");
  const recordings = readdirSync(chats).filter((name) => name.startsWith("session-") && name.endsWith(".jsonl"));
  assert.equal(recordings.length, 1, `one recording in ${chats}`);
  return { exchanges, history: [...client.getHistory()], recording: join(chats, recordings[0]!), compressions };
}

function contentList(value: unknown): Content[] {
  assert.ok(Array.isArray(value), "contents is a Content[]");
  return value;
}

// The Node legs of the session replay (benchmarks/replay): Gemini CLI 0.61's
// own context management, and ctxopt through the Gemini CLI adapter's code
// against a real server.
//
// stdin:  {"address", "tsClient", "model", "summaryText", "trajectories": {key: [{role, content}]},
//          "jobs": [{"method", "session", "trajectory", "window", "calls": [index...],
//                    "thresholdPercent", "targetPercent", "recentTurns", "strategy", "stepTextPolicy"
//                    (null: the default), "scaledMasking"}]}
// stdout: one JSON line per job, in order:
//         {"job", "texts": [[role, text]...], "prompts": [[text index...]...],
//          "ms": [...], "outcomes": [what the method did at each call],
//          "fates"?: per call, [[message index, "r" | "t" | "m" | "c"]...] (ctxopt: each tool
//                    output not sent as is: removed, trimmed, masked, otherwise rewritten),
//          "chunks"?: per call, the chunks the adapter maps (ctxopt: the system instruction
//                    and every part of the history),
//          "setting"?: {"thresholdPercent", "targetPercent"} (ctxopt: in effect)}
//
// A trajectory is mini-swe-agent's message list (system, task, then assistant
// and tool-output turns). Both legs see it as Gemini CLI would: the system
// prompt as the system instruction, each assistant turn answered by a tool
// output as a model turn with its prose and a `run_shell_command`
// functionCall carrying the command (the message's closing bash block moves
// into the call: a Gemini model turn holds its command once), each tool
// output as that call's functionResponse `{output}`. A call at message index
// i builds the prompt from the messages before i; the model's reply (message
// i) then joins the history. Every prompt goes back as [role, text] messages
// (system first; a functionCall renders as its bash block, so an untouched
// turn renders as the original message), deduplicated per job.
//
// gemini-cli-native: per call, as GeminiClient.sendMessageStream does it,
// ChatCompressionService.compress (threshold 0.5 of the window, preserve 0.3,
// function-response budget 50k: its defaults) then
// ToolOutputMaskingService.mask (protection 50k tokens, 30k prunable: its
// defaults; with scaledMasking, both thresholds times window / tokenLimit, as the
// compression threshold), both from @google/gemini-cli-core 0.61.0 with a real Config. The
// LLM that writes the summary is replaced by a fixed placeholder
// (`summaryText`); the window enters through the compression threshold
// (0.5 x window / the model's table limit), and the last prompt's token count,
// which the CLI takes from the API, is Gemini CLI's own estimate.
//
// ctxopt: the adapter's @google/genai entry, `optimizeContents` from
// ctxopt-client/genai (the code withContextOptimizer runs inside Gemini CLI),
// given the host's full history on every call, as a user would run it: the
// window as windowTokens, the adapter's own defaults unless the job sets a
// threshold, target, recent-turn roots or strategy (null: the default).
import path from "node:path";
import { fileURLToPath } from "node:url";

// Gemini CLI logs to stdout; stdout carries the results.
console.log = (...args) => console.error(...args);
console.info = console.log;
console.debug = console.log;

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));

// The built client (default: the repository's ts-client) and the gemini-cli-core it installs.
const tsClient = request.tsClient ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../ts-client");
const core = path.join(tsClient, "node_modules/@google/gemini-cli-core/dist/src");
const { optimizeContents, closeContentOptimizers } = await import(path.join(tsClient, "dist/src/genai.js"));
const { THRESHOLD_SHARE, TARGET_SHARE } = await import(path.join(tsClient, "dist/src/hostOptimizer.js"));
const { Config } = await import(path.join(core, "config/config.js"));
const { ChatCompressionService } = await import(path.join(core, "context/chatCompressionService.js"));
const { ToolOutputMaskingService } = await import(path.join(core, "context/toolOutputMaskingService.js"));
const { CompressionStatus } = await import(path.join(core, "core/turn.js"));
const { tokenLimit } = await import(path.join(core, "core/tokenLimits.js"));
const { estimateTokenCountSync } = await import(path.join(core, "utils/tokenCalculation.js"));

const SHELL = "run_shell_command";
const GEMINI_CLI_COMPRESSION_THRESHOLD = 0.5; // chatCompressionService.ts DEFAULT_COMPRESSION_TOKEN_THRESHOLD

const isToolOutput = (m) => m.role === "user" && m.content.includes("<returncode>");
const BASH_BLOCK = /```bash\s*\n([\s\S]*?)\n```/;
const bashBlock = (command) => `\`\`\`bash\n${command}\n\`\`\``;

/**
 * An answered assistant message as a model turn: the command goes into the
 * functionCall and, when the message ends with its block, out of the text, so
 * the turn carries it once, as Gemini's model turns do.
 */
function modelParts(text, id) {
  const block = BASH_BLOCK.exec(text);
  const command = block?.[1] ?? "";
  const call = { functionCall: { id, name: SHELL, args: { command } } };
  if (block === null || block.index + block[0].length !== text.length || block[0] !== bashBlock(command)) return [{ text }, call];
  const prose = text.slice(0, block.index);
  return prose === "" ? [call] : [{ text: prose }, call];
}

/** Every message as Gemini CLI would hold it (index 0, the system prompt, is not a turn). */
function contentsOf(messages) {
  return messages.map((m, i) => {
    if (m.role === "assistant") {
      const answered = i + 1 < messages.length && isToolOutput(messages[i + 1]);
      return { role: "model", parts: answered ? modelParts(m.content, `call_${i}`) : [{ text: m.content }] };
    }
    if (i > 1 && isToolOutput(m) && messages[i - 1].role === "assistant") {
      return { role: "user", parts: [{ functionResponse: { id: `call_${i - 1}`, name: SHELL, response: { output: m.content } } }] };
    }
    return { role: "user", parts: [{ text: m.content }] };
  });
}

function partText(part) {
  if (typeof part.text === "string") return part.text;
  const response = part.functionResponse?.response;
  if (response !== undefined) return typeof response.output === "string" ? response.output : JSON.stringify(response, null, 2);
  return undefined;
}

/** A content as the message it stands for: an untouched turn renders as the original message. */
function render(content) {
  const parts = content.parts ?? [];
  const texts = parts.map(partText).filter((t) => t !== undefined).join("\n");
  // a call whose command the text still holds (or that has none) adds nothing
  const commands = parts.map((p) => p.functionCall?.args?.command ?? "").filter((c) => c !== "");
  const blocks = commands.map(bashBlock).filter((b) => !texts.includes(b));
  return [content.role, texts + blocks.join("\n")];
}

/** Deduplicated prompt texts of one job. */
class Prompts {
  texts = [];
  index = new Map();
  prompts = [];

  add(system, contents) {
    const ids = [["system", system], ...contents.map(render)].map(([role, text]) => {
      const key = `${role}\u0000${text}`;
      let id = this.index.get(key);
      if (id === undefined) {
        id = this.texts.length;
        this.texts.push([role, text]);
        this.index.set(key, id);
      }
      return id;
    });
    this.prompts.push(ids);
  }
}

/** Each call's new turns: the messages since the previous call, the last one as the request. */
function* callsOf(job, messages, contents) {
  let start = 1;
  for (const call of job.calls) {
    yield { call, earlier: contents.slice(start, call - 1), request: contents[call - 1], reply: contents[call] };
    start = call + 1;
  }
}

async function geminiCliNative(job, messages, request, config) {
  const contents = contentsOf(messages);
  const system = messages[0].content;
  const compression = new ChatCompressionService();
  const masking = new ToolOutputMaskingService();
  const share = job.window / tokenLimit(request.model);
  config.compressionThreshold = GEMINI_CLI_COMPRESSION_THRESHOLD * share;
  const defaults = await Config.prototype.getToolOutputMaskingConfig.call(config);
  const scaled = {
    ...defaults,
    protectionThresholdTokens: Math.round(defaults.protectionThresholdTokens * share),
    minPrunableThresholdTokens: Math.round(defaults.minPrunableThresholdTokens * share),
  };
  config.getToolOutputMaskingConfig = async () => (job.scaledMasking ? scaled : defaults);
  const out = new Prompts();
  const ms = [];
  const outcomes = [];
  let history = [];
  let lastPromptTokens = 0;
  let failedCompression = false;
  for (const { call, earlier, request: next, reply } of callsOf(job, messages, contents)) {
    history = [...history, ...earlier];
    const started = performance.now();
    const chat = { getHistory: () => history, getLastPromptTokenCount: () => lastPromptTokens };
    const { newHistory, info } = await compression.compress(chat, `${job.session}-${call}`, false, request.model, config, failedCompression);
    let outcome = CompressionStatus[info.compressionStatus];
    if (info.compressionStatus === CompressionStatus.COMPRESSION_FAILED_INFLATED_TOKEN_COUNT) failedCompression = true;
    if (newHistory && info.compressionStatus === CompressionStatus.COMPRESSED) failedCompression = false;
    if (newHistory) history = newHistory;
    const masked = await masking.mask(history, config);
    if (masked.maskedCount > 0) {
      history = masked.newHistory;
      outcome += " + masked";
    }
    outcomes.push(outcome);
    ms.push(performance.now() - started);
    const sent = [...history, next];
    out.add(system, sent);
    lastPromptTokens = estimateTokenCountSync([{ text: system }, ...sent.flatMap((c) => c.parts ?? [])]);
    history = [...sent, reply];
  }
  return { texts: out.texts, prompts: out.prompts, ms, outcomes };
}

/** What became of each tool output of `history` in `sent` (those sent as they are left out). */
function fatesOf(history, sent) {
  const outputs = new Map();
  for (const content of sent) for (const part of content.parts ?? []) if (part.functionResponse) outputs.set(part.functionResponse.id, part.functionResponse.response?.output);
  const fates = [];
  for (const content of history) {
    const response = content.parts?.[0]?.functionResponse;
    if (response === undefined) continue;
    const index = Number(response.id.slice("call_".length)) + 1; // the call's message index + 1
    const output = outputs.get(response.id);
    if (output === response.response.output) continue;
    const code = output === undefined ? "r" : output.startsWith("[ctxopt: trimmed") ? "t" : output.startsWith("[ctxopt: masked") ? "m" : "c";
    fates.push([index, code]);
  }
  return fates;
}

async function ctxopt(job, messages, request) {
  const contents = contentsOf(messages);
  const system = messages[0].content;
  const options = {
    address: request.address,
    sessionId: job.session,
    model: request.model,
    windowTokens: job.window,
    systemInstruction: system,
    defaultMode: "true",
    ...(job.thresholdPercent === null ? {} : { thresholdPercent: job.thresholdPercent }),
    ...(job.targetPercent === null ? {} : { targetPercent: job.targetPercent }),
    ...(job.recentTurns === null ? {} : { recentTurns: job.recentTurns }),
    ...(job.strategy === null ? {} : { strategy: job.strategy }),
    ...(job.stepTextPolicy === null ? {} : { stepTextPolicy: job.stepTextPolicy }),
  };
  const out = new Prompts();
  const ms = [];
  const outcomes = [];
  const fates = [];
  const chunks = [];
  let history = [];
  for (const { earlier, request: next, reply } of callsOf(job, messages, contents)) {
    history = [...history, ...earlier, next];
    chunks.push(1 + history.reduce((sum, content) => sum + (content.parts?.length ?? 0), 0));
    const started = performance.now();
    const optimized = await optimizeContents(history, options);
    ms.push(performance.now() - started);
    outcomes.push(optimized.summary.outcome);
    fates.push(fatesOf(history, optimized.contents));
    out.add(system, optimized.contents);
    history = [...history, reply];
  }
  // optimizeContents' ceiling is the window: the defaults are their shares of it
  const setting = { thresholdPercent: options.thresholdPercent ?? 100 * THRESHOLD_SHARE, targetPercent: options.targetPercent ?? 100 * TARGET_SHARE };
  return { texts: out.texts, prompts: out.prompts, ms, outcomes, fates, chunks, setting };
}

async function main() {
  const workspace = process.env.GEMINI_CLI_HOME ?? process.cwd();
  const config = new Config({
    sessionId: "replay",
    targetDir: workspace,
    cwd: workspace,
    debugMode: false,
    model: request.model,
    usageStatisticsEnabled: false,
  });
  await config.storage.initialize();
  const summary = request.summaryText;
  config.getBaseLlmClient = () => ({
    generateContent: async () => ({ candidates: [{ content: { role: "model", parts: [{ text: summary }] } }] }),
  });
  for (const [index, job] of request.jobs.entries()) {
    const messages = request.trajectories[job.trajectory];
    const result = job.method === "ctxopt" ? await ctxopt(job, messages, request) : await geminiCliNative(job, messages, request, config);
    process.stdout.write(`${JSON.stringify({ job: index, ...result })}\n`);
  }
  closeContentOptimizers();
}

await main();

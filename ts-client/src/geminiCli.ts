import type { ContentGenerator } from "@google/gemini-cli-core";
import { type Content, type Part } from "./gemini/types.js";
import { HostHistoryOptimizer, type HostOptimizerOptions } from "./hostOptimizer.js";
import { geminiCliCompactionLine } from "./pipeline/ceiling.js";

export {
  GEMINI_CLI_COMPRESSION_PERCENT,
  HOST_PRESSURE_PERCENT,
  HOST_TARGET_PERCENT,
  HOST_THRESHOLD_PERCENT,
  HostHistoryOptimizer,
  TARGET_SHARE,
  THRESHOLD_SHARE,
} from "./hostOptimizer.js";
export type { HostOptimizerOptions, OptimizedContents } from "./hostOptimizer.js";
export { ceilingPercent, GEMINI_CLI_COMPRESSION_THRESHOLD, geminiCliCompactionLine, geminiCliTokenLimit } from "./pipeline/ceiling.js";

/** The part of Gemini CLI's `Config` the adapter reads: the user's `model.compressionThreshold` (else the remote default). */
export interface GeminiCliConfig {
  getCompressionThreshold(): Promise<number | undefined>;
}

/** The options of `withContextOptimizer`; each wins over the environment. */
export interface ContextOptimizerOptions extends Omit<HostOptimizerOptions, "client" | "flags"> {
  /** The ctxopt service address (default CTXOPT_ADDR, else 127.0.0.1:50051). */
  readonly address?: string;
  /** The service session (default: a fresh id per wrapped generator). */
  readonly sessionId?: string;
  /** The model whose window applies (default: each request's model). */
  readonly model?: string;
  /** The context window in tokens (default: the model table's). */
  readonly windowTokens?: number;
  /**
   * Gemini CLI's compression threshold, a fraction in (0, 1] of its
   * `tokenLimit(model)` (default: asked from `geminiConfig`, else
   * GEMINI_CLI_COMPRESSION_THRESHOLD): with it, Gemini CLI's compaction line.
   */
  readonly compressionThreshold?: number;
  /** Gemini CLI's `Config`, asked once (at the first main-chat request) for the user's compression threshold. */
  readonly geminiConfig?: GeminiCliConfig;
}

/** Gemini CLI's role of its main chat: only those requests carry the session's history. */
const MAIN_ROLE = "main";

/**
 * Wraps a Gemini CLI content generator so every main-chat request's
 * `contents` is optimized by ctxopt before it is delegated; everything else
 * (countTokens, embedContent, utility calls such as the router or the loop
 * detector, the generator's other properties) goes to `generator` untouched.
 *
 * Under the usual flags (GEMINI_CONTEXT_OPTIMIZATION, the rollout,
 * CTXOPT_ADDR, CTXOPT_DEADLINE_MS, CTXOPT_BREAKER_MS); `options` win over
 * the environment. Off (pass-through) unless GEMINI_CONTEXT_OPTIMIZATION
 * says `true` or `shadow` (`ctxopt-gemini` sets `true` when it is unset), or
 * `defaultMode` sets the mode for an unset variable. Gemini CLI owns the history: ctxopt rewrites only what is
 * sent, keeps its decisions stable between collections (the prompt's prefix
 * stays byte-identical), never sends more than the window and falls back to
 * local truncation when the service fails. Its ceiling is the lower of the
 * window and Gemini CLI's compression line (`geminiCliCompactionLine`: the
 * compression threshold times Gemini CLI's own `tokenLimit(model)`), so the
 * CLI's lossy summary does not run and a window set to the model's real size
 * is used whole; `ceilingPercent` overrides it. See `HostHistoryOptimizer`.
 *
 * @example
 * const generator = withContextOptimizer(await createContentGenerator(cfg, config), { windowTokens: 200_000 });
 */
export function withContextOptimizer(generator: ContentGenerator, options: ContextOptimizerOptions = {}): ContentGenerator {
  const { compressionThreshold, geminiConfig, ...rest } = options;
  if (compressionThreshold !== undefined && !(compressionThreshold > 0 && compressionThreshold <= 1)) {
    throw new Error(`compressionThreshold: expected a fraction in (0, 1] (got ${compressionThreshold})`);
  }
  let threshold = compressionThreshold;
  let thresholdAsked = compressionThreshold !== undefined || geminiConfig === undefined;
  const optimizer = new HostHistoryOptimizer({ hostEstimates: true, compactionLine: (model) => geminiCliCompactionLine(model, threshold), ...rest });
  type Request = Parameters<ContentGenerator["generateContent"]>[0];
  const rewrite = async <R extends Request>(request: R, role: string): Promise<R> => {
    const contents: unknown = request.contents;
    if (role !== MAIN_ROLE || !isContentList(contents)) return request;
    if (!thresholdAsked && geminiConfig !== undefined) {
      thresholdAsked = true;
      threshold = await userCompressionThreshold(geminiConfig);
    }
    const tools = request.config?.tools;
    const optimized = await optimizer.optimize(contents, {
      model: request.model,
      systemInstruction: systemText(request.config?.systemInstruction),
      // Tool declarations count in the prompt the model reports, as Gemini CLI estimates JSON: 4 characters a token.
      overheadTokens: tools === undefined ? 0 : Math.floor(JSON.stringify(tools).length / 4),
    });
    return optimized.changed ? { ...request, contents: optimized.contents } : request;
  };
  // The model's own count of each main-chat prompt calibrates the next calls' sizes.
  const report = (role: string, usage: { promptTokenCount?: number } | undefined) => {
    if (role === MAIN_ROLE) optimizer.reportUsage(usage?.promptTokenCount);
  };
  const wrapped: ContentGenerator = {
    generateContent: async (request, userPromptId, role) => {
      const response = await generator.generateContent(await rewrite(request, role), userPromptId, role);
      report(role, response.usageMetadata);
      return response;
    },
    generateContentStream: async (request, userPromptId, role) => {
      const stream = await generator.generateContentStream(await rewrite(request, role), userPromptId, role);
      return observed(stream, (chunk) => report(role, chunk.usageMetadata));
    },
    countTokens: (request) => generator.countTokens(request),
    embedContent: (request) => generator.embedContent(request),
  };
  // userTier and the like are read live from the wrapped generator.
  return new Proxy(wrapped, {
    get: (target, property) => (property in target ? Reflect.get(target, property) : Reflect.get(generator, property)),
    has: (target, property) => property in target || property in generator,
  });
}

/** The compression threshold Gemini CLI applies, when its config names a usable one (else its default applies). */
async function userCompressionThreshold(config: GeminiCliConfig): Promise<number | undefined> {
  try {
    const value = await config.getCompressionThreshold();
    return typeof value === "number" && value > 0 && value <= 1 ? value : undefined;
  } catch {
    return undefined;
  }
}

/** `stream` as it is, with `see` called on every item on its way through. */
async function* observed<T>(stream: AsyncGenerator<T>, see: (item: T) => void): AsyncGenerator<T> {
  for await (const item of stream) {
    see(item);
    yield item;
  }
}

/** Gemini CLI always sends a `Content[]`; any other form of `contents` passes through. */
function isContentList(value: unknown): value is Content[] {
  return (
    Array.isArray(value) &&
    value.every(
      (item: unknown) =>
        item !== null && typeof item === "object" && "parts" in item && Array.isArray(item.parts) && "role" in item && typeof item.role === "string",
    )
  );
}

/** The system instruction's text (a string, a Content, or parts), for its token count. */
function systemText(instruction: unknown): string {
  if (typeof instruction === "string") return instruction;
  const parts: unknown = Array.isArray(instruction)
    ? instruction
    : instruction !== null && typeof instruction === "object" && "parts" in instruction
      ? instruction.parts
      : undefined;
  if (!Array.isArray(parts)) return "";
  return parts.map((part: unknown) => (typeof part === "string" ? part : isPart(part) && typeof part.text === "string" ? part.text : "")).join("\n");
}

function isPart(value: unknown): value is Part {
  return value !== null && typeof value === "object";
}

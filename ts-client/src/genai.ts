import type { Content } from "./gemini/types.js";
import { HostHistoryOptimizer, type HostOptimizerOptions, type OptimizedContents } from "./hostOptimizer.js";

export type { Content, Part } from "./gemini/types.js";
export type { HostOptimizerOptions, OptimizedContents } from "./hostOptimizer.js";

// No compaction line: an agent on @google/genai has no compression of its own in the way (the ceiling is the window).
export interface OptimizeContentsOptions extends Omit<HostOptimizerOptions, "client" | "flags" | "compactionLine"> {
  /** The system instruction sent with the contents (counts against the window). */
  readonly systemInstruction?: string;
  /**
   * `usageMetadata.promptTokenCount` of the response to this session's
   * previous call: calibrates sizes to the model's tokenizer
   * (`HostHistoryOptimizer.reportUsage`).
   */
  readonly previousPromptTokens?: number;
}

const optimizers = new Map<string, HostHistoryOptimizer>();

/**
 * The same optimization as the Gemini CLI adapter, for an agent built on
 * `@google/genai` directly: pass the full `Content[]` you are about to send
 * (with the same `sessionId` on every call of a conversation) and send the
 * returned `contents` instead. Your history stays yours; ctxopt recognises
 * what it already saw, keeps its decisions stable between collections and
 * never returns more than the window. With no compression of its own in the
 * way, its ceiling is the window (`ceilingPercent` 100): it acts at
 * THRESHOLD_SHARE of the window and lands at TARGET_SHARE. `Content[]` of
 * `@google/genai` 1.30 and 3.x go in and come out without casts. Like every client entry it is off
 * (pass-through) unless GEMINI_CONTEXT_OPTIMIZATION says `true` or `shadow`,
 * or `defaultMode` sets the mode for an unset variable.
 *
 * @example
 * const { contents, summaryLine } = await optimizeContents(history, { sessionId: "chat-1", model: "gemini-2.5-pro" });
 * await ai.models.generateContent({ model: "gemini-2.5-pro", contents });
 */
export function optimizeContents(contents: readonly Content[], options: OptimizeContentsOptions = {}): Promise<OptimizedContents> {
  const { systemInstruction, previousPromptTokens, ...rest } = options;
  const key = JSON.stringify([
    rest.address ?? "",
    rest.sessionId ?? "default",
    rest.windowTokens ?? 0,
    rest.thresholdPercent ?? 0,
    rest.targetPercent ?? 0,
    rest.ceilingPercent ?? 0,
    rest.recentTurns ?? -1,
    rest.strategy ?? 0,
    rest.stepTextPolicy ?? -1,
    rest.hostEstimates ?? false,
  ]);
  let optimizer = optimizers.get(key);
  if (optimizer === undefined) {
    optimizer = new HostHistoryOptimizer(rest);
    optimizers.set(key, optimizer);
  }
  optimizer.reportUsage(previousPromptTokens);
  return optimizer.optimize(contents, {
    ...(rest.model === undefined ? {} : { model: rest.model }),
    ...(systemInstruction === undefined ? {} : { systemInstruction }),
  });
}

/** Closes the service connections `optimizeContents` opened (call before exit). */
export function closeContentOptimizers(): void {
  for (const optimizer of optimizers.values()) optimizer.close();
  optimizers.clear();
}

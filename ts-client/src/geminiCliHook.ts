import { appendFileSync } from "node:fs";
import type { ContentGenerator } from "@google/gemini-cli-core";
import { type GeminiCliConfig, withContextOptimizer } from "./geminiCli.js";

/**
 * What the launcher's loader puts in place of Gemini CLI's
 * `createContentGenerator`: the generator it made, wrapped by
 * `withContextOptimizer` under the usual flags, one ctxopt session per
 * Gemini CLI session, its ceiling read from Gemini CLI's own config (the
 * user's `model.compressionThreshold`). With CTXOPT_SUMMARY_LOG set, each summary line is
 * appended to that file (Gemini CLI owns the terminal).
 */
export function wrapGeminiCliGenerator(generator: ContentGenerator, config: unknown, sessionId: unknown): ContentGenerator {
  const log = process.env["CTXOPT_SUMMARY_LOG"];
  return withContextOptimizer(generator, {
    ...(typeof sessionId === "string" && sessionId !== "" ? { sessionId: `gemini-cli-${sessionId}` } : {}),
    ...(isGeminiCliConfig(config) ? { geminiConfig: config } : {}),
    ...(log ? { onSummary: (_summary, line) => appendFileSync(log, `${new Date().toISOString()} ${line}\n`) } : {}),
  });
}

function isGeminiCliConfig(value: unknown): value is GeminiCliConfig {
  return value !== null && typeof value === "object" && "getCompressionThreshold" in value && typeof value.getCompressionThreshold === "function";
}

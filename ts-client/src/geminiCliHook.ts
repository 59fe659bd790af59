import { appendFileSync } from "node:fs";
import type { ContentGenerator } from "@google/gemini-cli-core";
import { withContextOptimizer } from "./geminiCli.js";

/**
 * What the launcher's loader puts in place of Gemini CLI's
 * `createContentGenerator`: the generator it made, wrapped by
 * `withContextOptimizer` under the usual flags, one ctxopt session per
 * Gemini CLI session. With CTXOPT_SUMMARY_LOG set, each summary line is
 * appended to that file (Gemini CLI owns the terminal).
 */
export function wrapGeminiCliGenerator(generator: ContentGenerator, _config: unknown, sessionId: unknown): ContentGenerator {
  const log = process.env["CTXOPT_SUMMARY_LOG"];
  return withContextOptimizer(generator, {
    ...(typeof sessionId === "string" && sessionId !== "" ? { sessionId: `gemini-cli-${sessionId}` } : {}),
    ...(log ? { onSummary: (_summary, line) => appendFileSync(log, `${new Date().toISOString()} ${line}\n`) } : {}),
  });
}

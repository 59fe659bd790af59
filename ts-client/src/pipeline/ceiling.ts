/**
 * Where a host's own lossy compaction starts, and the ceiling that follows
 * from it: one rule for every front (the in-process adapters here, the
 * gateway on the server side).
 */

/**
 * Gemini CLI's default compression threshold, a fraction of its model limit:
 * `DEFAULT_COMPRESSION_TOKEN_THRESHOLD` in @google/gemini-cli-core 0.61.0
 * `dist/src/context/chatCompressionService.js`. The user's
 * `model.compressionThreshold` setting (`Config.getCompressionThreshold()`)
 * replaces it.
 */
export const GEMINI_CLI_COMPRESSION_THRESHOLD = 0.5;

/** `tokenLimit` of @google/gemini-cli-core 0.61.0 (`dist/src/core/tokenLimits.js`): Gemma 4 models. */
const GEMINI_CLI_GEMMA_4_MODELS: readonly string[] = ["gemma-4-31b-it", "gemma-4-26b-a4b-it"];
const GEMINI_CLI_GEMMA_4_LIMIT = 256_000;
/** `DEFAULT_TOKEN_LIMIT` there: every other model, Gemini 2.5 and 3 included. */
const GEMINI_CLI_DEFAULT_LIMIT = 1_048_576;

/**
 * Gemini CLI's idea of a model's limit: `tokenLimit(model)` of
 * @google/gemini-cli-core 0.61.0 (`dist/src/core/tokenLimits.js`), which
 * knows no other window than these (the user's real window may be smaller).
 */
export function geminiCliTokenLimit(model: string): number {
  return GEMINI_CLI_GEMMA_4_MODELS.includes(model) ? GEMINI_CLI_GEMMA_4_LIMIT : GEMINI_CLI_DEFAULT_LIMIT;
}

/**
 * The prompt size at which Gemini CLI summarises its history with an LLM:
 * `ChatCompressionService.compress` (@google/gemini-cli-core 0.61.0,
 * `dist/src/context/chatCompressionService.js`) compresses once the last
 * prompt's token count reaches `(await config.getCompressionThreshold()) ??
 * DEFAULT_COMPRESSION_TOKEN_THRESHOLD` times `tokenLimit(model)`.
 *
 * @param compressionThreshold the user's `model.compressionThreshold` when known (a fraction in (0, 1]).
 * @example geminiCliCompactionLine("gemini-2.5-pro") // 524288
 */
export function geminiCliCompactionLine(model: string, compressionThreshold?: number): number {
  return (compressionThreshold ?? GEMINI_CLI_COMPRESSION_THRESHOLD) * geminiCliTokenLimit(model);
}

/**
 * The ceiling of a host's prompt, in percent of the window: the lower of the
 * window and the host's own compaction line (none: the window). Acting under
 * it keeps the host's lossy compaction from running, and a window set to the
 * model's real size is not halved.
 *
 * @example ceilingPercent(60_000, geminiCliCompactionLine("gemini-2.5-pro")) // 100
 * @example ceilingPercent(1_048_576, geminiCliCompactionLine("gemini-2.5-pro")) // 50
 */
export function ceilingPercent(windowTokens: number, compactionLineTokens: number | undefined): number {
  if (compactionLineTokens === undefined || compactionLineTokens >= windowTokens) return 100;
  return (100 * compactionLineTokens) / windowTokens;
}

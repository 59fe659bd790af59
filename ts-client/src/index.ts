export { type CallSettings, type ClientOptions, CtxoptCallError, CtxoptClient, GrpcStatus, ServingStatus } from "./client.js";
export { DEFAULT_FLAGS, type Flags, inRollout, type OptimizationMode, readFlags, rolloutBucket } from "./flags.js";
export { type AppliedPlan, applyPlan } from "./gemini/applyPlan.js";
export { environmentContextTurns, isEnvironmentContextText } from "./gemini/environment.js";
export { judgePlan, type PlanVerdict } from "./gemini/judgePlan.js";
export {
  findViolations,
  type HistoryRepair,
  type HistoryRule,
  OMITTED_START_TEXT,
  preservationViolations,
  type RepairOutcome,
  repairHistory,
  type Violation,
} from "./gemini/history.js";
export { chunksOf, type MappedContent, type MappedPart, type MapOptions, mapContents, systemChunk, toContents } from "./gemini/mapping.js";
export { type Truncation, truncateHistory } from "./gemini/truncate.js";
export * as proto from "./generated/ctxopt/v1/ctxopt.js";
export { DEFAULT_TOKEN_LIMIT, MODEL_TOKEN_LIMITS, tokenLimit } from "./models.js";
export {
  type BudgetOptions,
  type BuiltPrompt,
  type Embedder,
  PromptBuilder,
  type PromptBuilderOptions,
  type PromptInput,
  type PromptRequest,
} from "./promptBuilder.js";
export { SessionMirror, type SyncReport } from "./sessionMirror.js";
export type { Blob, Content, FileData, FunctionCall, FunctionResponse, Part } from "./gemini/types.js";
export {
  HOST_PRESSURE_PERCENT,
  HOST_TARGET_PERCENT,
  HOST_THRESHOLD_PERCENT,
  HostHistoryOptimizer,
  type HostOptimizerOptions,
  type OptimizedContents,
  type RequestExtras,
} from "./hostOptimizer.js";
export { closeContentOptimizers, optimizeContents, type OptimizeContentsOptions } from "./genai.js";
export { CATEGORIES, type Category, type ContextReport, explainContents, type ExplainedChunk, formatReport, readContextFile } from "./explain.js";
export { type BuildOutcome, type ContextSummary, summaryLine } from "./summary.js";
export { estimateContentTokens, estimateContentsTokens, estimatePartTokens, estimateTextTokens } from "./gemini/tokens.js";

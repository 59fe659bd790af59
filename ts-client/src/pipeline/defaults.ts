import { GcPolicy, Strategy } from "../generated/ctxopt/v1/ctxopt.js";
import { GEMINI_CLI_COMPRESSION_THRESHOLD } from "./ceiling.js";

/** The model a request is sized for when neither the caller nor the request names one. */
export const DEFAULT_MODEL = "gemini-2.5-pro";

/**
 * Gemini CLI summarises the history with an LLM once its prompt passes this
 * share of ITS model limit (`tokenLimit(model)`, not the user's window; see
 * `geminiCliCompactionLine`). Inside Gemini CLI the adapter keeps the prompt
 * (and so the usage the model reports back) under the lower of that line and
 * the window (`ceilingPercent`), so the lossy summary is not needed.
 */
export const GEMINI_CLI_COMPRESSION_PERCENT = 100 * GEMINI_CLI_COMPRESSION_THRESHOLD;

/**
 * The host optimizer's defaults as shares of the ceiling (the window for an
 * agent with no compression of its own, Gemini CLI's compression line inside
 * Gemini CLI): a collection runs when the prompt would pass THRESHOLD_SHARE
 * of it and lands at TARGET_SHARE; between collections the prompt only
 * grows, so its prefix stays in the provider's cache. PRESERVABLE chunks go
 * only above PRESSURE_SHARE. Chosen, with RECENT_TURNS, STRATEGY and
 * STEP_TEXT_POLICY, by 5-fold cross-validation on the session replay
 * (benchmarks/replay, README "Session replay"): among the settings billing
 * less than the baselines that stay inside the window, the cheapest reaching
 * needed-later recall 0.95; wider gaps bill less and keep less.
 */
export const THRESHOLD_SHARE = 1;
export const TARGET_SHARE = 0.9;
export const PRESSURE_SHARE = 1;

/** The defaults inside Gemini CLI when the window is the model's whole limit (its line then halves it), in percent of the window. */
export const HOST_THRESHOLD_PERCENT = GEMINI_CLI_COMPRESSION_PERCENT * THRESHOLD_SHARE;
export const HOST_TARGET_PERCENT = GEMINI_CLI_COMPRESSION_PERCENT * TARGET_SHARE;
export const HOST_PRESSURE_PERCENT = GEMINI_CLI_COMPRESSION_PERCENT * PRESSURE_SHARE;

/**
 * Recent turns kept as GC roots at most: the latest exchange (cross-validated
 * with the shares; the service's own default, 10, keeps whole tool outputs
 * the target then cannot hold and recalls no more).
 */
export const RECENT_TURNS = 2;

/**
 * How the service chooses what goes: policy tiers, what the model quoted last,
 * then age (STRATEGY_BUDGET). The service's default (hybrid with line excerpts
 * of two sizes and the quoted order) is as good on the session replay (recall
 * 0.963 for 6,344,874 billed against 0.955 for 6,384,787) but keeps less inside Gemini
 * CLI (bench:gemini-cli: 0.839 of the needed-later lines against 0.863), so
 * the adapter keeps budget (docs/replay.md).
 */
export const STRATEGY = Strategy.STRATEGY_BUDGET;

/**
 * The model's text beside its tool calls goes before the tool outputs
 * (cross-validated with the shares): it narrates a step whose facts come back
 * in the responses, and the model can reason again from those facts; what it
 * read in an output it could only get back with another tool call.
 */
export const STEP_TEXT_POLICY = GcPolicy.GC_POLICY_EPHEMERAL;

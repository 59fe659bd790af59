import type { OptimizationMode } from "./flags.js";

/** How a prompt build ended. */
export type BuildOutcome =
  /** Flag off or session outside the rollout: history sent as is. */
  | "pass-through"
  /** Usage under the threshold: nothing to do. */
  | "below-threshold"
  /** The plan was applied and sent. */
  | "optimized"
  /** The plan was computed and reported; the original was sent. */
  | "shadow"
  /** The plan made nothing better or broke a history rule: the original was sent. */
  | "kept-original"
  /** The service failed or missed its deadline: local truncation was sent. */
  | "fallback";

/** The numbers behind the context line, for a UI to show. */
export interface ContextSummary {
  readonly mode: OptimizationMode;
  readonly outcome: BuildOutcome;
  readonly model: string;
  readonly windowTokens: number;
  readonly tokensBefore: number;
  /** Tokens of what was sent (in shadow mode: of what would have been sent). */
  readonly tokensAfter: number;
  readonly stashed: number;
  readonly trimmed: number;
  readonly masked: number;
  readonly deleted: number;
  /** Turns the local fallback dropped. */
  readonly droppedTurns: number;
  readonly latencyMs: number;
  readonly serverMs: number;
  /** Why the outcome is what it is (fallback cause, rule broken, rollout), empty when obvious. */
  readonly note: string;
}

/** What a build knows before counting decisions; `started` is its `performance.now()`. */
export type SummaryBase = Pick<ContextSummary, "mode" | "outcome" | "model" | "windowTokens" | "tokensBefore" | "tokensAfter" | "serverMs"> & {
  readonly started: number;
};

/** A build's summary: nothing counted unless `extra` says so, latency up to now. */
export function buildSummary({ started, ...base }: SummaryBase, extra: Partial<ContextSummary> = {}): ContextSummary {
  return { ...base, stashed: 0, trimmed: 0, masked: 0, deleted: 0, droppedTurns: 0, note: "", ...extra, latencyMs: performance.now() - started };
}

/**
 * One line like Gemini CLI's context display, e.g.
 * `ctxopt[true] gemini-2.5-pro: 38.2% of 1,048,576 tokens used (612,004 -> 400,513, saved 211,491), 14 stashed, 3 trimmed, 6 masked, 7.9 ms`.
 */
export function summaryLine(s: ContextSummary): string {
  const percent = ((100 * s.tokensAfter) / s.windowTokens).toFixed(1);
  const saved = s.tokensBefore - s.tokensAfter;
  const shadow = s.outcome === "shadow";
  const head = `ctxopt[${s.mode}${shadow ? ", original sent" : ""}] ${s.model}: ${percent}% of ${fmt(s.windowTokens)} tokens ${shadow ? "would be " : ""}used`;
  const tokens = `(${fmt(s.tokensBefore)} -> ${fmt(s.tokensAfter)}, ${shadow ? "would save" : "saved"} ${fmt(saved)})`;
  const items = [
    [s.stashed, "stashed"],
    [s.trimmed, "trimmed"],
    [s.masked, "masked"],
    [s.deleted, "deleted"],
    [s.droppedTurns, "turns truncated locally"],
  ]
    .filter(([count]) => (count as number) > 0)
    .map(([count, label]) => `${count} ${label}`);
  const latency = `${s.latencyMs.toFixed(1)} ms${s.serverMs > 0 ? ` (server ${s.serverMs.toFixed(1)} ms)` : ""}`;
  const outcome = OUTCOME_LABELS[s.outcome] + (s.note ? `: ${s.note}` : "");
  return [`${head} ${tokens}`, ...items, latency, outcome].join(", ");
}

const OUTCOME_LABELS: Record<BuildOutcome, string> = {
  "pass-through": "pass-through",
  "below-threshold": "below threshold",
  optimized: "optimized",
  shadow: "shadow",
  "kept-original": "original kept (never worse)",
  fallback: "FALLBACK local truncation",
};

/** One formatter for every line: `toLocaleString` sets one up per call, which showed in the build's profile. */
const EN_US = new Intl.NumberFormat("en-US");

function fmt(n: number): string {
  return EN_US.format(n);
}

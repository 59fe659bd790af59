import type { OptimizeResponse } from "../generated/ctxopt/v1/ctxopt.js";
import { applyPlan } from "./applyPlan.js";
import { type HistoryRepair, type HistoryRule, repairHistory } from "./history.js";
import type { MappedContent } from "./mapping.js";

/** A plan applied to a history and judged: `accepted` only when valid and smaller. */
export interface PlanVerdict {
  readonly accepted: boolean;
  /** The history with the plan applied and repaired (what would be sent). */
  readonly turns: MappedContent[];
  /** Tokens of `turns`. */
  readonly tokensAfter: number;
  readonly repairs: HistoryRepair[];
  /** Rules the result would break (empty when valid). */
  readonly broken: HistoryRule[];
  /** Why the plan was refused, empty when accepted. */
  readonly reason: string;
}

/**
 * Never worse: applies `plan` to `turns`, repairs Gemini's history rules, and
 * accepts the result only when no rule is broken (the latest turn, the call
 * it answers and thought parts intact included) and it has fewer tokens than
 * the original. A refused plan means the original is sent.
 */
export function judgePlan(turns: readonly MappedContent[], plan: Pick<OptimizeResponse, "keptIds" | "decisions">): PlanVerdict {
  const applied = applyPlan(turns, plan);
  const repaired = repairHistory(applied.turns);
  const tokensAfter = tokensOf(repaired.turns);
  const broken = [...new Set(repaired.violations.map((v) => v.rule))];
  const reason = broken.length > 0 ? `plan would break ${broken.join(", ")}` : tokensAfter >= tokensOf(turns) ? "plan is not smaller" : "";
  return { accepted: reason === "", turns: repaired.turns, tokensAfter, repairs: repaired.repairs, broken, reason };
}

export function tokensOf(turns: readonly MappedContent[]): number {
  let total = 0;
  for (const turn of turns) for (const part of turn.parts) total += part.chunk.tokens;
  return total;
}

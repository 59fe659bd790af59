import type { Decision, OptimizeResponse } from "../generated/ctxopt/v1/ctxopt.js";
import { applyPlan } from "./applyPlan.js";
import { type HistoryRepair, type HistoryRule, repairHistory } from "./history.js";
import type { MappedContent } from "./mapping.js";

/** A plan applied to a history and judged: `accepted` only when valid and smaller. */
export interface PlanVerdict {
  readonly accepted: boolean;
  /** The history with the plan applied and repaired (what would be sent). */
  readonly turns: MappedContent[];
  /** Tokens of `turns` as the service counts a plan's result (`OptimizeResponse.tokens_after`). */
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
  const tokensAfter = plannedTokensOf(repaired.turns, plan, applied.rewrittenIds);
  const broken = [...new Set(repaired.violations.map((v) => v.rule))];
  const reason = broken.length > 0 ? `plan would break ${broken.join(", ")}` : tokensAfter >= tokensOf(turns) ? "plan is not smaller" : "";
  return { accepted: reason === "", turns: repaired.turns, tokensAfter, repairs: repaired.repairs, broken, reason };
}

/**
 * `judgePlan` for one session's builds, remembering its last verdict: a
 * build over the same turns (the same array: a session's mapped history is
 * never changed in place) with the same decisions (the same objects, as a
 * repeated plan's delta gives them back, in the same order) gets that
 * verdict again instead of applying, repairing and counting the whole
 * history anew. A verdict is a function of those two alone (`keptIds` do not
 * enter it), and its own fields are never changed.
 */
export class PlanJudge {
  private last: { turns: readonly MappedContent[]; decisions: readonly Decision[]; verdict: PlanVerdict } | undefined;

  judge(turns: readonly MappedContent[], plan: Pick<OptimizeResponse, "keptIds" | "decisions">): PlanVerdict {
    const last = this.last;
    if (last !== undefined && last.turns === turns && sameObjects(last.decisions, plan.decisions)) return last.verdict;
    const verdict = judgePlan(turns, plan);
    // A copy of the list: the caller's array may change after this build.
    this.last = { turns, decisions: plan.decisions.slice(), verdict };
    return verdict;
  }
}

function sameObjects<T>(a: readonly T[], b: readonly T[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The one definition of a plan's `tokens_after`, the server's too: every part at
 * its count, a part the plan rewrote at its decision's `tokensAfter` (the
 * service's count of the replacement text, not the host's estimate of the
 * rewritten part).
 */
function plannedTokensOf(turns: readonly MappedContent[], plan: Pick<OptimizeResponse, "decisions">, rewrittenIds: readonly string[]): number {
  if (rewrittenIds.length === 0) return tokensOf(turns);
  const rewritten = new Set(rewrittenIds);
  const counted = new Map<string, number>();
  for (const d of plan.decisions) if (rewritten.has(d.chunkId)) counted.set(d.chunkId, d.tokensAfter);
  let total = 0;
  for (const turn of turns) for (const part of turn.parts) total += counted.get(part.chunk.id) ?? part.chunk.tokens;
  return total;
}

export function tokensOf(turns: readonly MappedContent[]): number {
  let total = 0;
  for (const turn of turns) for (const part of turn.parts) total += part.chunk.tokens;
  return total;
}

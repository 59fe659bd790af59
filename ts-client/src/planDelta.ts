import type { Decision, OptimizeResponse } from "./generated/ctxopt/v1/ctxopt.js";

/**
 * Rebuilds the whole plan a delta answer stands for (OptimizeRequest.keep_plan
 * and base_plan_id; the proto's comments define the encoding): kept ids and
 * decisions are copy runs over `held` plus the entries the answer carries,
 * scores come from `decisionScores` when it is set. Copied decisions are
 * `held`'s own objects (a new one only where the score moved), so a repeated
 * plan allocates almost nothing.
 *
 * Returns undefined when the answer does not fit `held` (another base, a run
 * out of range, entries left over or missing): the caller then asks for a
 * full plan. A full answer is returned as it is.
 */
export function applyPlanDelta(held: OptimizeResponse | undefined, answer: OptimizeResponse): OptimizeResponse | undefined {
  if (!answer.basePlanId) return answer;
  if (held === undefined || held.planId !== answer.basePlanId) return undefined;
  const keptIds = pieces(answer.keptRuns, held.keptIds, answer.keptIds);
  const decisions = pieces(answer.decisionRuns, held.decisions, answer.decisions);
  if (keptIds === undefined || decisions === undefined) return undefined;
  const scores = answer.decisionScores;
  if (scores.length > 0) {
    if (scores.length !== decisions.length) return undefined;
    for (let i = 0; i < decisions.length; i += 1) {
      const decision = decisions[i]!;
      if (decision.score !== scores[i]) decisions[i] = { ...decision, score: scores[i]! } satisfies Decision;
    }
  }
  return { ...answer, keptIds, decisions, basePlanId: "", keptRuns: [], decisionRuns: [], decisionScores: [] };
}

/** The list `runs` (pairs (start, count); start -1 takes from `own`) makes of `base` and `own`. */
function pieces<T>(runs: readonly number[], base: readonly T[], own: readonly T[]): T[] | undefined {
  if (runs.length % 2 !== 0) return undefined;
  const out: T[] = [];
  let taken = 0;
  for (let r = 0; r < runs.length; r += 2) {
    const start = runs[r]!;
    const count = runs[r + 1]!;
    if (count < 0) return undefined;
    if (start === -1) {
      if (taken + count > own.length) return undefined;
      for (let i = 0; i < count; i += 1) out.push(own[taken + i]!);
      taken += count;
    } else {
      if (start < 0 || start + count > base.length) return undefined;
      for (let i = 0; i < count; i += 1) out.push(base[start + i]!);
    }
  }
  return taken === own.length ? out : undefined;
}

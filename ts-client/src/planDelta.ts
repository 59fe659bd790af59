import type { Decision, OptimizeResponse } from "./generated/ctxopt/v1/ctxopt.js";

/**
 * Rebuilds the whole plan a delta answer stands for (OptimizeRequest.keep_plan
 * and base_plan_id; the proto's comments define the encoding): kept ids and
 * decisions are copy runs over `held` plus the entries the answer carries,
 * scores come from `decisionScores` when it is set. Copied decisions are
 * `held`'s own objects (a new one only where the score moved), and a list
 * the answer copies whole, no score moved, is `held`'s own array: a repeated
 * plan allocates almost nothing. `held` itself never changes.
 *
 * Returns undefined when the answer does not fit `held` (another base, a run
 * out of range, entries left over or missing): the caller then asks for a
 * full plan. A full answer is returned as it is.
 */
export function applyPlanDelta(held: OptimizeResponse | undefined, answer: OptimizeResponse): OptimizeResponse | undefined {
  if (!answer.basePlanId) return answer;
  if (held === undefined || held.planId !== answer.basePlanId) return undefined;
  const keptIds = pieces(answer.keptRuns, held.keptIds, answer.keptIds);
  let decisions = pieces(answer.decisionRuns, held.decisions, answer.decisions);
  if (keptIds === undefined || decisions === undefined) return undefined;
  const scores = answer.decisionScores;
  if (scores.length > 0) {
    if (scores.length !== decisions.length) return undefined;
    decisions = withScores(decisions, scores);
  }
  return { ...answer, keptIds, decisions, basePlanId: "", keptRuns: [], decisionRuns: [], decisionScores: [] };
}

/** `decisions` with `scores`: the same array when none moved, else a copy (it may be the held plan's). */
function withScores(decisions: Decision[], scores: readonly number[]): Decision[] {
  let out: Decision[] | undefined;
  for (let i = 0; i < decisions.length; i += 1) {
    const decision = decisions[i]!;
    if (decision.score === scores[i]) continue;
    out ??= decisions.slice();
    out[i] = { ...decision, score: scores[i]! } satisfies Decision;
  }
  return out ?? decisions;
}

/**
 * The list `runs` (pairs (start, count); start -1 takes from `own`) makes of
 * `base` and `own`: `base` itself when the runs copy it whole, else a new
 * array of the exact size (runs are checked before anything is allocated).
 */
function pieces<T>(runs: readonly number[], base: T[], own: readonly T[]): T[] | undefined {
  if (runs.length % 2 !== 0) return undefined;
  let total = 0;
  let taken = 0;
  for (let r = 0; r < runs.length; r += 2) {
    const start = runs[r]!;
    const count = runs[r + 1]!;
    if (count < 0) return undefined;
    if (start === -1) taken += count;
    else if (start < 0 || start + count > base.length) return undefined;
    total += count;
  }
  if (taken !== own.length) return undefined;
  if (taken === 0 && runs.length === 2 && runs[0] === 0 && total === base.length) return base;
  const out = new Array<T>(total);
  let at = 0;
  taken = 0;
  for (let r = 0; r < runs.length; r += 2) {
    const start = runs[r]!;
    const count = runs[r + 1]!;
    const from = start === -1 ? own : base;
    const offset = start === -1 ? taken : start;
    for (let i = 0; i < count; i += 1) out[at + i] = from[offset + i]!;
    if (start === -1) taken += count;
    at += count;
  }
  return out;
}

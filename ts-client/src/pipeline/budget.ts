import type { GetServerInfoResponse } from "../generated/ctxopt/v1/ctxopt.js";
import { PRESSURE_SHARE, TARGET_SHARE, THRESHOLD_SHARE } from "./defaults.js";

/** A budget in percent of the window: where a collection runs, where it lands, above what PRESERVABLE chunks may go. */
export interface BudgetPercents {
  readonly threshold: number;
  readonly target: number;
  readonly pressure: number;
}

/**
 * The budget a request applies: each percentage as set, else its default.
 * The target never goes above the threshold and the pressure never below it,
 * so a threshold set past a default drags that default along.
 *
 * @example resolvePercents({ threshold: 30 }, { threshold: 100, target: 90, pressure: 100 }) // { threshold: 30, target: 30, pressure: 100 }
 */
export function resolvePercents(set: Partial<BudgetPercents>, defaults: BudgetPercents): BudgetPercents {
  const threshold = set.threshold ?? defaults.threshold;
  return {
    threshold,
    target: Math.min(set.target ?? defaults.target, threshold),
    pressure: Math.max(set.pressure ?? defaults.pressure, threshold),
  };
}

/** The host optimizer's defaults: the cross-validated shares of its ceiling (percent of the window). */
export function ceilingDefaults(ceilingPercent: number): BudgetPercents {
  return {
    threshold: ceilingPercent * THRESHOLD_SHARE,
    target: ceilingPercent * TARGET_SHARE,
    pressure: ceilingPercent * PRESSURE_SHARE,
  };
}

/** The server's default percentages (GetServerInfo), when it reported usable ones. */
export function serverBudget(info: GetServerInfoResponse | undefined): BudgetPercents | undefined {
  const budget = info?.defaultBudget;
  if (budget === undefined) return undefined;
  const percents = { threshold: budget.thresholdPercent, target: budget.targetPercent, pressure: budget.pressurePercent };
  return Object.values(percents).every((p) => p > 0 && p <= 100) ? percents : undefined;
}

/**
 * Where a local fallback lands, in percent of the window, when a target is
 * known (set, or the server's): never above the threshold. Undefined: no
 * target known, and the fallback only has to fit the window.
 */
export function knownTargetPercent(set: Partial<BudgetPercents>, server: BudgetPercents | undefined): number | undefined {
  const target = set.target ?? server?.target;
  if (target === undefined) return undefined;
  return Math.min(target, set.threshold ?? server?.threshold ?? target);
}

/** The smallest percentage sent to the service (its budget reads 0 as unset). */
const MIN_PERCENT = 0.01;

/**
 * The budget as the service must read it when it sees only the chunks, at
 * its own counts: `offChunkTokens` (what else the request carries, and what
 * the window count adds to the service's counts) come off the window, and
 * each percentage is restated on what is left, so the plan lands where
 * `percents` aim on the whole request.
 */
export function chunkBudget(windowTokens: number, offChunkTokens: number, percents: BudgetPercents) {
  const chunkWindow = Math.max(1, windowTokens - offChunkTokens);
  // Never 0: the service reads 0 as unset and would apply its own default.
  const restated = (percent: number) => Math.min(100, Math.max(MIN_PERCENT, (100 * ((windowTokens * percent) / 100 - offChunkTokens)) / chunkWindow));
  return {
    contextLimitTokens: chunkWindow,
    thresholdPercent: restated(percents.threshold),
    targetPercent: restated(percents.target),
    pressurePercent: restated(percents.pressure),
  };
}

import { CtxoptCallError, GrpcStatus } from "./client.js";
import { Action, type OptimizeResponse } from "./generated/ctxopt/v1/ctxopt.js";
import type { ContextSummary } from "./summary.js";

/** The health check answered, but not SERVING. */
export class ServiceUnhealthy extends Error {
  constructor() {
    super("service not serving");
  }
}

/** Why a build went without the service, in a few words for the summary line. */
export function fallbackReason(error: unknown): string {
  if (error instanceof ServiceUnhealthy) return "service not serving";
  if (error instanceof CtxoptCallError) {
    if (error.code === GrpcStatus.DEADLINE_EXCEEDED) return `deadline missed in ${error.method}`;
    if (error.code === GrpcStatus.UNAVAILABLE) return `service unavailable in ${error.method}`;
    return `${error.method} failed: ${GrpcStatus[error.code] ?? error.code}: ${error.details}`;
  }
  return error instanceof Error ? error.message : String(error);
}

export function countActions(plan: Pick<OptimizeResponse, "decisions">): Pick<ContextSummary, "stashed" | "trimmed" | "masked" | "deleted"> {
  // One counting pass: filtering per action copied the decisions four times on every build with a plan.
  let stashed = 0;
  let trimmed = 0;
  let masked = 0;
  let deleted = 0;
  for (const d of plan.decisions) {
    if (d.action === Action.ACTION_STASH) stashed += 1;
    else if (d.action === Action.ACTION_TRIM) trimmed += 1;
    else if (d.action === Action.ACTION_MASK) masked += 1;
    else if (d.action === Action.ACTION_DELETE) deleted += 1;
  }
  return { stashed, trimmed, masked, deleted };
}

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
  const count = (action: Action) => plan.decisions.filter((d) => d.action === action).length;
  return {
    stashed: count(Action.ACTION_STASH),
    trimmed: count(Action.ACTION_TRIM),
    masked: count(Action.ACTION_MASK),
    deleted: count(Action.ACTION_DELETE),
  };
}

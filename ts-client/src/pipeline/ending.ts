import type { MappedContent } from "../gemini/mapping.js";
import type { OptimizeResponse } from "../generated/ctxopt/v1/ctxopt.js";
import type { SyncReport } from "../sessionMirror.js";
import type { BuildOutcome, ContextSummary } from "../summary.js";

/** Turns with the tokens of the whole request they make (the request's other pieces included), measured once. */
export interface Sized {
  readonly turns: MappedContent[];
  readonly tokens: number;
}

/** How one request ends: its outcome, what goes out (none: the original), and what the summary adds. */
export interface Ending {
  readonly outcome: BuildOutcome;
  readonly sent?: Sized;
  readonly extra?: Partial<ContextSummary>;
  readonly plan?: OptimizeResponse;
  readonly sync?: SyncReport;
}

/** `ending`'s plan and sync, as the fields of a front's result. */
export function planAndSync(ending: Ending): { plan?: OptimizeResponse; sync?: SyncReport } {
  return { ...(ending.plan ? { plan: ending.plan } : {}), ...(ending.sync ? { sync: ending.sync } : {}) };
}

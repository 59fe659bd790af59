import type { Part } from "./types.js";
import { Action, type Decision, type OptimizeResponse } from "../generated/ctxopt/v1/ctxopt.js";
import { type MappedContent, type MappedPart, remapPart } from "./mapping.js";
import { isVerbatimPart } from "./parts.js";

export interface AppliedPlan {
  /** The history with the plan applied (not yet repaired). */
  readonly turns: MappedContent[];
  /** Parts the plan removed (STASH, DELETE), by chunk id. */
  readonly removedIds: string[];
  /** Parts the plan rewrote (TRIM, MASK), by chunk id. */
  readonly rewrittenIds: string[];
  /**
   * Parts the plan asked to rewrite that must stay byte for byte (thoughts,
   * thought signatures): kept as received, so the service must get them back.
   */
  readonly keptVerbatimIds: string[];
}

/**
 * Applies a plan to a mapped history, in place of each part:
 * KEEP leaves it; TRIM and MASK replace its body with the decision's
 * `replacement_text` (a functionResponse keeps its name and id and gets
 * `{output: replacement}`, a functionCall keeps name and id and gets
 * `{ctxopt_masked: replacement}` as args, inline data becomes text); STASH
 * and DELETE drop it. A part the plan does not mention stays as it is; a
 * thought or thoughtSignature part is never rewritten.
 */
export function applyPlan(turns: readonly MappedContent[], plan: Pick<OptimizeResponse, "keptIds" | "decisions">): AppliedPlan {
  const kept = new Set(plan.keptIds);
  const decisions = new Map<string, Decision>(plan.decisions.map((d) => [d.chunkId, d]));
  const removedIds: string[] = [];
  const rewrittenIds: string[] = [];
  const keptVerbatimIds: string[] = [];
  const result = turns.map((turn): MappedContent => {
    const parts: MappedPart[] = [];
    for (const mapped of turn.parts) {
      const id = mapped.chunk.id;
      const decision = decisions.get(id);
      const action = decision?.action ?? (kept.has(id) ? Action.ACTION_KEEP : undefined);
      if (action === Action.ACTION_STASH || action === Action.ACTION_DELETE) {
        removedIds.push(id);
      } else if ((action === Action.ACTION_TRIM || action === Action.ACTION_MASK) && decision !== undefined) {
        if (isVerbatimPart(mapped.part)) {
          keptVerbatimIds.push(id);
          parts.push(mapped);
        } else {
          rewrittenIds.push(id);
          parts.push(remapPart(mapped, rewritePart(mapped.part, decision.replacementText), decision.replacementText));
        }
      } else {
        parts.push(mapped);
      }
    }
    return { ...turn, parts };
  });
  return { turns: result, removedIds, rewrittenIds, keptVerbatimIds };
}

function rewritePart(part: Part, replacement: string): Part {
  const response = part.functionResponse;
  if (response !== undefined) {
    // Name and id stay (they pair the response with its call); multimodal
    // response parts belong to the payload being replaced.
    return {
      functionResponse: {
        ...(response.id === undefined ? {} : { id: response.id }),
        ...(response.name === undefined ? {} : { name: response.name }),
        response: { output: replacement },
      },
    };
  }
  const call = part.functionCall;
  if (call !== undefined) return { functionCall: { ...call, args: { ctxopt_masked: replacement } } };
  return { text: replacement };
}

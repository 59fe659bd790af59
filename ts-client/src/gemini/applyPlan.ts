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
 *
 * A turn the plan does not change is returned as the same object, and the
 * same rewrite of the same part gives back the same part (plans repeat their
 * rewrites from build to build until the next collection).
 */
export function applyPlan(turns: readonly MappedContent[], plan: Pick<OptimizeResponse, "keptIds" | "decisions">): AppliedPlan {
  // Kept and unmentioned parts both stay: only decisions change anything.
  const decisions = new Map<string, Decision>();
  for (const d of plan.decisions) decisions.set(d.chunkId, d);
  const removedIds: string[] = [];
  const rewrittenIds: string[] = [];
  const keptVerbatimIds: string[] = [];
  // Plain loops: this runs over every part of every build that gets a plan.
  const result: MappedContent[] = new Array<MappedContent>(turns.length);
  for (let t = 0; t < turns.length; t += 1) {
    const turn = turns[t]!;
    let parts: MappedPart[] | undefined;
    for (let index = 0; index < turn.parts.length; index += 1) {
      const mapped = turn.parts[index]!;
      const decision = decisions.get(mapped.chunk.id);
      let next: MappedPart | undefined = mapped;
      if (decision !== undefined) {
        const id = mapped.chunk.id;
        if (decision.action === Action.ACTION_STASH || decision.action === Action.ACTION_DELETE) {
          removedIds.push(id);
          next = undefined;
        } else if (decision.action === Action.ACTION_TRIM || decision.action === Action.ACTION_MASK) {
          if (isVerbatimPart(mapped.part)) {
            keptVerbatimIds.push(id);
          } else {
            rewrittenIds.push(id);
            next = rewritten(mapped, decision.replacementText);
          }
        }
      }
      if (parts === undefined && next !== mapped) parts = turn.parts.slice(0, index);
      if (parts !== undefined && next !== undefined) parts.push(next);
    }
    result[t] = parts === undefined ? turn : changedTurn(turn, parts);
  }
  return { turns: result, removedIds, rewrittenIds, keptVerbatimIds };
}

/** Each turn's latest changed version, reused while it holds the same parts. */
const changedTurns = new WeakMap<MappedContent, MappedContent>();

function changedTurn(turn: MappedContent, parts: MappedPart[]): MappedContent {
  const cached = changedTurns.get(turn);
  if (cached !== undefined && sameParts(cached.parts, parts)) return cached;
  const result = { ...turn, parts };
  changedTurns.set(turn, result);
  return result;
}

/** A loop, not `every`: a closure over `parts` would allocate on every changed turn of every build. */
function sameParts(a: readonly MappedPart[], b: readonly MappedPart[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

/** Each part's latest rewrite, reused while the replacement text stays the same. */
const rewrites = new WeakMap<MappedPart, MappedPart>();

function rewritten(mapped: MappedPart, replacement: string): MappedPart {
  const cached = rewrites.get(mapped);
  if (cached !== undefined && cached.chunk.text === replacement) return cached;
  const result = remapPart(mapped, rewritePart(mapped.part, replacement), replacement);
  rewrites.set(mapped, result);
  return result;
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

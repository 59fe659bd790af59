import { Action, type Chunk, type Decision, type OptimizeResponse } from "../generated/ctxopt/v1/ctxopt.js";
import type { MappedContent } from "../gemini/mapping.js";
import { countActions } from "../serviceErrors.js";
import type { ContextSummary } from "../summary.js";

/** What a plan says about chunks, without its figures: what `judgePlan` applies. */
export type PlanDecisions = Pick<OptimizeResponse, "keptIds" | "decisions">;

/**
 * The decisions of the collections so far, by chunk id, re-applied to the
 * same chunks on every request until the next collection replaces them (so
 * the prompt's prefix stays byte-identical between collections).
 *
 * Only `adopt` and `keepSignedCalls` change what is remembered; reading a
 * plan or its counts never does.
 */
export class PlanMemory {
  private readonly decisions = new Map<string, Decision>();

  get isEmpty(): boolean {
    return this.decisions.size === 0;
  }

  /**
   * Takes a plan the service applied. It is authoritative for what it holds:
   * a chunk it keeps that was removed before was restored (e.g. through MCP)
   * and comes back; a KEEP decision forgets the earlier one.
   */
  adopt(plan: OptimizeResponse): void {
    for (const id of plan.keptIds) {
      if (isRemoval(this.decisions.get(id)?.action)) this.decisions.delete(id);
    }
    for (const decision of plan.decisions) {
      if (decision.action === Action.ACTION_KEEP) this.decisions.delete(decision.chunkId);
      else this.decisions.set(decision.chunkId, decision);
    }
  }

  /**
   * Forgets, for good, the removal of signed calls whose parallel step keeps
   * another call (`signedCallsToKeep`): once back, such a call stays, so the
   * prompt's prefix does not change when its siblings go later.
   */
  keepSignedCalls(turns: readonly MappedContent[]): void {
    for (const id of signedCallsToKeep(turns, this.decisions)) this.decisions.delete(id);
  }

  /** The remembered decisions on chunks of `turns`, as a plan to apply. */
  planFor(turns: readonly MappedContent[]): PlanDecisions {
    const present = new Set<string>();
    for (const turn of turns) for (const p of turn.parts) present.add(p.chunk.id);
    return { keptIds: [], decisions: [...this.decisions.values()].filter((d) => present.has(d.chunkId)) };
  }

  /** How many of the remembered decisions on `turns` stash, trim, mask or delete. */
  countsFor(turns: readonly MappedContent[]): Pick<ContextSummary, "stashed" | "trimmed" | "masked" | "deleted"> {
    return countActions(this.planFor(turns));
  }

  /**
   * The chunks as the service should hold them: decided removals absent,
   * rewrites as rewritten; sent with `tokens: 0` so the service counts them.
   */
  serviceView(chunks: readonly Chunk[]): Chunk[] {
    const view: Chunk[] = [];
    for (const chunk of chunks) {
      const decision = this.decisions.get(chunk.id);
      if (decision === undefined) view.push({ ...chunk, tokens: 0 });
      else if (decision.action === Action.ACTION_TRIM || decision.action === Action.ACTION_MASK) {
        view.push({ ...chunk, text: decision.replacementText, tokens: 0 });
      }
    }
    return view;
  }
}

/**
 * Ids of signed calls (and their responses) whose removal must be undone:
 * Gemini 3 signs only the first call of a parallel step, so while any call of
 * the step stays, the signed one stays too.
 */
export function signedCallsToKeep(turns: readonly MappedContent[], decisions: ReadonlyMap<string, Decision>): string[] {
  const removed = (id: string) => isRemoval(decisions.get(id)?.action);
  const ids: string[] = [];
  turns.forEach((turn, index) => {
    if (turn.role !== "model") return;
    const calls = turn.parts.filter((p) => p.part.functionCall !== undefined);
    const signed = calls.filter((p) => p.part.thoughtSignature !== undefined && removed(p.chunk.id));
    if (signed.length === 0 || !calls.some((p) => !removed(p.chunk.id))) return;
    const answers = turns[index + 1]?.parts ?? [];
    for (const call of signed) {
      ids.push(call.chunk.id, ...answers.filter((a) => a.chunk.parentId === call.chunk.id).map((a) => a.chunk.id));
    }
  });
  return ids;
}

function isRemoval(action: Action | undefined): boolean {
  return action === Action.ACTION_STASH || action === Action.ACTION_DELETE;
}

import type { MappedContent } from "./mapping.js";

export interface Truncation {
  readonly turns: MappedContent[];
  /** Turns dropped from the front (after the locked opening). */
  readonly droppedTurns: number;
}

/**
 * The local fallback when the service cannot answer: drop the oldest turns
 * until the history fits `targetTokens`, cutting only in front of a user turn
 * that carries no functionResponse so every call keeps its answer and the
 * history still opens with a user turn. The first `lockedPrefix` turns (the
 * environment context) and the latest turn always stay. When nothing fits,
 * the deepest valid cut is taken.
 */
export function truncateHistory(turns: readonly MappedContent[], targetTokens: number, lockedPrefix: number, fixedTokens = 0): Truncation {
  const tokensOf = (turn: MappedContent): number => turn.parts.reduce((sum, p) => sum + p.chunk.tokens, 0);
  const prefix = turns.slice(0, lockedPrefix);
  const prefixTokens = prefix.reduce((sum, t) => sum + tokensOf(t), fixedTokens);
  let remaining = turns.slice(lockedPrefix).reduce((sum, t) => sum + tokensOf(t), 0);
  if (prefixTokens + remaining <= targetTokens) return { turns: [...turns], droppedTurns: 0 };
  let cut = lockedPrefix;
  for (let index = lockedPrefix; index < turns.length - 1; index += 1) {
    remaining -= tokensOf(turns[index]!);
    if (isCutPoint(turns[index + 1]!, prefix.at(-1))) {
      cut = index + 1;
      if (prefixTokens + remaining <= targetTokens) break;
    }
  }
  return { turns: [...prefix, ...turns.slice(cut)], droppedTurns: cut - lockedPrefix };
}

/** A turn history may resume at: a user turn answering no call, following a model turn (or nothing). */
function isCutPoint(turn: MappedContent, before: MappedContent | undefined): boolean {
  if (turn.role !== "user" || turn.parts.some((p) => p.part.functionResponse !== undefined)) return false;
  return before === undefined || before.role === "model";
}

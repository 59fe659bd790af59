import type { MappedContent } from "./mapping.js";

export interface Truncation {
  readonly turns: MappedContent[];
  /** Turns dropped (after the locked opening and the task). */
  readonly droppedTurns: number;
}

/**
 * The local fallback when the service cannot answer (or its plan does not
 * fit): drop the oldest exchanges until the history fits `targetTokens`.
 *
 * What stays: the first `lockedPrefix` turns (the environment context), the
 * user turn that opens the conversation after them (the task; in Gemini CLI
 * 0.61 it shares the environment turn), the latest turn and the model turn
 * whose calls it answers. What goes, oldest first: whole exchanges, a model
 * turn together with the user turn after it, so every call leaves with its
 * responses, roles still alternate and a tool loop with no plain user turn
 * in it can still be cut. When nothing more can go, the result may stay over
 * the target; callers check the window.
 */
export function truncateHistory(turns: readonly MappedContent[], targetTokens: number, lockedPrefix: number, fixedTokens = 0): Truncation {
  const tokensOf = (turn: MappedContent): number => turn.parts.reduce((sum, p) => sum + p.chunk.tokens, 0);
  let tokens = turns.reduce((sum, t) => sum + tokensOf(t), fixedTokens);
  if (tokens <= targetTokens) return { turns: [...turns], droppedTurns: 0 };
  let head = Math.min(lockedPrefix, turns.length);
  if (turns[head]?.role === "user" && (head === 0 || turns[head - 1]!.role === "model")) head += 1;
  const last = turns.length - 1;
  const answersCalls = turns[last]?.role === "user" && turns[last]!.parts.some((p) => p.part.functionResponse !== undefined);
  const tail = answersCalls ? last - 1 : last;
  const dropped = new Set<number>();
  for (let i = head; i + 1 < tail && tokens > targetTokens; i += 2) {
    if (turns[i]!.role !== "model" || turns[i + 1]!.role !== "user") break;
    dropped.add(i);
    dropped.add(i + 1);
    tokens -= tokensOf(turns[i]!) + tokensOf(turns[i + 1]!);
  }
  return { turns: turns.filter((_, i) => !dropped.has(i)), droppedTurns: dropped.size };
}

import { type MappedContent, type MappedPart, remapPart } from "./mapping.js";

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

export interface Clipping {
  readonly turns: MappedContent[];
  /** Tool outputs of the latest turn that lost their middle. */
  readonly clipped: number;
}

/** Characters of a clipped output's head and tail never go below this. */
const MIN_CLIP_KEEP = 200;

/**
 * The last resort when the latest turn alone (which truncation keeps) exceeds
 * the window: its tool outputs, largest first, keep their head and tail and
 * lose their middle, a marker in its place, until `excessTokens` are gone.
 * `count` measures a part as the caller judges the window (a clipped text is
 * new to the service, so typically its UTF-8 bytes); a sent request that
 * would be refused as too long helps no one.
 */
export function clipLatest(turns: readonly MappedContent[], excessTokens: number, count: (part: MappedPart) => number): Clipping {
  const last = turns.at(-1);
  if (last === undefined || excessTokens <= 0) return { turns: [...turns], clipped: 0 };
  let excess = excessTokens;
  let clipped = 0;
  const parts = [...last.parts];
  const order = parts.map((p, i) => ({ i, tokens: count(p) })).sort((a, b) => b.tokens - a.tokens);
  for (const { i, tokens } of order) {
    const mapped = parts[i]!;
    const response = mapped.part.functionResponse;
    const output = response?.response?.["output"];
    if (excess <= 0 || response === undefined || typeof output !== "string") continue;
    const allowance = tokens - excess;
    let keep = Math.floor(output.length / 2);
    let candidate = mapped;
    do {
      keep = Math.floor(keep * 0.8);
      const marker = `[ctxopt: ${output.length - 2 * keep} characters clipped to fit the window]`;
      const text = `${output.slice(0, keep)}\n${marker}\n${output.slice(output.length - keep)}`;
      candidate = remapPart(mapped, { ...mapped.part, functionResponse: { ...response, response: { ...response.response, output: text } } }, text);
    } while (count(candidate) > allowance && keep > MIN_CLIP_KEEP);
    excess -= tokens - count(candidate);
    parts[i] = candidate;
    clipped += 1;
  }
  return { turns: [...turns.slice(0, -1), { ...last, parts }], clipped };
}

import { findViolations } from "../gemini/history.js";
import { tokensOf } from "../gemini/judgePlan.js";
import { type MappedContent, type MappedPart, toContents } from "../gemini/mapping.js";
import { clipLatest, truncateHistory } from "../gemini/truncate.js";

/** Where a local truncation aims and how it measures. */
export interface TruncationSpec {
  /** Where it lands when whole exchanges can go (tokens of the whole request). */
  readonly targetTokens: number;
  /** The request's hard limit. */
  readonly windowTokens: number;
  /** Opening turns that never go (the environment context). */
  readonly lockedTurns: number;
  /** Tokens of the request outside the turns (system instruction, tool declarations). */
  readonly fixedTokens: number;
  /** A part's size as the window is judged (default: its chunk's tokens). */
  readonly partTokens?: (part: MappedPart) => number;
  /** `turns` with every part at its window size again after clipping (default: as they are). */
  readonly recount?: (turns: MappedContent[]) => MappedContent[];
}

/** A local truncation: what to send, or why the original goes as is. */
export type LocalTruncation =
  | { readonly sent: MappedContent[]; readonly tokens: number; readonly droppedTurns: number; readonly note: string }
  | { readonly sent: undefined; readonly note: string };

/**
 * The local fallback, under the same history rules as a plan: whole
 * exchanges go oldest first (`truncateHistory`) down to the target; when the
 * latest turns alone still exceed the window, their tool outputs lose their
 * middle (`clipLatest`). A result that would break Gemini's history rules is
 * not sent: the original goes as is. `reason` opens the note.
 */
export function truncateLocally(turns: readonly MappedContent[], reason: string, spec: TruncationSpec): LocalTruncation {
  const truncated = truncateHistory(turns, spec.targetTokens, spec.lockedTurns, spec.fixedTokens);
  if (findViolations(toContents(truncated.turns)).length > 0) {
    return { sent: undefined, note: `${reason}; truncation would break the history, sent as is` };
  }
  let sent = truncated.turns;
  let tokens = spec.fixedTokens + tokensOf(sent);
  let clippedNote = "";
  if (tokens > spec.windowTokens) {
    // The latest turns alone exceed the window: their tool outputs lose their middle.
    const clipping = clipLatest(sent, tokens - spec.windowTokens, spec.partTokens ?? ((part) => part.chunk.tokens));
    sent = spec.recount === undefined ? clipping.turns : spec.recount(clipping.turns);
    tokens = spec.fixedTokens + tokensOf(sent);
    if (clipping.clipped > 0) clippedNote = `; the latest turns alone exceeded the window: ${clipping.clipped} tool output(s) of the latest turn clipped`;
  }
  const still = tokens > spec.windowTokens ? `; still ${fmt(tokens)} tokens: the latest turns alone exceed the window` : "";
  return { sent, tokens, droppedTurns: truncated.droppedTurns, note: `${reason}${clippedNote}${still}` };
}

/** One formatter, not one per call as `toLocaleString` sets up. */
const EN_US = new Intl.NumberFormat("en-US");

export function fmt(n: number): string {
  return EN_US.format(Math.round(n));
}

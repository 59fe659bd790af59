import type { MappedContent } from "../gemini/mapping.js";

/**
 * The session's first prompt: its first user turn that answers no call (in
 * Gemini CLI, the environment turn that carries the task). It states the task
 * every later step serves, so it stays.
 */
export function firstPrompt(turns: readonly MappedContent[]): MappedContent | undefined {
  return turns.find((turn) => turn.role === "user" && turn.parts.every((p) => p.part.functionResponse === undefined));
}

/** What `mandatoryRoots` keeps besides the latest exchange. */
export interface MandatoryRootOptions {
  /** Keep the session's first prompt (`firstPrompt`), the task (default false). */
  readonly keepTask?: boolean;
}

/**
 * Chunk ids no plan may remove: the latest turn, the model turn whose calls
 * it answers or, when the latest turn is a pending call, the turn before it;
 * with `keepTask`, the session's first prompt too.
 */
export function mandatoryRoots(turns: readonly MappedContent[], options: MandatoryRootOptions = {}): string[] {
  const last = turns.at(-1);
  const beforeLast = turns.at(-2);
  const answersCalls = last?.parts.some((p) => p.part.functionResponse !== undefined) ?? false;
  const pendingCall = last?.role === "model" && last.parts.some((p) => p.part.functionCall !== undefined);
  const task = options.keepTask === true ? (firstPrompt(turns)?.parts ?? []) : [];
  const partner = answersCalls || pendingCall ? (beforeLast?.parts ?? []) : [];
  return [...task, ...(last?.parts ?? []), ...partner].map((p) => p.chunk.id);
}

/**
 * How many of the last turns stay roots: up to `most`, as long as they fit in
 * `room` tokens together (roots the target cannot hold make a plan infeasible,
 * and its fallback drops whole exchanges).
 */
export function recentRoots(turns: readonly MappedContent[], most: number, room: number): number {
  let tokens = 0;
  let kept = 0;
  for (let index = turns.length - 1; index >= 0 && kept < most; index -= 1) {
    const turn = turns[index]!;
    if (turn.parts.length === 0) continue;
    tokens += turn.parts.reduce((sum, p) => sum + p.chunk.tokens, 0);
    if (tokens > room) break;
    kept += 1;
  }
  return kept;
}

/** The query's tail that matters (a pasted log can be huge). */
const QUERY_CHARS = 4000;

/**
 * The relevance query of a host's request: the text of the latest user turn
 * that has any (thoughts left out), its last QUERY_CHARS characters. The
 * task's opening text is not added: it is a root (`mandatoryRoots`) and stays
 * whatever the query says.
 */
export function relevanceQuery(turns: readonly MappedContent[]): string {
  for (let index = turns.length - 1; index >= 0; index -= 1) {
    const turn = turns[index]!;
    if (turn.role !== "user") continue;
    const text = turn.parts
      .map((p) => (p.part.thought !== true && typeof p.part.text === "string" ? p.part.text : ""))
      .join("\n")
      .trim();
    if (text !== "") return text.length > QUERY_CHARS ? text.slice(-QUERY_CHARS) : text;
  }
  return "";
}

import type { Content } from "@google/genai";

/** How Gemini CLI opens every chat: its environment-context turn. */
const ENVIRONMENT_CONTEXT_OPENING = "This is the Gemini CLI. We are setting up the context for our chat.";

/**
 * How many opening turns form the environment context (LOCKED): the first
 * user turn when it is Gemini CLI's setup message (or `declared` says so), plus
 * the model's text-only acknowledgement right after it.
 */
export function environmentContextTurns(history: readonly Content[], declared?: boolean): number {
  const first = history[0];
  if (first === undefined || first.role !== "user") return 0;
  const isContext = declared ?? (first.parts ?? []).some((p) => p.text?.startsWith(ENVIRONMENT_CONTEXT_OPENING) === true);
  if (!isContext) return 0;
  const ack = history[1];
  const acknowledged = ack?.role === "model" && (ack.parts ?? []).every((p) => typeof p.text === "string" && p.thought !== true);
  return acknowledged ? 2 : 1;
}

import type { Content } from "./types.js";

/** How Gemini CLI opens every chat: its environment-context turn. */
const ENVIRONMENT_CONTEXT_OPENING = "This is the Gemini CLI. We are setting up the context for our chat.";
/** Gemini CLI 0.61 wraps that text in this tag. */
const SESSION_CONTEXT_TAG = "<session_context>";

/** Whether a text is Gemini CLI's environment context (older plain form or 0.61's `<session_context>`). */
export function isEnvironmentContextText(text: string): boolean {
  const start = text.trimStart();
  return start.startsWith(ENVIRONMENT_CONTEXT_OPENING) || (start.startsWith(SESSION_CONTEXT_TAG) && start.includes(ENVIRONMENT_CONTEXT_OPENING));
}

/**
 * How many opening turns form the environment context (LOCKED): the first
 * user turn when it is Gemini CLI's setup message (or `declared` says so),
 * plus the model's text-only acknowledgement right after it (older versions).
 * Gemini CLI 0.61 sends no acknowledgement: the environment context and the
 * user's first message (the task) arrive coalesced in one user turn, which
 * is locked as a whole.
 */
export function environmentContextTurns(history: readonly Content[], declared?: boolean): number {
  const first = history[0];
  if (first === undefined || first.role !== "user") return 0;
  const isContext = declared ?? (first.parts ?? []).some((p) => typeof p.text === "string" && isEnvironmentContextText(p.text));
  if (!isContext) return 0;
  const ack = history[1];
  const acknowledged = ack?.role === "model" && (ack.parts ?? []).every((p) => typeof p.text === "string" && p.thought !== true);
  return acknowledged ? 2 : 1;
}

import type { Part } from "./types.js";

/** What a Gemini part carries, in the order the mapping checks it. */
export type PartShape = "functionCall" | "functionResponse" | "inlineData" | "thought" | "text" | "other";

export function partShape(part: Part): PartShape {
  if (part.functionCall !== undefined) return "functionCall";
  if (part.functionResponse !== undefined) return "functionResponse";
  if (part.inlineData !== undefined) return "inlineData";
  if (part.thought === true) return "thought";
  if (typeof part.text === "string") return "text";
  return "other";
}

/**
 * Whether the part's chunk text is what the model reads of it (text, thoughts,
 * calls, responses without media), so the service's count of that text is
 * the part's; media parts cost what the host's estimate says.
 */
export function readsAsText(part: Part): boolean {
  const shape = partShape(part);
  if (shape === "inlineData" || shape === "other") return false;
  return shape !== "functionResponse" || !("parts" in (part.functionResponse ?? {}));
}

/** Thought parts and parts carrying a thought signature go back to the model byte for byte. */
export function isVerbatimPart(part: Part): boolean {
  return part.thought === true || part.thoughtSignature !== undefined;
}

/** A part with nothing in it (Gemini rejects them). */
export function isEmptyPart(part: Part): boolean {
  return Object.values(part).every((value) => value === undefined);
}

/** JSON with sorted keys, so equal parts hash equally whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === "object") {
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      const item = (value as Record<string, unknown>)[key];
      if (item !== undefined) sorted[key] = sortKeys(item);
    }
    return sorted;
  }
  return value;
}

const RESPONSE_TEXT_KEYS = ["output", "content", "result", "error"] as const;

/**
 * The chunk text of a part with nothing in it (an empty text, as Gemini 3
 * sends beside a thought signature, or a command's empty output): the service
 * refuses an empty chunk, and one such part would fail the whole request.
 */
export const EMPTY_PART_TEXT = "(empty)";

/**
 * The text the service indexes for a part. Tool output keeps its line breaks
 * (a single string field is shown as is, anything else as indented JSON) so
 * the service can TRIM it by line range; an empty one is EMPTY_PART_TEXT.
 */
export function partChunkText(part: Part): string {
  const text = indexedText(part);
  return text === "" ? EMPTY_PART_TEXT : text;
}

function indexedText(part: Part): string {
  const call = part.functionCall;
  if (call !== undefined) return callText(call.name ?? "", call.args ?? {});
  const response = part.functionResponse;
  // The tool name travels in metadata, not in the text: a TRIM excerpt of this
  // text becomes the response's output, which must not gain a name prefix.
  if (response !== undefined) return responseText(response.response ?? {});
  const data = part.inlineData;
  if (data !== undefined) {
    const bytes = Math.floor(((data.data ?? "").length * 3) / 4);
    return `[inline ${data.mimeType ?? "data"}${data.displayName ? ` ${data.displayName}` : ""}, ${bytes} bytes]`;
  }
  if (typeof part.text === "string") return part.text;
  return canonicalJson(part);
}

/**
 * A call as the service reads it: the name and the JSON arguments, with each
 * multi-line string argument (a heredoc command, a file's new content) after
 * them as written, so the service sees its lines as lines: the lines of
 * earlier outputs a command quotes mark those outputs as quoted.
 */
function callText(name: string, args: Record<string, unknown>): string {
  const inline: Record<string, unknown> = {};
  const blocks: string[] = [];
  for (const [key, value] of Object.entries(args)) {
    if (typeof value === "string" && value.includes("\n")) blocks.push(`${key}:\n${value}`);
    else inline[key] = value;
  }
  return [`${name}(${JSON.stringify(inline)})`, ...blocks].join("\n");
}

function responseText(payload: Record<string, unknown>): string {
  const keys = Object.keys(payload);
  const only = keys.length === 1 ? keys[0] : undefined;
  if (only !== undefined && (RESPONSE_TEXT_KEYS as readonly string[]).includes(only)) {
    const value = payload[only];
    if (typeof value === "string") return value;
  }
  return JSON.stringify(payload, null, 2);
}

/** A file path named by a tool call's arguments (Gemini CLI's read_file, edit, write_file ...). */
export function callFilePath(part: Part): string {
  const args = part.functionCall?.args;
  if (args === undefined) return "";
  for (const key of ["absolute_path", "file_path", "path"]) {
    const value = args[key];
    if (typeof value === "string") return value;
  }
  return "";
}

/** Share of a text's characters inside ``` fences. */
export function fencedCodeShare(text: string): number {
  if (text.length === 0) return 0;
  let inside = 0;
  for (const match of text.matchAll(/```[^\n]*\n([\s\S]*?)```/g)) inside += match[0].length;
  return inside / text.length;
}

import type { Content, Part } from "./types.js";

/**
 * Gemini CLI's local token estimate (`utils/tokenCalculation.ts` of
 * gemini-cli-core 0.61), so the service's budget and the CLI's own context
 * accounting agree:
 * - text: an ASCII character is a quarter of a token, any other 1.5 tokens;
 *   past 100,000 characters, length / 4;
 * - an image (inline or file) is 3,000 tokens, a PDF 25,800, whatever its size;
 * - a functionResponse counts its name and its JSON payload at 4 characters a
 *   token (nested multimodal parts count as parts);
 * - any other part counts its JSON form at 4 characters a token.
 */
export const IMAGE_TOKEN_ESTIMATE = 3_000;
export const PDF_TOKEN_ESTIMATE = 25_800;
const CHARS_PER_TOKEN = 4;
const NON_ASCII_TOKENS_PER_CHAR = 1.5;
const MAX_CHARS_FOR_FULL_HEURISTIC = 100_000;
const MAX_RECURSION_DEPTH = 3;

export function estimateTextTokens(text: string): number {
  return Math.floor(textTokens(text));
}

function textTokens(text: string): number {
  if (text.length > MAX_CHARS_FOR_FULL_HEURISTIC) return text.length / CHARS_PER_TOKEN;
  let tokens = 0;
  for (let i = 0; i < text.length; i += 1) {
    tokens += text.charCodeAt(i) <= 0x7f ? 1 / CHARS_PER_TOKEN : NON_ASCII_TOKENS_PER_CHAR;
  }
  return tokens;
}

/** A part's estimate, floored as Gemini CLI floors its sums. */
export function estimatePartTokens(part: Part): number {
  return Math.floor(partTokens(part, 0));
}

function partTokens(part: Part, depth: number): number {
  if (depth > MAX_RECURSION_DEPTH) return 0;
  if (typeof part.text === "string") return textTokens(part.text);
  const response = part.functionResponse;
  if (response !== undefined) {
    let tokens = (response.name?.length ?? 0) / CHARS_PER_TOKEN;
    if (response.response !== undefined && response.response !== null) tokens += JSON.stringify(response.response).length / CHARS_PER_TOKEN;
    // Gemini 3 multimodal responses carry parts of their own.
    const nested: unknown = "parts" in response ? response.parts : undefined;
    if (Array.isArray(nested)) for (const inner of nested) tokens += partTokens(inner, depth + 1);
    return tokens;
  }
  const mimeType = part.inlineData?.mimeType ?? part.fileData?.mimeType;
  if (mimeType?.startsWith("image/")) return IMAGE_TOKEN_ESTIMATE;
  if (mimeType?.startsWith("application/pdf")) return PDF_TOKEN_ESTIMATE;
  return JSON.stringify(part).length / CHARS_PER_TOKEN;
}

export function estimateContentTokens(content: Content): number {
  let total = 0;
  for (const part of content.parts ?? []) total += estimatePartTokens(part);
  return total;
}

export function estimateContentsTokens(contents: readonly Content[]): number {
  let total = 0;
  for (const content of contents) total += estimateContentTokens(content);
  return total;
}

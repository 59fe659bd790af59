import type { Content, Part } from "@google/genai";

/**
 * Gemini CLI's local token estimate: an ASCII character costs a quarter of a
 * token, any other character 1.5 tokens. The service receives these counts
 * with each chunk so its budget and the CLI's context display agree.
 */
export function estimateTextTokens(text: string): number {
  let ascii = 0;
  let other = 0;
  for (const char of text) {
    if (char.codePointAt(0)! <= 0x7f) ascii += 1;
    else other += 1;
  }
  return Math.ceil(ascii / 4 + other * 1.5);
}

/** Text parts count their text; every other part counts its JSON form. */
export function estimatePartTokens(part: Part): number {
  if (typeof part.text === "string" && Object.keys(part).length === 1) {
    return estimateTextTokens(part.text);
  }
  return estimateTextTokens(JSON.stringify(part));
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

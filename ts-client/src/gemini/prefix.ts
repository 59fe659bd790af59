import type { Content, Part } from "./types.js";
import type { MappedContent, MappedPart } from "./mapping.js";
import { canonicalJson } from "./parts.js";

/**
 * How many leading turns of `contents` are the turns `mapped` was made from
 * (`previous` being the Content objects it was made from, where known), so
 * their mapping can be kept and only the rest mapped again.
 */
export function unchangedPrefix(contents: readonly Content[], previous: readonly Content[], mapped: readonly MappedContent[]): number {
  let same = 0;
  while (same < contents.length && same < mapped.length && sameContent(contents[same]!, previous[same], mapped[same]!)) same += 1;
  return same;
}

/**
 * Whether `content` is the turn `mapped` came from. Cheapest first: the same
 * object, then the same part objects (a host that rebuilds its Content list),
 * then equal JSON walked in place (a host that deep-copies its history, as
 * Gemini CLI's getHistory does); serialising both sides is left for a turn
 * that really differs, so an unchanged history is never re-serialised.
 */
function sameContent(content: Content, previous: Content | undefined, mapped: MappedContent): boolean {
  if (content === previous) return true;
  if (content.role !== mapped.role) return false;
  const parts = content.parts ?? [];
  if (sameParts(parts, mapped.parts)) return true;
  return canonicalJson(parts) === canonicalJson(mapped.parts.map((p) => p.part));
}

/**
 * `parts` equal as JSON to the mapped parts' own, part by part. A plain loop
 * in its own function: a closure here would make V8 allocate a context on
 * every `sameContent` call, the identical turns' too (40 KB a build over
 * 1,000 turns).
 */
function sameParts(parts: readonly Part[], mapped: readonly MappedPart[]): boolean {
  if (parts.length !== mapped.length) return false;
  for (let i = 0; i < parts.length; i += 1) if (!sameJson(parts[i], mapped[i]!.part)) return false;
  return true;
}

/**
 * Deep equality of JSON-like values, key order and undefined members
 * ignored. True only when `canonicalJson` would give both the same text; a
 * value it cannot judge so (a class instance) compares unequal, and the
 * caller serialises.
 */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null || !isPlain(a) || !isPlain(b)) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((item, i) => sameJson(item, b[i]));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  let defined = 0;
  for (const key in left) {
    if (left[key] === undefined) continue;
    defined += 1;
    if (!Object.hasOwn(right, key) || !sameJson(left[key], right[key])) return false;
  }
  for (const key in right) if (right[key] !== undefined) defined -= 1;
  return defined === 0;
}

function isPlain(value: object): boolean {
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === Array.prototype || prototype === null;
}

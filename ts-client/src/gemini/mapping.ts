import { createHash } from "node:crypto";
import type { Content, Part } from "./types.js";
import { Chunk, ChunkKind, GcPolicy, Role } from "../generated/ctxopt/v1/ctxopt.js";
import { estimatePartTokens, estimateTextTokens } from "./tokens.js";
import { callFilePath, canonicalJson, fencedCodeShare, partChunkText, partShape } from "./parts.js";

export type GeminiRole = "user" | "model";

/** One Gemini part and the chunk that stands for it on the service. */
export interface MappedPart {
  readonly part: Part;
  readonly chunk: Chunk;
}

/** One Gemini turn, its parts mapped; `turn` numbers turns across the whole session. */
export interface MappedContent {
  readonly role: GeminiRole;
  readonly turn: number;
  readonly parts: readonly MappedPart[];
}

export interface MapOptions {
  /** Turn number of `contents[0]`; later turns count up from it. */
  readonly firstTurn?: number;
  /** Indexes (into `contents`) of turns that are LOCKED, e.g. the environment context. */
  readonly lockedIndexes?: ReadonlySet<number>;
  /** The turn just before `contents[0]`, whose calls a first user turn may answer. */
  readonly previous?: MappedContent;
  /**
   * The policy of the text parts of a model turn that calls tools: the
   * model's narration of a step whose facts come back in the responses
   * (default: the service's policy for the chunk's kind).
   */
  readonly stepTextPolicy?: GcPolicy;
}

/** Code dominates a text when most of its characters sit in fences. */
const CODE_SHARE = 0.5;

/**
 * Maps Gemini turns to chunks, one chunk per part.
 *
 * Ids hash the turn number, the part index, the role and the part, so the same
 * history maps to the same ids and appending turns never changes earlier ids.
 * The functionCalls of one model turn (a step, parallel or not) and the
 * functionResponses answering them in the next turn share the group id
 * `g-<first call chunk id>` (responses matched by call id, else by name in
 * order), so a step moves as one. Kinds: TOOL_CALL, TOOL_RESULT, CODE when fenced code dominates a
 * text, MESSAGE otherwise. Tokens use the Gemini CLI estimate of the part.
 */
export function mapContents(contents: readonly Content[], options: MapOptions = {}): MappedContent[] {
  const firstTurn = options.firstTurn ?? 0;
  const mapped: MappedContent[] = [];
  let previous = options.previous;
  contents.forEach((content, index) => {
    const turn = firstTurn + index;
    const locked = options.lockedIndexes?.has(index) ?? false;
    const current = mapContent(content, turn, locked, previous, options.stepTextPolicy ?? GcPolicy.GC_POLICY_UNSPECIFIED);
    mapped.push(current);
    previous = current;
  });
  return mapped;
}

/**
 * Each mapped turn's Content, made once per turn object: mapped turns never
 * change in place (a change makes a new turn), so a build hands back the same
 * Content for a turn it did not change instead of a fresh copy of the whole
 * history (most of a repeated build's garbage). Callers must not change the
 * Contents in place either; Gemini CLI copies a turn it rewrites.
 */
const contentsOfTurns = new WeakMap<MappedContent, Content>();

export function toContents(mapped: readonly MappedContent[]): Content[] {
  const contents = new Array<Content>(mapped.length);
  for (let index = 0; index < mapped.length; index += 1) {
    const turn = mapped[index]!;
    let content = contentsOfTurns.get(turn);
    if (content === undefined) {
      content = { role: turn.role, parts: turn.parts.map((p) => p.part) };
      contentsOfTurns.set(turn, content);
    }
    contents[index] = content;
  }
  return contents;
}

export function chunksOf(mapped: readonly MappedContent[]): Chunk[] {
  const chunks: Chunk[] = [];
  for (const content of mapped) for (const p of content.parts) chunks.push(p.chunk);
  return chunks;
}

/** The chunk of a system-side text (system instruction, memory): always LOCKED. */
export function systemChunk(name: "system" | "memory", text: string): Chunk {
  return Chunk.fromPartial({
    id: `${name}-${digest(text)}`,
    role: Role.ROLE_SYSTEM,
    kind: name === "system" ? ChunkKind.CHUNK_KIND_SYSTEM : ChunkKind.CHUNK_KIND_MEMORY,
    text,
    tokens: estimateTextTokens(text),
    policy: GcPolicy.GC_POLICY_LOCKED,
  });
}

export function geminiRole(content: Content, index: number): GeminiRole {
  if (content.role === "user" || content.role === "model") return content.role;
  throw new Error(`history[${index}].role: expected "user" or "model" (got ${JSON.stringify(content.role)})`);
}

/** A chunk rebuilt for a part whose body the plan rewrote; id, group and turn stay. */
export function remapPart(original: MappedPart, part: Part, chunkText: string): MappedPart {
  return {
    part,
    chunk: { ...original.chunk, text: chunkText, tokens: estimatePartTokens(part) },
  };
}

function mapContent(content: Content, turn: number, locked: boolean, previous: MappedContent | undefined, stepTextPolicy: GcPolicy): MappedContent {
  const role = geminiRole(content, turn);
  const parts = content.parts ?? [];
  const callPartners = role === "user" && previous?.role === "model" ? matchCalls(previous, parts) : new Map<number, MappedPart>();
  const ids = parts.map((part, partIndex) => `t${turn}.${partIndex}-${digest(`${role}\n${canonicalJson(identityOf(part))}`)}`);
  // A parallel step (several calls in one model turn) is one group: Gemini 3
  // signs only its first call, so the step must be kept or removed as a whole.
  const firstCall = parts.findIndex((p) => p.functionCall !== undefined);
  const stepGroup = firstCall < 0 ? "" : `g-${ids[firstCall]!}`;
  const mappedParts = parts.map((part, partIndex): MappedPart => {
    const id = ids[partIndex]!;
    const shape = partShape(part);
    const call = callPartners.get(partIndex);
    const text = partChunkText(part);
    const chunk = Chunk.fromPartial({
      id,
      role: role === "user" ? Role.ROLE_USER : Role.ROLE_MODEL,
      kind: kindOf(shape, text),
      text,
      tokens: estimatePartTokens(part),
      turn,
      policy: locked ? GcPolicy.GC_POLICY_LOCKED : stepGroup !== "" && shape === "text" ? stepTextPolicy : GcPolicy.GC_POLICY_UNSPECIFIED,
      groupId: shape === "functionCall" ? stepGroup : (call?.chunk.groupId ?? ""),
      parentId: call?.chunk.id ?? "",
      filePath: shape === "functionCall" ? callFilePath(part) : (call?.chunk.filePath ?? ""),
      metadata: { gemini_part: shape, ...toolName(part) },
    });
    return { part, chunk };
  });
  return { role, turn, parts: mappedParts };
}

/**
 * Gemini CLI adds this placeholder signature to unsigned first calls of the
 * active tool loop and drops it once the loop is over: the same part, so the
 * same id.
 */
export const SYNTHETIC_THOUGHT_SIGNATURE = "skip_thought_signature_validator";

function identityOf(part: Part): Part {
  if (part.thoughtSignature !== SYNTHETIC_THOUGHT_SIGNATURE) return part;
  const { thoughtSignature: _synthetic, ...rest } = part;
  return rest;
}

function toolName(part: Part): Record<string, string> {
  const name = part.functionCall?.name ?? part.functionResponse?.name;
  return name === undefined ? {} : { tool_name: name };
}

function kindOf(shape: ReturnType<typeof partShape>, text: string): ChunkKind {
  if (shape === "functionCall") return ChunkKind.CHUNK_KIND_TOOL_CALL;
  if (shape === "functionResponse") return ChunkKind.CHUNK_KIND_TOOL_RESULT;
  if (fencedCodeShare(text) > CODE_SHARE) return ChunkKind.CHUNK_KIND_CODE;
  return ChunkKind.CHUNK_KIND_MESSAGE;
}

/**
 * Pairs the functionResponse parts of a user turn with the functionCall parts
 * of the model turn before it: by call id when both carry one, else the next
 * unanswered call of the same name. Keys are response part indexes.
 */
export function matchCalls(modelTurn: MappedContent, userParts: readonly Part[]): Map<number, MappedPart> {
  const open = modelTurn.parts.filter((p) => p.part.functionCall !== undefined);
  const partners = new Map<number, MappedPart>();
  userParts.forEach((part, index) => {
    const response = part.functionResponse;
    if (response === undefined) return;
    const byId = response.id === undefined ? -1 : open.findIndex((c) => c.part.functionCall?.id === response.id);
    const at = byId >= 0 ? byId : open.findIndex((c) => c.part.functionCall?.name === response.name);
    if (at < 0) return;
    partners.set(index, open[at]!);
    open.splice(at, 1);
  });
  return partners;
}

function digest(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}

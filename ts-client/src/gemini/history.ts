import type { Content, Part } from "./types.js";
import { Chunk, GcPolicy, Role } from "../generated/ctxopt/v1/ctxopt.js";
import { estimateTextTokens } from "./tokens.js";
import type { MappedContent, MappedPart } from "./mapping.js";
import { canonicalJson, isEmptyPart, isVerbatimPart } from "./parts.js";

/**
 * Gemini's history rules, one code each:
 * - `known_role`: every turn is `user` or `model`;
 * - `no_empty_parts`: every turn has parts and no part is empty;
 * - `first_turn_user`: the history starts with a user turn;
 * - `alternating_roles`: no two adjacent turns of one role;
 * - `calls_answered`: a model turn's functionCalls are answered by the next
 *   (user) turn's functionResponses, same count, same order, same name and id
 *   (a call in the very last turn is pending and needs no answer yet);
 * - `no_orphan_response`: no functionResponse without the call it answers.
 * Comparing a result with the history it came from adds:
 * - `latest_turn_intact`: the last turn's parts end the result unchanged;
 * - `pending_call_intact`: the calls the last turn answers stay right before it;
 * - `verbatim_parts_intact`: thought and thoughtSignature parts are returned
 *   exactly as received (or not at all).
 */
export type HistoryRule =
  | "known_role"
  | "no_empty_parts"
  | "first_turn_user"
  | "alternating_roles"
  | "calls_answered"
  | "no_orphan_response"
  | "latest_turn_intact"
  | "pending_call_intact"
  | "verbatim_parts_intact";

export interface Violation {
  readonly rule: HistoryRule;
  /** Index of the turn concerned. */
  readonly turn: number;
  readonly detail: string;
}

/** A fix `repairHistory` made, named by the rule it restored. */
export interface HistoryRepair {
  readonly rule: HistoryRule;
  readonly detail: string;
}

/** Placeholder opening a history whose first user turn is no longer in the window. */
export const OMITTED_START_TEXT = "[Earlier conversation is stashed by ctxopt; it is searchable and restorable.]";

/**
 * What the rules read of one turn: its role and parts, the keys of its calls
 * and responses, and its thought and thought-signed parts. A mapped turn's shape is made
 * once per turn object (turns are never changed in place: a change makes a
 * new turn), so a turn the plan did not touch costs a lookup.
 */
interface TurnShape {
  readonly role: string | undefined;
  readonly parts: readonly Part[];
  readonly calls: readonly CallKey[];
  readonly responses: readonly CallKey[];
  readonly hasEmptyPart: boolean;
  /** No functionResponse comes after a part of another kind (the order `pairCalls` gives). */
  readonly responsesFirst: boolean;
  readonly verbatim: readonly Part[];
}

interface CallKey {
  readonly name: string | undefined;
  readonly id: string | undefined;
}

function shapeOf(role: string | undefined, parts: readonly Part[]): TurnShape {
  const calls: CallKey[] = [];
  const responses: CallKey[] = [];
  const verbatim: Part[] = [];
  let hasEmptyPart = false;
  let responsesFirst = true;
  let others = 0;
  for (const part of parts) {
    if (part.functionCall) calls.push({ name: part.functionCall.name, id: part.functionCall.id });
    if (part.functionResponse) {
      responses.push({ name: part.functionResponse.name, id: part.functionResponse.id });
      if (others > 0) responsesFirst = false;
    } else {
      others += 1;
    }
    if (isVerbatimPart(part)) verbatim.push(part);
    if (isEmptyPart(part)) hasEmptyPart = true;
  }
  return { role, parts, calls, responses, hasEmptyPart, responsesFirst, verbatim };
}

function contentShape(content: Content): TurnShape {
  return shapeOf(content.role, content.parts ?? []);
}

const mappedShapes = new WeakMap<MappedContent, TurnShape>();

function mappedShape(turn: MappedContent): TurnShape {
  let shape = mappedShapes.get(turn);
  if (shape === undefined) {
    shape = shapeOf(
      turn.role,
      turn.parts.map((p) => p.part),
    );
    mappedShapes.set(turn, shape);
  }
  return shape;
}

/** Every violation of Gemini's history rules, in turn order. */
export function findViolations(history: readonly Content[]): Violation[] {
  return violationsOf(history.map(contentShape));
}

function violationsOf(history: readonly TurnShape[]): Violation[] {
  const violations: Violation[] = [];
  history.forEach((shape, turn) => {
    const role = shape.role;
    if (role !== "user" && role !== "model") {
      violations.push({ rule: "known_role", turn, detail: `role ${JSON.stringify(role)}` });
    }
    if (shape.parts.length === 0 || shape.hasEmptyPart) {
      violations.push({ rule: "no_empty_parts", turn, detail: shape.parts.length === 0 ? "no parts" : "an empty part" });
    }
    if (turn === 0 && role !== "user") {
      violations.push({ rule: "first_turn_user", turn, detail: `first turn is ${JSON.stringify(role)}` });
    }
    if (turn > 0 && history[turn - 1]!.role === role) {
      violations.push({ rule: "alternating_roles", turn, detail: `two ${JSON.stringify(role)} turns in a row` });
    }
    callViolations(history, turn, violations);
  });
  return violations;
}

const NO_CALLS: readonly CallKey[] = [];

function callViolations(history: readonly TurnShape[], turn: number, violations: Violation[]): void {
  const shape = history[turn]!;
  const responses = shape.responses;
  const previous = turn > 0 ? history[turn - 1]! : undefined;
  const answered = previous?.role === "model" ? previous.calls : NO_CALLS;
  if (shape.role === "model") {
    const next = history[turn + 1];
    if (shape.calls.length > 0 && next !== undefined && (next.role !== "user" || next.responses.length === 0)) {
      violations.push({ rule: "calls_answered", turn, detail: `${shape.calls.length} functionCall(s) not answered by the next turn` });
    }
  }
  if (responses.length > 0 && answered.length === 0) {
    violations.push({ rule: "no_orphan_response", turn, detail: "functionResponse without a preceding functionCall" });
  } else if (responses.length > 0 && !sameCalls(answered, responses)) {
    violations.push({
      rule: "calls_answered",
      turn: turn - 1,
      detail: `calls [${describe(answered)}] answered by [${describe(responses)}]`,
    });
  }
}

function sameCalls(calls: readonly CallKey[], responses: readonly CallKey[]): boolean {
  if (calls.length !== responses.length) return false;
  // A loop, not `every`: this runs per turn of every plan's check, and a closure allocates.
  for (let i = 0; i < calls.length; i += 1) if (calls[i]!.name !== responses[i]!.name || calls[i]!.id !== responses[i]!.id) return false;
  return true;
}

function describe(keys: readonly CallKey[]): string {
  return keys.map((k) => (k.id === undefined ? `${k.name}` : `${k.name}#${k.id}`)).join(", ");
}

/**
 * What a rewrite of `before` broke that must never change: the latest turn,
 * the pending call it answers, and thought / thoughtSignature parts.
 */
export function preservationViolations(before: readonly Content[], after: readonly Content[]): Violation[] {
  return preservationOf(before.map(contentShape), after.map(contentShape));
}

function preservationOf(before: readonly TurnShape[], after: readonly TurnShape[]): Violation[] {
  const violations: Violation[] = [];
  const lastBefore = before.at(-1);
  const lastAfter = after.at(-1);
  if (lastBefore !== undefined) {
    const kept = lastAfter?.parts ?? [];
    const expected = lastBefore.parts;
    const tail = kept.slice(kept.length - expected.length);
    if (lastAfter?.role !== lastBefore.role || kept.length < expected.length || !sameParts(tail, expected)) {
      violations.push({ rule: "latest_turn_intact", turn: after.length - 1, detail: "the latest turn changed" });
    }
  }
  const pendingBefore = pendingCallParts(before);
  if (pendingBefore.length > 0) {
    const pendingAfter = pendingCallParts(after);
    if (!sameParts(pendingAfter, pendingBefore)) {
      violations.push({ rule: "pending_call_intact", turn: after.length - 2, detail: "the call the latest turn answers changed" });
    }
  }
  // Repair moves parts and never copies them: a part received as is needs no serialising.
  const received = new Set<Part>();
  for (const shape of before) for (const part of shape.verbatim) received.add(part);
  let receivedJson: Set<string> | undefined;
  after.forEach((shape, turn) => {
    for (const part of shape.verbatim) {
      if (received.has(part)) continue;
      receivedJson ??= new Set([...received].map(canonicalJson));
      if (!receivedJson.has(canonicalJson(part))) {
        violations.push({ rule: "verbatim_parts_intact", turn, detail: "a thought or thoughtSignature part changed" });
      }
    }
  });
  return violations;
}

/** The functionCall parts of the model turn the last (user) turn answers. */
function pendingCallParts(history: readonly TurnShape[]): Part[] {
  const last = history.at(-1);
  const previous = history.at(-2);
  if (last?.role !== "user" || previous?.role !== "model") return [];
  if (last.responses.length === 0) return [];
  return previous.parts.filter((p) => p.functionCall !== undefined);
}

function sameParts(a: readonly Part[], b: readonly Part[]): boolean {
  return a.length === b.length && a.every((part, i) => part === b[i] || canonicalJson(part) === canonicalJson(b[i]));
}

export interface RepairOutcome {
  readonly turns: MappedContent[];
  readonly repairs: HistoryRepair[];
  /** Rules still broken after repair (empty: the history is valid). */
  readonly violations: Violation[];
}

/**
 * Repairs a mapped history so it follows Gemini's rules, without touching the
 * latest turn or the call it answers when that can be avoided:
 * empty parts and turns go; adjacent turns of one role merge (all parts kept,
 * in order); responses are put in the order of their calls; a call nobody
 * answers and a response to no call go (they were half of a group the plan
 * removed); a history opening with a model turn gets a placeholder user turn.
 * Whatever cannot be repaired is returned in `violations`: callers must then
 * refuse the result.
 */
export function repairHistory(input: readonly MappedContent[]): RepairOutcome {
  const inputShapes = input.map(mappedShape);
  // A valid history with every turn's responses first is what the repairs below leave unchanged.
  if (inputShapes.every((s) => s.responsesFirst) && violationsOf(inputShapes).length === 0) {
    return { turns: [...input], repairs: [], violations: preservationOf(inputShapes, inputShapes) };
  }
  const repairs: HistoryRepair[] = [];
  let turns = dropEmpty(input, repairs);
  for (let pass = 0; pass < input.length + 1; pass += 1) {
    const merged = mergeAdjacent(turns, repairs);
    const paired = pairCalls(merged, repairs);
    const settled = dropEmpty(paired, repairs);
    const changed = settled.length !== turns.length || settled.some((t, i) => t !== turns[i]);
    turns = settled;
    if (!changed) break;
  }
  if (turns.length > 0 && turns[0]!.role === "model") {
    turns = [omittedStartTurn(turns[0]!.turn), ...turns];
    repairs.push({ rule: "first_turn_user", detail: "history opened with a model turn: placeholder user turn added" });
  }
  const shapes = turns.map(mappedShape);
  const violations = [...violationsOf(shapes), ...preservationOf(inputShapes, shapes)];
  return { turns, repairs, violations };
}

function dropEmpty(turns: readonly MappedContent[], repairs: HistoryRepair[]): MappedContent[] {
  const result: MappedContent[] = [];
  for (const turn of turns) {
    if (turn.parts.length > 0 && !mappedShape(turn).hasEmptyPart) {
      result.push(turn);
      continue;
    }
    const parts = turn.parts.filter((p) => !isEmptyPart(p.part));
    if (parts.length !== turn.parts.length) {
      repairs.push({ rule: "no_empty_parts", detail: `turn ${turn.turn}: ${turn.parts.length - parts.length} empty part(s) dropped` });
    }
    if (parts.length === 0) {
      if (turn.parts.length === 0) repairs.push({ rule: "no_empty_parts", detail: `turn ${turn.turn}: empty turn dropped` });
      continue;
    }
    result.push(parts.length === turn.parts.length ? turn : { ...turn, parts });
  }
  return result;
}

function mergeAdjacent(turns: readonly MappedContent[], repairs: HistoryRepair[]): MappedContent[] {
  const result: MappedContent[] = [];
  for (const turn of turns) {
    const last = result.at(-1);
    if (last !== undefined && last.role === turn.role) {
      result[result.length - 1] = { ...last, parts: [...last.parts, ...turn.parts] };
      repairs.push({ rule: "alternating_roles", detail: `turn ${turn.turn} merged into turn ${last.turn}` });
    } else {
      result.push(turn);
    }
  }
  return result;
}

/** Makes every model turn's calls and the next turn's responses match one to one, in order. */
function pairCalls(turns: readonly MappedContent[], repairs: HistoryRepair[]): MappedContent[] {
  const result = [...turns];
  result.forEach((turn, index) => {
    const previous = index > 0 ? result[index - 1] : undefined;
    if (turn.role === "model") {
      const next = result[index + 1];
      if (next === undefined) return; // a pending call: the next turn will answer it
      const shape = mappedShape(turn);
      // Responses with the calls' keys in the calls' order answer every call.
      if (shape.calls.length === 0 || (next.role === "user" && sameCalls(shape.calls, mappedShape(next).responses))) return;
      const calls = turn.parts.filter((p) => p.part.functionCall !== undefined);
      const answers = next.role === "user" ? answerOrder(calls, next.parts) : [];
      const unanswered = calls.filter((_, i) => answers[i] === undefined);
      if (unanswered.length > 0) {
        result[index] = { ...turn, parts: turn.parts.filter((p) => !unanswered.includes(p)) };
        repairs.push({ rule: "calls_answered", detail: `turn ${turn.turn}: ${unanswered.length} unanswered functionCall(s) dropped` });
      }
      return;
    }
    const shape = mappedShape(turn);
    if (shape.responses.length === 0) return;
    // Already paired one to one, in call order, ahead of the turn's other parts: nothing to move.
    if (shape.responsesFirst && previous?.role === "model" && sameCalls(mappedShape(previous).calls, shape.responses)) return;
    const responses = turn.parts.filter((p) => p.part.functionResponse !== undefined);
    const calls = previous?.role === "model" ? previous.parts.filter((p) => p.part.functionCall !== undefined) : [];
    const ordered = answerOrder(calls, turn.parts).filter((p): p is MappedPart => p !== undefined);
    const orphans = responses.filter((p) => !ordered.includes(p));
    const others = turn.parts.filter((p) => p.part.functionResponse === undefined);
    const parts = [...ordered, ...others];
    if (orphans.length > 0) {
      repairs.push({ rule: "no_orphan_response", detail: `turn ${turn.turn}: ${orphans.length} orphan functionResponse(s) dropped` });
    }
    if (parts.some((p, i) => p !== turn.parts[i]) || parts.length !== turn.parts.length) {
      if (orphans.length === 0) repairs.push({ rule: "calls_answered", detail: `turn ${turn.turn}: responses put in call order` });
      result[index] = { ...turn, parts };
    }
  });
  return result;
}

/** For each call, the response answering it (by id, else next of the same name), or undefined. */
function answerOrder(calls: readonly MappedPart[], parts: readonly MappedPart[]): (MappedPart | undefined)[] {
  const open = parts.filter((p) => p.part.functionResponse !== undefined);
  const byId = calls.map((call) => {
    const id = call.part.functionCall?.id;
    if (id === undefined) return undefined;
    const at = open.findIndex((r) => r.part.functionResponse?.id === id);
    return at < 0 ? undefined : open.splice(at, 1)[0];
  });
  return calls.map((call, i) => {
    if (byId[i] !== undefined || call.part.functionCall?.id !== undefined) return byId[i];
    const at = open.findIndex((r) => r.part.functionResponse?.id === undefined && r.part.functionResponse?.name === call.part.functionCall?.name);
    return at < 0 ? undefined : open.splice(at, 1)[0];
  });
}

function omittedStartTurn(turn: number): MappedContent {
  const part: Part = { text: OMITTED_START_TEXT };
  const chunk = Chunk.fromPartial({
    id: "omitted-start",
    role: Role.ROLE_USER,
    text: OMITTED_START_TEXT,
    tokens: estimateTextTokens(OMITTED_START_TEXT),
    turn,
    policy: GcPolicy.GC_POLICY_LOCKED,
    metadata: { gemini_part: "text" },
  });
  return { role: "user", turn, parts: [{ part, chunk }] };
}

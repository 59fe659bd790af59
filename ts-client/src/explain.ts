import { readFileSync } from "node:fs";
import type { CtxoptClient } from "./client.js";
import { Action, type Decision, type OptimizeResponse } from "./generated/ctxopt/v1/ctxopt.js";
import { environmentContextTurns } from "./gemini/environment.js";
import { chunksOf, type MappedPart, mapContents, systemChunk } from "./gemini/mapping.js";
import { partShape } from "./gemini/parts.js";
import type { Content } from "./gemini/types.js";
import { ceilingDefaults, resolvePercents } from "./pipeline/budget.js";
import { ceilingPercent, geminiCliCompactionLine } from "./pipeline/ceiling.js";
import { RECENT_TURNS, STEP_TEXT_POLICY, STRATEGY } from "./pipeline/defaults.js";
import { mandatoryRoots, relevanceQuery } from "./pipeline/roots.js";
import { fallbackReason } from "./serviceErrors.js";

/** Where the tokens of a context go. */
export type Category = "system" | "user text" | "model text" | "tool calls" | "tool outputs" | "inline data";
export const CATEGORIES: readonly Category[] = ["system", "user text", "model text", "tool calls", "tool outputs", "inline data"];

/** One chunk of the report, with what a collection would do to it. */
export interface ExplainedChunk {
  readonly id: string;
  readonly turn: number;
  readonly category: Category;
  readonly tokens: number;
  /** KEEP, TRIM, MASK, STASH or DELETE (KEEP when the plan leaves it as is or no plan was made). */
  readonly decision: string;
  readonly tokensAfter: number;
  readonly reasons: string[];
  readonly preview: string;
}

export interface ContextReport {
  readonly source: string;
  readonly model: string;
  readonly windowTokens: number;
  readonly totalTokens: number;
  readonly byCategory: Record<Category, number>;
  /** Tokens a collection now would move out of the window (stashed, or trimmed/masked away). */
  readonly stashedTokens: number;
  readonly thresholdPercent: number;
  readonly targetPercent: number;
  /** The plan's tokens after, when the service answered. */
  readonly tokensAfter?: number;
  /** Why there is no plan, when there is none. */
  readonly noPlan?: string;
  readonly largest: ExplainedChunk[];
}

export interface ExplainOptions {
  readonly source: string;
  readonly model: string;
  readonly windowTokens: number;
  readonly systemInstruction?: string;
  readonly thresholdPercent?: number;
  readonly targetPercent?: number;
  /** The service, asked for a stateless dry plan (OptimizeContext, forced); without it, no decisions. */
  readonly client?: CtxoptClient;
  readonly deadlineMs?: number;
  /** How many of the largest chunks to list (default 10). */
  readonly top?: number;
}

/**
 * What fills a context and what ctxopt would do about it: tokens by category
 * (Gemini CLI's estimate) and the largest chunks with the decision and reasons
 * of a collection run now (a forced, stateless dry plan: nothing is stored),
 * planned as the Gemini CLI adapter plans: its strategy, roots and policies.
 */
export async function explainContents(contents: readonly Content[], options: ExplainOptions): Promise<ContextReport> {
  const locked = new Set<number>();
  for (let i = 0; i < environmentContextTurns(contents); i += 1) locked.add(i);
  const turns = mapContents(contents, { lockedIndexes: locked, stepTextPolicy: STEP_TEXT_POLICY });
  const parts = turns.flatMap((t) => t.parts.map((p) => ({ turn: t.turn, role: t.role, mapped: p })));
  const system = options.systemInstruction ? systemChunk("system", options.systemInstruction) : undefined;
  const byCategory: Record<Category, number> = { system: 0, "user text": 0, "model text": 0, "tool calls": 0, "tool outputs": 0, "inline data": 0 };
  if (system) byCategory.system += system.tokens;
  for (const { role, mapped } of parts) byCategory[categoryOf(role, mapped)] += mapped.chunk.tokens;
  const totalTokens = Object.values(byCategory).reduce((a, b) => a + b, 0);
  const percents = resolvePercents(
    { threshold: options.thresholdPercent, target: options.targetPercent },
    // As the Gemini CLI adapter: shares of the lower of the window and Gemini CLI's compression line.
    ceilingDefaults(ceilingPercent(options.windowTokens, geminiCliCompactionLine(options.model))),
  );
  const { threshold: thresholdPercent, target: targetPercent, pressure: pressurePercent } = percents;
  let plan: OptimizeResponse | undefined;
  let noPlan: string | undefined;
  if (options.client === undefined) noPlan = "no service asked";
  else if (!(await options.client.isServing({ deadlineMs: 1000 }))) noPlan = `no ctxopt service at ${options.client.address}`;
  else {
    try {
      const response = await options.client.optimizeContext(
        {
          chunks: [...(system ? [system] : []), ...chunksOf(turns)],
          query: relevanceQuery(turns),
          budget: { contextLimitTokens: options.windowTokens, thresholdPercent, targetPercent, pressurePercent },
          roots: { rootIds: mandatoryRoots(turns, { keepTask: true }), recentTurns: RECENT_TURNS },
          strategy: STRATEGY,
          force: true,
        },
        { deadlineMs: options.deadlineMs ?? 10_000 },
      );
      plan = response.result;
    } catch (error) {
      noPlan = fallbackReason(error);
    }
  }
  const decisions = new Map<string, Decision>((plan?.decisions ?? []).map((d) => [d.chunkId, d]));
  const stashedTokens = (plan?.decisions ?? []).filter((d) => d.action !== Action.ACTION_KEEP).reduce((sum, d) => sum + (d.tokens - d.tokensAfter), 0);
  const largest = parts
    .map(({ turn, role, mapped }): ExplainedChunk => {
      const decision = decisions.get(mapped.chunk.id);
      return {
        id: mapped.chunk.id,
        turn,
        category: categoryOf(role, mapped),
        tokens: mapped.chunk.tokens,
        decision: decision === undefined ? "KEEP" : Action[decision.action].replace("ACTION_", ""),
        tokensAfter: decision === undefined ? mapped.chunk.tokens : decision.tokensAfter,
        reasons: decision?.reasons ?? [],
        preview: preview(mapped),
      };
    })
    .sort((a, b) => b.tokens - a.tokens || a.turn - b.turn)
    .slice(0, options.top ?? 10);
  return {
    source: options.source,
    model: options.model,
    windowTokens: options.windowTokens,
    totalTokens,
    byCategory,
    stashedTokens,
    thresholdPercent,
    targetPercent,
    ...(plan ? { tokensAfter: plan.tokensAfter } : {}),
    ...(noPlan === undefined ? {} : { noPlan }),
    largest,
  };
}

function categoryOf(role: string, mapped: MappedPart): Category {
  const shape = partShape(mapped.part);
  if (shape === "functionCall") return "tool calls";
  if (shape === "functionResponse") return "tool outputs";
  if (shape === "inlineData" || mapped.part.fileData !== undefined) return "inline data";
  return role === "model" ? "model text" : "user text";
}

function preview(mapped: MappedPart): string {
  const name = mapped.chunk.metadata["tool_name"];
  const text = mapped.chunk.text.replace(/\s+/g, " ").trim();
  const head = name === undefined ? text : `${name}: ${text}`;
  return head.length > 60 ? `${head.slice(0, 57)}...` : head;
}

/** The report as a table for a terminal. */
export function formatReport(report: ContextReport): string {
  const pct = (n: number, of: number) => `${((100 * n) / Math.max(of, 1)).toFixed(1)}%`;
  const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
  const lines = [
    `${report.source}: ${fmt(report.totalTokens)} tokens, ${pct(report.totalTokens, report.windowTokens)} of ${fmt(report.windowTokens)} (${report.model}); ` +
      `ctxopt acts at ${report.thresholdPercent}% and lands at ${report.targetPercent}%`,
    "",
    "category            tokens   share",
    ...CATEGORIES.map((c) => `${c.padEnd(16)} ${fmt(report.byCategory[c]).padStart(9)}  ${pct(report.byCategory[c], report.totalTokens).padStart(6)}`),
    `${"stashed".padEnd(16)} ${fmt(report.stashedTokens).padStart(9)}  ${pct(report.stashedTokens, report.totalTokens).padStart(6)}  ${
      report.noPlan === undefined
        ? `(a collection now: ${fmt(report.totalTokens)} -> ${fmt(report.tokensAfter ?? report.totalTokens)} tokens)`
        : `(no plan: ${report.noPlan})`
    }`,
    "",
    "largest chunks:",
    "   tokens  turn  category      decision  after     reasons / preview",
    ...report.largest.map(
      (c) =>
        `${fmt(c.tokens).padStart(9)}  ${`t${c.turn}`.padStart(4)}  ${c.category.padEnd(12)}  ${c.decision.padEnd(8)}  ${fmt(c.tokensAfter).padStart(7)}   ${
          c.reasons.length > 0 ? `[${c.reasons.join(", ")}] ` : ""
        }${c.preview}`,
    ),
  ];
  return lines.join("\n");
}

/**
 * Reads a context Gemini CLI saved: a `/chat save` checkpoint
 * (`{history: Content[]}`), a session recording (`chats/session-*.jsonl`,
 * read with gemini-cli-core's own loader), a bare `Content[]`, or
 * ctxopt-prompt's history file.
 */
export async function readContextFile(path: string): Promise<{ history: Content[]; systemInstruction?: string }> {
  if (path.endsWith(".jsonl")) return { history: await readSessionRecording(path) };
  const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
  if (isContentArray(parsed)) return { history: parsed };
  if (parsed !== null && typeof parsed === "object" && "history" in parsed && isContentArray(parsed.history)) {
    const system = "systemInstruction" in parsed && typeof parsed.systemInstruction === "string" ? parsed.systemInstruction : undefined;
    return { history: parsed.history, ...(system === undefined ? {} : { systemInstruction: system }) };
  }
  throw new Error(`${path}: expected a Content[] array, a /chat save checkpoint {"history": Content[]}, or a session-*.jsonl recording`);
}

async function readSessionRecording(path: string): Promise<Content[]> {
  let core: typeof import("@google/gemini-cli-core");
  try {
    core = await import("@google/gemini-cli-core");
  } catch {
    throw new Error(`${path}: reading a session recording needs @google/gemini-cli-core (npm install @google/gemini-cli-core@0.61.0)`);
  }
  const record = await core.loadConversationRecord(path);
  if (record === null) throw new Error(`${path}: not a Gemini CLI session recording`);
  return core.convertSessionToClientHistory(record.messages).map((turn) => turn.content);
}

function isContentArray(value: unknown): value is Content[] {
  return Array.isArray(value) && value.every((item) => item !== null && typeof item === "object" && "parts" in item && Array.isArray(item.parts));
}

import { randomUUID } from "node:crypto";
import { type CallSettings, CtxoptClient, ServingStatus } from "./client.js";
import { type Flags, inRollout, readFlags } from "./flags.js";
import { Action, type Chunk, type Decision, GcPolicy, type OptimizeResponse, Strategy } from "./generated/ctxopt/v1/ctxopt.js";
import { environmentContextTurns } from "./gemini/environment.js";
import { findViolations } from "./gemini/history.js";
import { judgePlan, type PlanVerdict, tokensOf } from "./gemini/judgePlan.js";
import { chunksOf, type MappedContent, mapContents, systemChunk, toContents } from "./gemini/mapping.js";
import { countingClient, ServerCounts } from "./gemini/serverCounts.js";
import { unchangedPrefix } from "./gemini/prefix.js";
import { clipLatest, truncateHistory } from "./gemini/truncate.js";
import type { Content } from "./gemini/types.js";
import { tokenLimit } from "./models.js";
import { SessionMirror, type SyncReport } from "./sessionMirror.js";
import { type BuildOutcome, buildSummary, type ContextSummary, summaryLine } from "./summary.js";
import { countActions, fallbackReason, ServiceUnhealthy } from "./serviceErrors.js";
import { estimateContentsTokens, estimateTextTokens } from "./tokens.js";

/**
 * Gemini CLI summarises the history with an LLM once its prompt passes this
 * share of the window (`DEFAULT_COMPRESSION_TOKEN_THRESHOLD`). Inside Gemini
 * CLI the adapter keeps the prompt (and so the usage the model reports back)
 * under that line, so the lossy summary is not needed: the line is its ceiling.
 */
export const GEMINI_CLI_COMPRESSION_PERCENT = 50;

/**
 * The defaults as shares of the ceiling (the window for an agent with no
 * compression of its own, Gemini CLI's compression line inside Gemini CLI):
 * a collection runs when the prompt would pass THRESHOLD_SHARE of it and
 * lands at TARGET_SHARE; between collections the prompt only grows, so its
 * prefix stays in the provider's cache. PRESERVABLE chunks go only above
 * PRESSURE_SHARE. Chosen, with RECENT_TURNS, STRATEGY and STEP_TEXT_POLICY,
 * by 5-fold cross-validation on the session replay (benchmarks/replay, README
 * "Session replay"): among the settings billing less than the baselines that
 * stay inside the window, the cheapest reaching needed-later recall 0.95;
 * wider gaps bill less and keep less.
 */
export const THRESHOLD_SHARE = 1;
export const TARGET_SHARE = 0.9;
export const PRESSURE_SHARE = 1;

/** The defaults inside Gemini CLI, in percent of the window. */
export const HOST_THRESHOLD_PERCENT = GEMINI_CLI_COMPRESSION_PERCENT * THRESHOLD_SHARE;
export const HOST_TARGET_PERCENT = GEMINI_CLI_COMPRESSION_PERCENT * TARGET_SHARE;
export const HOST_PRESSURE_PERCENT = GEMINI_CLI_COMPRESSION_PERCENT * PRESSURE_SHARE;

/** What a caller may set; every field wins over the environment. */
export interface HostOptimizerOptions {
  /** The ctxopt service address (default CTXOPT_ADDR, else 127.0.0.1:50051). */
  readonly address?: string;
  /** The service session (default: a fresh id per optimizer). */
  readonly sessionId?: string;
  /** The model whose window applies (default: the request's model). */
  readonly model?: string;
  /** The context window in tokens (default GEMINI_CONTEXT_WINDOW_TOKENS, else the model table's). */
  readonly windowTokens?: number;
  /**
   * The prompt's ceiling in percent of the window: where the host's own
   * compression starts (`withContextOptimizer`: GEMINI_CLI_COMPRESSION_PERCENT),
   * else the window itself (default 100). The default threshold, target and
   * pressure are shares of it.
   */
  readonly ceilingPercent?: number;
  /** The hook engages at this percent of the window (default GEMINI_CONTEXT_THRESHOLD_PERCENT, else THRESHOLD_SHARE of the ceiling). */
  readonly thresholdPercent?: number;
  /** Where a collection lands, percent of the window (default GEMINI_CONTEXT_TARGET_PERCENT, else TARGET_SHARE of the ceiling). */
  readonly targetPercent?: number;
  /** PRESERVABLE chunks go only above this usage (default PRESSURE_SHARE of the ceiling). */
  readonly pressurePercent?: number;
  /**
   * The most recent turns kept as GC roots (default RECENT_TURNS); fewer when
   * they would not fit in the target, so a collection can always land.
   */
  readonly recentTurns?: number;
  /** The service's selection strategy (default STRATEGY). */
  readonly strategy?: Strategy;
  /** The policy of a model turn's text beside its tool calls (default STEP_TEXT_POLICY). */
  readonly stepTextPolicy?: GcPolicy;
  /**
   * Size every part at no less than the host's chars/4 estimate (default
   * false: the service's cl100k counts). `withContextOptimizer` sets it:
   * Gemini CLI sizes its history with that estimate after it edits it and
   * checks every new request with it.
   */
  readonly hostEstimates?: boolean;
  /** The mode when GEMINI_CONTEXT_OPTIMIZATION is unset (default `false`: pass-through). */
  readonly defaultMode?: Flags["mode"];
  /** Flags (default: read from the environment, then overridden by the fields above). */
  readonly flags?: Flags;
  /** The service client (default: one on the address, closed by `close()`). */
  readonly client?: CtxoptClient;
  /** Called with every summary, e.g. to log it. */
  readonly onSummary?: (summary: ContextSummary, line: string) => void;
}

/** One request's contents, optimized. */
export interface OptimizedContents {
  /** What to send (a copy of the input when nothing changed). */
  readonly contents: Content[];
  /** Whether `contents` differs from the input (false: send the original request as is). */
  readonly changed: boolean;
  readonly summary: ContextSummary;
  readonly summaryLine: string;
  /** The plan, when this call ran a collection. */
  readonly plan?: OptimizeResponse;
  /** What this call sent to the service, when it talked to it. */
  readonly sync?: SyncReport;
}

/** Extra request pieces that count against the window. */
export interface RequestExtras {
  readonly model?: string;
  readonly systemInstruction?: string;
  /**
   * Tokens of what else the request carries that the model counts (tool
   * declarations): they count against the window, not as chunks.
   */
  readonly overheadTokens?: number;
}

/**
 * Recent turns kept as GC roots at most: the latest exchange (cross-validated
 * with the shares; the service's own default, 10, keeps whole tool outputs
 * the target then cannot hold and recalls no more).
 */
export const RECENT_TURNS = 2;

/**
 * How the service chooses what goes (cross-validated with the shares): the
 * service's default, HYBRID with line excerpts of tool outputs, keeps as much
 * of what the agent needs later on the replayed sessions as policy tiers and
 * age (STRATEGY_BUDGET) and bills no more.
 */
export const STRATEGY = Strategy.STRATEGY_HYBRID;

/**
 * The model's text beside its tool calls goes before the tool outputs
 * (cross-validated with the shares): it narrates a step whose facts come back
 * in the responses, and the model can reason again from those facts; what it
 * read in an output it could only get back with another tool call.
 */
export const STEP_TEXT_POLICY = GcPolicy.GC_POLICY_EPHEMERAL;

/** The smallest percentage sent to the service (its budget reads 0 as unset). */
const MIN_PERCENT = 0.01;

/**
 * The most the provider's reported prompt size may exceed the service's count
 * of the same prompt before a report is taken for an error (cached or
 * multimodal accounting) rather than a tokenizer that counts more.
 */
const MAX_TOKEN_SCALE = 2;

/** Health is asked again after this long. */
const HEALTH_TTL_MS = 30_000;

/**
 * Context optimization for a host that owns the history and sends all of it
 * on every call (Gemini CLI, an agent on `@google/genai`).
 *
 * Each call maps the contents to chunks whose ids come from the turn's
 * position, the part's position, the role and a hash of the part, so what the
 * host already sent is recognised by content. Decisions of the last
 * collection are kept and re-applied to the same chunks, so between two
 * collections the prompt's prefix is byte-identical from call to call
 * (provider prompt caches stay warm). A collection runs only when the prompt
 * with those decisions passes the threshold: the service then gets only the
 * chunks it lacks (and loses only those the host itself dropped), and its plan
 * replaces the decisions.
 *
 * Sizes are judged with the service's cl100k counts (`ServerCounts`; media
 * parts, and every part with `hostEstimates`, at Gemini CLI's estimate when
 * it is larger), or a part's UTF-8 bytes before the service has counted it;
 * when that bound reaches the threshold the new chunks are sent to be counted
 * before anything is decided.
 *
 * Never worse, never over the window: a plan's result is sent only when it
 * passes Gemini's history rules (the latest turn and any pending call intact,
 * a parallel step's signed call kept with its siblings) and is smaller; a
 * result over the window, a failed or slow service, or an open circuit
 * breaker (CTXOPT_BREAKER_MS after a failure) give local truncation under the
 * same rules, and the summary says so.
 */
export class HostHistoryOptimizer {
  readonly flags: Flags;
  readonly sessionId: string;
  private readonly client: CtxoptClient;
  private readonly ownsClient: boolean;
  private readonly mirror: SessionMirror;
  /** The service's token counts, recorded from every AppendChunks answer and plan. */
  private readonly counts: ServerCounts;
  /** Decisions of the collections so far, by chunk id. */
  private readonly decisions = new Map<string, Decision>();
  /** How much more the provider counted than the service for the last report (>= 1; see `reportUsage`). */
  private tokenScale = 1;
  /** What the last call sent and its window count (none: a pass-through call, measured by the host's estimate only). */
  private lastSent?: { readonly turns: readonly MappedContent[]; readonly tokens: number };
  private healthyUntil = 0;
  private breakerUntil = 0;
  private lastFailure = "";
  /** The last call's contents and their mapping, kept for the next call's unchanged prefix. */
  private lastMapping: { readonly contents: readonly Content[]; readonly turns: readonly MappedContent[]; readonly lockedTurns: number } = { contents: [], turns: [], lockedTurns: 0 };
  /** Calls are serialised: the session is one sequence of states. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: HostOptimizerOptions = {}) {
    const base = options.flags ?? readFlags(modeDefaulted(process.env, options.defaultMode));
    this.flags = {
      ...base,
      ...(options.address === undefined ? {} : { address: options.address }),
      ...(options.thresholdPercent === undefined ? {} : { thresholdPercent: options.thresholdPercent }),
      ...(options.targetPercent === undefined ? {} : { targetPercent: options.targetPercent }),
      ...(options.windowTokens === undefined ? {} : { windowTokens: options.windowTokens }),
    };
    this.sessionId = options.sessionId ?? `host-${randomUUID()}`;
    this.ownsClient = options.client === undefined;
    this.client = options.client ?? new CtxoptClient(this.flags.address, { deadlineMs: this.flags.deadlineMs });
    this.counts = new ServerCounts(options.hostEstimates ?? false);
    this.mirror = new SessionMirror(countingClient(this.client, this.counts), this.sessionId);
  }

  /** Threshold, target and pressure in percent of the window, as this optimizer applies them. */
  get percents(): { readonly threshold: number; readonly target: number; readonly pressure: number } {
    const ceiling = this.options.ceilingPercent ?? 100;
    const threshold = this.flags.thresholdPercent ?? ceiling * THRESHOLD_SHARE;
    // A threshold set below the default target drags the target (and pressure) along.
    const target = Math.min(this.flags.targetPercent ?? ceiling * TARGET_SHARE, threshold);
    const pressure = Math.max(this.options.pressurePercent ?? ceiling * PRESSURE_SHARE, threshold);
    return { threshold, target, pressure };
  }

  /**
   * The prompt size the provider reported for the last request sent
   * (`usageMetadata.promptTokenCount`). When the model's tokenizer counts
   * more than the service's cl100k count of the same prompt, later calls
   * judge sizes against the window shrunk by that ratio (at most
   * MAX_TOKEN_SCALE), so a model that counts differently still gets no
   * request over its window; a report of fewer tokens changes nothing.
   */
  reportUsage(promptTokens: number | undefined): void {
    const last = this.lastSent;
    // only against what the service counted: uncounted parts stand at their bytes
    if (promptTokens === undefined || promptTokens <= 0 || last === undefined || !this.counts.allCounted(last.turns)) return;
    const ratio = promptTokens / last.tokens;
    if (ratio <= MAX_TOKEN_SCALE) this.tokenScale = Math.max(1, ratio);
  }

  close(): void {
    if (this.ownsClient) this.client.close();
  }

  /** Optimizes one request's contents; calls run one at a time, in order. */
  optimize(contents: readonly Content[], extras: RequestExtras = {}): Promise<OptimizedContents> {
    const run = this.queue.then(() => this.optimizeNow(contents, extras));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async optimizeNow(contents: readonly Content[], extras: RequestExtras): Promise<OptimizedContents> {
    if (this.flags.mode === "false") return this.passThrough(contents, extras, "");
    if (!inRollout(this.sessionId, this.flags.rolloutPercent)) return this.passThrough(contents, extras, `session outside the ${this.flags.rolloutPercent}% rollout`);
    let call = this.prepare(contents, extras);
    let projected = this.project(call);
    const tooManyChunks = this.flags.maxChunks > 0 && call.chunks.length > this.flags.maxChunks;
    if (call.fixedTokens + projected.tokens < call.thresholdTokens && !tooManyChunks) return this.withoutCollection(call, projected);
    if (Date.now() < this.breakerUntil) {
      const seconds = Math.ceil((this.breakerUntil - Date.now()) / 1000);
      return this.withoutService(call, `service skipped for ${seconds} s after a failure (${this.lastFailure}; circuit open)`);
    }
    let plan: OptimizeResponse;
    let sync: SyncReport;
    try {
      const settings: CallSettings = { deadline: new Date(Date.now() + this.flags.deadlineMs) };
      await this.checkHealth(settings);
      let counting: SyncReport | undefined;
      if (!this.counted(call)) {
        // Over the threshold on the byte bound: the service counts the new chunks first.
        counting = await this.mirror.sync(this.serviceView(call), settings);
        call = this.recount(call);
        projected = this.project(call);
        if (call.fixedTokens + projected.tokens < call.thresholdTokens && !tooManyChunks) return this.withoutCollection(call, projected, counting);
      }
      ({ plan, sync } = await this.mirror.optimize(this.serviceView(call), this.optimizeRequest(call, projected), settings));
      if (counting !== undefined) sync = { appended: counting.appended + sync.appended, removed: counting.removed + sync.removed, resynced: counting.resynced || sync.resynced };
    } catch (error) {
      this.healthyUntil = 0;
      this.lastFailure = fallbackReason(error);
      this.breakerUntil = Date.now() + this.flags.breakerMs;
      return this.withoutService(call, this.lastFailure);
    }
    return this.usePlan(call, plan, sync);
  }

  /** Off or outside the rollout: measured (Gemini CLI's estimate), not mapped, sent as is. */
  private passThrough(contents: readonly Content[], extras: RequestExtras, note: string): OptimizedContents {
    const started = performance.now();
    const model = this.options.model ?? extras.model ?? "gemini-2.5-pro";
    const tokens = estimateContentsTokens(contents) + (extras.systemInstruction ? estimateTextTokens(extras.systemInstruction) : 0) + (extras.overheadTokens ?? 0);
    const call: PreparedCall = {
      started,
      original: contents,
      model,
      windowTokens: this.flags.windowTokens ?? tokenLimit(model),
      thresholdTokens: 0,
      targetTokens: 0,
      lockedTurns: 0,
      estimated: [],
      turns: [],
      fixed: [],
      fixedTokens: tokens,
      overheadTokens: extras.overheadTokens ?? 0,
      chunks: [],
      tokensBefore: tokens,
    };
    return this.finish(call, "pass-through", undefined, { note });
  }

  private prepare(contents: readonly Content[], extras: RequestExtras): PreparedCall {
    const started = performance.now();
    const model = this.options.model ?? extras.model ?? "gemini-2.5-pro";
    const windowTokens = (this.flags.windowTokens ?? tokenLimit(model)) / this.tokenScale;
    const lockedTurns = environmentContextTurns(contents);
    const turns = this.mapTurns(contents, lockedTurns);
    const fixed = extras.systemInstruction ? [systemChunk("system", extras.systemInstruction)] : [];
    const { threshold, target } = this.percents;
    return this.recount({
      started,
      original: contents,
      model,
      windowTokens,
      thresholdTokens: windowTokens * (threshold / 100),
      targetTokens: windowTokens * (target / 100),
      lockedTurns,
      estimated: turns,
      turns,
      fixed,
      fixedTokens: 0,
      overheadTokens: extras.overheadTokens ?? 0,
      chunks: [...fixed, ...chunksOf(turns)],
      tokensBefore: 0,
    });
  }

  /**
   * Maps `contents`, keeping the previous call's mapped turns for the prefix
   * that is unchanged (Gemini CLI sends its whole history, deep-copied, with
   * every request): only the turns after it are mapped (hashed) again.
   */
  private mapTurns(contents: readonly Content[], lockedTurns: number): MappedContent[] {
    const last = this.lastMapping;
    const same = last.lockedTurns === lockedTurns ? unchangedPrefix(contents, last.contents, last.turns) : 0;
    const locked = new Set<number>();
    for (let index = same; index < lockedTurns; index += 1) locked.add(index - same);
    const fresh = mapContents(contents.slice(same), {
      firstTurn: same,
      lockedIndexes: locked,
      previous: last.turns[same - 1],
      stepTextPolicy: this.options.stepTextPolicy ?? STEP_TEXT_POLICY,
    });
    const turns = [...last.turns.slice(0, same), ...fresh];
    this.lastMapping = { contents: [...contents], turns, lockedTurns };
    return turns;
  }

  /** `call` with every part (and the system instruction) at its window count as the service has counted it so far. */
  private recount(call: PreparedCall): PreparedCall {
    const turns = this.counts.counted(call.estimated);
    const fixedTokens = call.fixed.reduce((sum, c) => sum + this.windowTokens(c), call.overheadTokens);
    return { ...call, turns, fixedTokens, tokensBefore: fixedTokens + tokensOf(turns) };
  }

  private windowTokens(chunk: Chunk): number {
    return this.counts.textTokens(chunk.id, chunk.text, chunk.tokens);
  }

  /** Whether the service has counted every chunk of the call. */
  private counted(call: PreparedCall): boolean {
    return this.counts.allCounted(call.turns) && call.fixed.every((c) => this.counts.get(c.id, c.text) !== undefined);
  }

  /** The prompt as the kept decisions make it (no decisions, or a refused result: the turns as they are). */
  private project(call: PreparedCall): { verdict?: PlanVerdict; turns: MappedContent[]; tokens: number } {
    const verdict = this.decisions.size > 0 && this.flags.mode === "true" ? this.judge(call.turns, this.currentPlan(call.turns)) : undefined;
    const turns = verdict?.accepted ? verdict.turns : call.turns;
    return { ...(verdict === undefined ? {} : { verdict }), turns, tokens: tokensOf(turns) };
  }

  /** `judgePlan` with the result at window counts (a rewritten part counts what the service counted for its replacement). */
  private judge(turns: readonly MappedContent[], plan: Pick<OptimizeResponse, "keptIds" | "decisions">): PlanVerdict {
    const verdict = judgePlan(turns, plan);
    const counted = this.counts.counted(verdict.turns);
    return { ...verdict, turns: counted, tokensAfter: tokensOf(counted) };
  }

  /** Under the threshold: the kept decisions apply (the prefix stays byte-identical), or the request goes as is. */
  private withoutCollection(call: PreparedCall, projected: { verdict?: PlanVerdict }, sync?: SyncReport): OptimizedContents {
    if (projected.verdict?.accepted) return this.finish(call, "optimized", projected.verdict.turns, { ...this.decisionCounts(call.turns), note: "earlier decisions kept (no collection)" }, undefined, sync);
    return this.finish(call, "below-threshold", undefined, {}, undefined, sync);
  }

  /** The decisions that apply to these turns, as a plan (a split parallel step keeps its signed call). */
  private currentPlan(turns: readonly MappedContent[]): Pick<OptimizeResponse, "keptIds" | "decisions"> {
    const present = new Set(chunksOf(turns).map((c) => c.id));
    const decisions = [...this.decisions.values()].filter((d) => present.has(d.chunkId));
    for (const id of signedCallsToKeep(turns, this.decisions)) this.decisions.delete(id);
    const kept = decisions.filter((d) => this.decisions.has(d.chunkId));
    return { keptIds: [], decisions: kept };
  }

  /**
   * The chunks as the service should hold them: decided removals absent,
   * rewrites as rewritten; sent with `tokens: 0` so the service counts them.
   */
  private serviceView(call: PreparedCall): Chunk[] {
    const view: Chunk[] = [];
    for (const chunk of call.chunks) {
      const decision = this.decisions.get(chunk.id);
      if (decision === undefined) view.push({ ...chunk, tokens: 0 });
      else if (decision.action === Action.ACTION_TRIM || decision.action === Action.ACTION_MASK) {
        view.push({ ...chunk, text: decision.replacementText, tokens: 0 });
      }
    }
    this.counts.retain(new Set(call.chunks.map((c) => c.id)));
    return view;
  }

  private async checkHealth(settings: CallSettings): Promise<void> {
    if (Date.now() < this.healthyUntil) return;
    if ((await this.client.health("", settings)) !== ServingStatus.SERVING) throw new ServiceUnhealthy();
    this.healthyUntil = Date.now() + HEALTH_TTL_MS;
  }

  private optimizeRequest(call: PreparedCall, projected: { turns: readonly MappedContent[] }) {
    const last = call.turns.at(-1);
    const beforeLast = call.turns.at(-2);
    const lastAnswersCalls = last?.parts.some((p) => p.part.functionResponse !== undefined) ?? false;
    const lastIsPendingCall = last?.role === "model" && last.parts.some((p) => p.part.functionCall !== undefined);
    const mandatory = [
      ...(firstPrompt(call.turns)?.parts ?? []),
      ...(last?.parts ?? []),
      ...(lastAnswersCalls ? (beforeLast?.parts ?? []) : []),
      ...(lastIsPendingCall ? (beforeLast?.parts ?? []) : []),
    ].map((p) => p.chunk.id);
    const { threshold, target, pressure } = this.percents;
    // The service sees the chunks only, at its own counts: the request's other
    // tokens (tool declarations) and what the window count adds to its counts
    // come off its window, and the percentages are restated on it.
    const excess = this.counts.excess(projected.turns) + call.fixed.reduce((sum, c) => sum + this.windowTokens(c) - (this.counts.get(c.id, c.text) ?? this.windowTokens(c)), 0);
    const overhead = call.overheadTokens + excess;
    const chunkWindow = Math.max(1, call.windowTokens - overhead);
    // Never 0: the service reads 0 as unset and would apply its own default.
    const restated = (percent: number) => Math.min(100, Math.max(MIN_PERCENT, (100 * ((call.windowTokens * percent) / 100 - overhead)) / chunkWindow));
    return {
      query: queryOf(call.turns),
      budget: {
        contextLimitTokens: chunkWindow,
        thresholdPercent: restated(threshold),
        targetPercent: restated(target),
        pressurePercent: restated(pressure),
      },
      roots: { rootIds: mandatory, recentTurns: recentRoots(projected.turns, this.options.recentTurns ?? RECENT_TURNS, call.targetTokens - call.fixedTokens) },
      dryRun: this.flags.mode === "shadow",
      aggressive: this.flags.aggressive,
      strategy: this.options.strategy ?? STRATEGY,
      maxChunks: this.flags.maxChunks,
    };
  }

  private usePlan(call: PreparedCall, plan: OptimizeResponse, sync: SyncReport): OptimizedContents {
    this.counts.recordDecisions(plan.decisions);
    if (!plan.triggered && this.decisions.size === 0) return this.finish(call, "below-threshold", undefined, { note: "service: not triggered" }, plan, sync);
    if (this.flags.mode === "shadow") {
      const verdict = this.judge(call.turns, plan);
      return this.finish(call, "shadow", undefined, { ...countActions(plan), tokensAfter: call.fixedTokens + verdict.tokensAfter, note: verdict.reason }, plan, sync);
    }
    // The service's plan is authoritative for what it holds: a chunk it keeps
    // that was removed before was restored (e.g. through MCP) and comes back.
    for (const id of plan.keptIds) {
      const action = this.decisions.get(id)?.action;
      if (action === Action.ACTION_STASH || action === Action.ACTION_DELETE) this.decisions.delete(id);
    }
    for (const decision of plan.decisions) {
      if (decision.action === Action.ACTION_KEEP) this.decisions.delete(decision.chunkId);
      else this.decisions.set(decision.chunkId, decision);
    }
    const verdict = this.judge(call.turns, this.currentPlan(call.turns));
    const infeasible = plan.triggered && !plan.feasible ? "plan infeasible (the protected turns alone exceed the target)" : "";
    if (!verdict.accepted) {
      return this.sendWithinWindow(call, call.turns, "kept-original", [infeasible, verdict.reason].filter(Boolean).join("; "), plan, sync);
    }
    return this.sendWithinWindow(call, verdict.turns, "optimized", infeasible, plan, sync, this.decisionCounts(call.turns));
  }

  /** Sends `turns` when they fit the window; otherwise truncates locally and says so. */
  private sendWithinWindow(
    call: PreparedCall,
    turns: MappedContent[],
    outcome: BuildOutcome,
    note: string,
    plan?: OptimizeResponse,
    sync?: SyncReport,
    counts: Partial<ContextSummary> = {},
  ): OptimizedContents {
    const tokens = call.fixedTokens + tokensOf(turns);
    if (tokens <= call.windowTokens) return this.finish(call, outcome, outcome === "kept-original" ? undefined : turns, { ...counts, note }, plan, sync);
    const over = `${fmt(tokens)} tokens would exceed the ${fmt(call.windowTokens)}-token window`;
    return this.truncate(call, turns, [note, over].filter(Boolean).join("; "), plan, sync, counts);
  }

  /** No plan: shadow mode sends the original; otherwise local truncation (the plan's earlier decisions applied first). */
  private withoutService(call: PreparedCall, reason: string): OptimizedContents {
    if (this.flags.mode === "shadow") return this.finish(call, "shadow", undefined, { note: `no plan: ${reason}` });
    const projected = this.decisions.size > 0 ? this.judge(call.turns, this.currentPlan(call.turns)) : undefined;
    return this.truncate(call, projected?.accepted ? projected.turns : call.turns, reason);
  }

  private truncate(
    call: PreparedCall,
    turns: readonly MappedContent[],
    reason: string,
    plan?: OptimizeResponse,
    sync?: SyncReport,
    counts: Partial<ContextSummary> = {},
  ): OptimizedContents {
    const truncated = truncateHistory(turns, call.targetTokens, call.lockedTurns, call.fixedTokens);
    if (findViolations(toContents(truncated.turns)).length > 0) {
      return this.finish(call, "fallback", undefined, { note: `${reason}; truncation would break the history, sent as is` }, plan, sync);
    }
    let sent = truncated.turns;
    let clippedNote = "";
    const over = call.fixedTokens + tokensOf(sent) - call.windowTokens;
    if (over > 0) {
      // The latest turns alone exceed the window: their tool outputs lose their middle.
      const clipping = clipLatest(sent, over, (part) => this.counts.partTokens(part));
      sent = this.counts.counted(clipping.turns);
      if (clipping.clipped > 0) clippedNote = `; the latest turns alone exceeded the window: ${clipping.clipped} tool output(s) of the latest turn clipped`;
    }
    const tokens = call.fixedTokens + tokensOf(sent);
    const still = tokens > call.windowTokens ? `; still ${fmt(tokens)} tokens: the latest turns alone exceed the window` : "";
    return this.finish(call, "fallback", sent, { ...counts, droppedTurns: truncated.droppedTurns, note: `${reason}${clippedNote}${still}` }, plan, sync);
  }

  private decisionCounts(turns: readonly MappedContent[]): Pick<ContextSummary, "stashed" | "trimmed" | "masked" | "deleted"> {
    return countActions(this.currentPlan(turns));
  }

  private finish(
    call: PreparedCall,
    outcome: BuildOutcome,
    sent: MappedContent[] | undefined,
    extra: Partial<ContextSummary> = {},
    plan?: OptimizeResponse,
    sync?: SyncReport,
  ): OptimizedContents {
    const contents = sent === undefined ? [...call.original] : toContents(sent);
    const turns = sent ?? call.turns;
    this.lastSent = outcome === "pass-through" ? undefined : { turns, tokens: call.fixedTokens + tokensOf(turns) };
    const summary = buildSummary(
      {
        mode: this.flags.mode,
        model: call.model,
        windowTokens: call.windowTokens,
        tokensBefore: call.tokensBefore,
        outcome,
        tokensAfter: call.fixedTokens + (sent === undefined ? tokensOf(call.turns) : tokensOf(sent)),
        serverMs: plan?.serverMs ?? 0,
        started: call.started,
      },
      extra,
    );
    const line = summaryLine(summary);
    this.options.onSummary?.(summary, line);
    return { contents, changed: sent !== undefined, summary, summaryLine: line, ...(plan ? { plan } : {}), ...(sync ? { sync } : {}) };
  }
}

interface PreparedCall {
  readonly started: number;
  readonly original: readonly Content[];
  readonly model: string;
  readonly windowTokens: number;
  readonly thresholdTokens: number;
  readonly targetTokens: number;
  readonly lockedTurns: number;
  /** The turns at the host's estimate (as mapped). */
  readonly estimated: MappedContent[];
  /** The turns at window counts (`ServerCounts`). */
  readonly turns: MappedContent[];
  /** The system instruction's chunk, at the host's estimate. */
  readonly fixed: Chunk[];
  readonly fixedTokens: number;
  /** Tokens of the request outside the chunks (tool declarations). */
  readonly overheadTokens: number;
  readonly chunks: Chunk[];
  readonly tokensBefore: number;
}

/**
 * The session's first prompt: its first user turn that answers no call (in
 * Gemini CLI, the environment turn that carries the task). It states the task
 * every later step serves, so it stays.
 */
export function firstPrompt(turns: readonly MappedContent[]): MappedContent | undefined {
  return turns.find((turn) => turn.role === "user" && turn.parts.every((p) => p.part.functionResponse === undefined));
}

/**
 * Ids of signed calls (and their responses) whose removal must be undone:
 * Gemini 3 signs only the first call of a parallel step, so while any call of
 * the step stays, the signed one stays too.
 */
export function signedCallsToKeep(turns: readonly MappedContent[], decisions: ReadonlyMap<string, Decision>): string[] {
  const removed = (id: string) => {
    const action = decisions.get(id)?.action;
    return action === Action.ACTION_STASH || action === Action.ACTION_DELETE;
  };
  const ids: string[] = [];
  turns.forEach((turn, index) => {
    if (turn.role !== "model") return;
    const calls = turn.parts.filter((p) => p.part.functionCall !== undefined);
    const signed = calls.filter((p) => p.part.thoughtSignature !== undefined && removed(p.chunk.id));
    if (signed.length === 0 || !calls.some((p) => !removed(p.chunk.id))) return;
    const answers = turns[index + 1]?.parts ?? [];
    for (const call of signed) {
      ids.push(call.chunk.id, ...answers.filter((a) => a.chunk.parentId === call.chunk.id).map((a) => a.chunk.id));
    }
  });
  return ids;
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

/** The relevance query: the latest user text, plus the user text that opened the current task when they differ. */
function queryOf(turns: readonly MappedContent[]): string {
  const userText = (turn: MappedContent) => turn.parts.map((p) => (p.part.thought !== true && typeof p.part.text === "string" ? p.part.text : "")).join("\n").trim();
  const texts = turns.filter((t) => t.role === "user").map(userText).filter((text) => text !== "");
  const latest = texts.at(-1) ?? "";
  return latest.length > QUERY_CHARS ? latest.slice(-QUERY_CHARS) : latest;
}

/** The query's tail that matters (a pasted log can be huge). */
const QUERY_CHARS = 4000;

/** GEMINI_CONTEXT_OPTIMIZATION as set, else the caller's default mode. */
function modeDefaulted(env: NodeJS.ProcessEnv, mode: Flags["mode"] | undefined): NodeJS.ProcessEnv {
  if (mode === undefined || (env["GEMINI_CONTEXT_OPTIMIZATION"] ?? "").trim() !== "") return env;
  return { ...env, GEMINI_CONTEXT_OPTIMIZATION: mode };
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

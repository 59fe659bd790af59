import { randomUUID } from "node:crypto";
import { CtxoptClient } from "./client.js";
import { type Flags, inRollout, readFlags } from "./flags.js";
import type { GcPolicy, OptimizeResponse, Strategy } from "./generated/ctxopt/v1/ctxopt.js";
import { countingClient } from "./gemini/serverCounts.js";
import { type MappedContent, toContents } from "./gemini/mapping.js";
import type { Content } from "./gemini/types.js";
import { tokenLimit } from "./models.js";
import { type BudgetPercents, ceilingDefaults, chunkBudget, resolvePercents } from "./pipeline/budget.js";
import { ceilingPercent } from "./pipeline/ceiling.js";
import { DEFAULT_MODEL, RECENT_TURNS, STEP_TEXT_POLICY, STRATEGY } from "./pipeline/defaults.js";
import { fmt, truncateLocally } from "./pipeline/fallback.js";
import { type Ending, planAndSync, type Sized } from "./pipeline/ending.js";
import { HostSizing, type Judged, type PreparedCall } from "./pipeline/hostSizing.js";
import { PlanMemory } from "./pipeline/planMemory.js";
import { mandatoryRoots, recentRoots, relevanceQuery } from "./pipeline/roots.js";
import { ServiceGate } from "./pipeline/serviceGate.js";
import { SessionMirror, type SyncReport } from "./sessionMirror.js";
import { countActions } from "./serviceErrors.js";
import { buildSummary, type ContextSummary, type SummaryBase, summaryLine } from "./summary.js";
import { estimateContentsTokens, estimateTextTokens } from "./gemini/tokens.js";

export {
  GEMINI_CLI_COMPRESSION_PERCENT,
  HOST_PRESSURE_PERCENT,
  HOST_TARGET_PERCENT,
  HOST_THRESHOLD_PERCENT,
  PRESSURE_SHARE,
  RECENT_TURNS,
  STEP_TEXT_POLICY,
  STRATEGY,
  TARGET_SHARE,
  THRESHOLD_SHARE,
} from "./pipeline/defaults.js";
export { signedCallsToKeep } from "./pipeline/planMemory.js";
export { firstPrompt, recentRoots } from "./pipeline/roots.js";

/** What a caller may set; every field wins over the environment. */
export interface HostOptimizerOptions {
  /** The ctxopt service address (default CTXOPT_ADDR, else 127.0.0.1:50051). */
  readonly address?: string;
  /** The service session (default: a fresh id per optimizer). */
  readonly sessionId?: string;
  /** The model whose window applies (default: the request's model, else DEFAULT_MODEL). */
  readonly model?: string;
  /** The context window in tokens (default GEMINI_CONTEXT_WINDOW_TOKENS, else the model table's). */
  readonly windowTokens?: number;
  /**
   * The prompt size, in tokens, at which the host's own lossy compaction
   * starts for a model (`withContextOptimizer`: `geminiCliCompactionLine`;
   * default none). The ceiling is the lower of it and the window
   * (`ceilingPercent` of pipeline/ceiling); the default threshold, target
   * and pressure are shares of the ceiling.
   */
  readonly compactionLine?: (model: string) => number | undefined;
  /** Overrides that rule: the ceiling in percent of the window. */
  readonly ceilingPercent?: number;
  /**
   * The hook engages at this percent of the window (default
   * GEMINI_CONTEXT_THRESHOLD_PERCENT, else THRESHOLD_SHARE of the ceiling).
   */
  readonly thresholdPercent?: number;
  /**
   * Where a collection lands, percent of the window (default
   * GEMINI_CONTEXT_TARGET_PERCENT, else TARGET_SHARE of the ceiling).
   */
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

/** The prompt as the remembered decisions make it (none, or a refused result: the turns as they are). */
type Projection = Sized & { readonly judged?: Judged };
/** The service's plan for a call, and the plan already judged on it when that was needed to decide on a second pass. */
type PlanAnswer = { readonly plan: OptimizeResponse; readonly sync: SyncReport; readonly judged?: Judged | undefined };

/**
 * Context optimization for a host that owns the history and sends all of it
 * on every call (Gemini CLI, an agent on `@google/genai`).
 *
 * Each call maps the contents to chunks whose ids come from the turn's
 * position, the part's position, the role and a hash of the part, so what the
 * host already sent is recognised by content. Decisions of the last
 * collection are kept (`PlanMemory`) and re-applied to the same chunks, so
 * between two collections the prompt's prefix is byte-identical from call to
 * call (provider prompt caches stay warm). A collection runs only when the
 * prompt with those decisions passes the threshold: the service then gets
 * only the chunks it lacks (and loses only those the host itself dropped),
 * and its plan replaces the decisions.
 *
 * Sizes are judged with the service's cl100k counts (`HostSizing`; media
 * parts, and every part with `hostEstimates`, at Gemini CLI's estimate when
 * it is larger), or a part's UTF-8 bytes before the service has counted it;
 * when that bound reaches the threshold the new chunks are sent to be counted
 * before anything is decided.
 *
 * Never worse, never over the window: a plan's result is sent only when it
 * passes Gemini's history rules (the latest turn and any pending call intact,
 * a parallel step's signed call kept with its siblings) and is smaller; a
 * result over the window, a failed or slow service, or an open circuit
 * breaker (`ServiceGate`) give local truncation under the same rules
 * (`truncateLocally`), and the summary says so.
 */
export class HostHistoryOptimizer {
  readonly flags: Flags;
  readonly sessionId: string;
  private readonly client: CtxoptClient;
  private readonly ownsClient: boolean;
  private readonly mirror: SessionMirror;
  private readonly gate: ServiceGate;
  private readonly memory = new PlanMemory();
  private readonly sizing: HostSizing;
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
    this.gate = new ServiceGate(this.client, this.flags);
    this.sizing = new HostSizing(options.hostEstimates ?? false, options.stepTextPolicy ?? STEP_TEXT_POLICY);
    this.mirror = new SessionMirror(countingClient(this.client, this.sizing.counts), this.sessionId);
  }

  /** Threshold, target and pressure in percent of the window, as this optimizer applies them to requests of its model. */
  get percents(): BudgetPercents {
    return this.percentsFor(this.options.model ?? DEFAULT_MODEL);
  }

  /** The budget for requests to `model`: as set, else shares of the ceiling (the lower of the window and the host's compaction line). */
  percentsFor(model: string): BudgetPercents {
    const ceiling = this.options.ceilingPercent ?? ceilingPercent(this.windowOf(model), this.options.compactionLine?.(model));
    const set = { threshold: this.flags.thresholdPercent, target: this.flags.targetPercent, pressure: this.options.pressurePercent };
    return resolvePercents(set, ceilingDefaults(ceiling));
  }

  /**
   * The prompt size the provider reported for the last request sent
   * (`usageMetadata.promptTokenCount`). When the model's tokenizer counts
   * more than the service's cl100k count of the same prompt, later calls
   * judge sizes against the window shrunk by that ratio (at most 2x), so a
   * model that counts differently still gets no request over its window; a
   * report of fewer tokens changes nothing.
   */
  reportUsage(promptTokens: number | undefined): void {
    this.sizing.reportUsage(promptTokens);
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
    if (!inRollout(this.sessionId, this.flags.rolloutPercent))
      return this.passThrough(contents, extras, `session outside the ${this.flags.rolloutPercent}% rollout`);
    const model = this.modelOf(extras);
    let call = this.sizing.prepare(contents, { ...extras, model, windowTokens: this.windowOf(model), percents: this.percentsFor(model) });
    let projected = this.project(call);
    const tooManyChunks = this.flags.maxChunks > 0 && call.chunks.length > this.flags.maxChunks;
    if (projected.tokens < call.thresholdTokens && !tooManyChunks) return this.withoutCollection(call, projected);
    const skipped = this.gate.skipReason();
    if (skipped !== undefined) return this.withoutService(call, skipped);
    let answer: PlanAnswer;
    try {
      const settings = this.gate.callSettings();
      await this.gate.ensureHealthy(settings);
      let counting: SyncReport | undefined;
      if (!this.sizing.allCounted(call)) {
        // Over the threshold on the byte bound: the service counts the new chunks first.
        counting = await this.mirror.sync(this.serviceView(call), settings);
        call = this.sizing.recount(call);
        projected = this.project(call);
        if (projected.tokens < call.thresholdTokens && !tooManyChunks) return this.withoutCollection(call, projected, counting);
      }
      let { plan, sync } = await this.mirror.optimize(this.serviceView(call), this.optimizeRequest(call, projected), settings);
      let landed: Projection | undefined;
      if (this.flags.mode === "true") {
        // The service judges in its own counts, told the excess of the parts it has
        // counted; the excerpts it keeps carry the host's larger estimate, so it may not
        // collect, or land, where the host's count needs. When the result would still
        // pass the threshold (and so the host's line), one collection more is forced.
        this.sizing.counts.recordDecisions(plan.decisions);
        this.memory.adopt(plan);
        landed = this.project(call);
        if (landed.tokens >= call.thresholdTokens) {
          const again = await this.mirror.optimize(this.serviceView(call), { ...this.optimizeRequest(call, landed), force: true }, settings);
          plan = again.plan;
          sync = mergedSync(sync, again.sync);
          landed = undefined;
        }
      }
      answer = { plan, sync: counting === undefined ? sync : mergedSync(counting, sync), judged: landed?.judged };
    } catch (error) {
      return this.withoutService(call, this.gate.failed(error));
    }
    return this.usePlan(call, answer);
  }

  private modelOf(extras: RequestExtras): string {
    return this.options.model ?? extras.model ?? DEFAULT_MODEL;
  }

  private windowOf(model: string): number {
    return this.flags.windowTokens ?? tokenLimit(model);
  }

  /** Off or outside the rollout: measured (Gemini CLI's estimate), not mapped, sent as is. */
  private passThrough(contents: readonly Content[], extras: RequestExtras, note: string): OptimizedContents {
    const started = performance.now();
    const model = this.modelOf(extras);
    const system = extras.systemInstruction ? estimateTextTokens(extras.systemInstruction) : 0;
    const tokens = estimateContentsTokens(contents) + system + (extras.overheadTokens ?? 0);
    this.sizing.rememberSent(undefined);
    const base = { model, windowTokens: this.windowOf(model), tokensBefore: tokens, tokensAfter: tokens, started };
    return this.report(base, [...contents], { outcome: "pass-through", extra: { note } });
  }

  /** The prompt as the remembered decisions make it, judged once per prepared call. */
  private project(call: PreparedCall): Projection {
    if (this.memory.isEmpty || this.flags.mode !== "true") return call.current;
    const judged = this.judgeRemembered(call);
    return { ...(judged.verdict.accepted ? judged.sized : call.current), judged };
  }

  /** The remembered decisions on this call, judged (a split parallel step gets its signed call back first). */
  private judgeRemembered(call: PreparedCall): Judged {
    this.memory.keepSignedCalls(call.current.turns);
    return this.sizing.judge(call, this.memory.planFor(call.current.turns));
  }

  /** Under the threshold: the kept decisions apply (the prefix stays byte-identical), or the request goes as is. */
  private withoutCollection(call: PreparedCall, projected: Projection, sync?: SyncReport): OptimizedContents {
    const syncPart = sync === undefined ? {} : { sync };
    if (projected.judged?.verdict.accepted) {
      const extra = { ...this.memory.countsFor(call.current.turns), note: "earlier decisions kept (no collection)" };
      return this.finish(call, { outcome: "optimized", sent: projected.judged.sized, extra, ...syncPart });
    }
    return this.finish(call, { outcome: "below-threshold", ...syncPart });
  }

  /** The service's chunks for this call (see `PlanMemory.serviceView`); counts of chunks gone are forgotten. */
  private serviceView(call: PreparedCall) {
    const view = this.memory.serviceView(call.chunks);
    this.sizing.retain(call);
    return view;
  }

  private optimizeRequest(call: PreparedCall, projected: Projection) {
    // The service sees the chunks only, at its own counts: the request's other
    // tokens (tool declarations) and what the window count adds to its counts
    // come off its window, and the percentages are restated on it.
    const offChunkTokens = call.overheadTokens + this.sizing.excess(call, projected.turns);
    const recentTurns = recentRoots(projected.turns, this.options.recentTurns ?? RECENT_TURNS, call.targetTokens - call.fixedTokens);
    return {
      query: relevanceQuery(call.current.turns),
      budget: chunkBudget(call.windowTokens, offChunkTokens, call.percents),
      roots: { rootIds: mandatoryRoots(call.current.turns, { keepTask: true }), recentTurns },
      dryRun: this.flags.mode === "shadow",
      aggressive: this.flags.aggressive,
      strategy: this.options.strategy ?? STRATEGY,
      maxChunks: this.flags.maxChunks,
    };
  }

  private usePlan(call: PreparedCall, { plan, sync, judged: landed }: PlanAnswer): OptimizedContents {
    this.sizing.counts.recordDecisions(plan.decisions);
    if (!plan.triggered && this.memory.isEmpty) return this.finish(call, { outcome: "below-threshold", extra: { note: "service: not triggered" }, plan, sync });
    if (this.flags.mode === "shadow") {
      const { verdict, sized } = this.sizing.judge(call, plan);
      return this.finish(call, { outcome: "shadow", extra: { ...countActions(plan), tokensAfter: sized.tokens, note: verdict.reason }, plan, sync });
    }
    this.memory.adopt(plan);
    const judged = landed ?? this.judgeRemembered(call);
    const infeasible = plan.triggered && !plan.feasible ? "plan infeasible (the protected turns alone exceed the target)" : "";
    if (!judged.verdict.accepted) {
      const note = [infeasible, judged.verdict.reason].filter(Boolean).join("; ");
      return this.sendWithinWindow(call, call.current, { outcome: "kept-original", extra: { note }, plan, sync });
    }
    const extra = { ...this.memory.countsFor(call.current.turns), note: infeasible };
    return this.sendWithinWindow(call, judged.sized, { outcome: "optimized", extra, plan, sync });
  }

  /** Sends `candidate` (the original for `kept-original`) when it fits the window; otherwise truncates locally and says so. */
  private sendWithinWindow(call: PreparedCall, candidate: Sized, ending: Ending): OptimizedContents {
    if (candidate.tokens <= call.windowTokens) return this.finish(call, ending.outcome === "kept-original" ? ending : { ...ending, sent: candidate });
    const over = `${fmt(candidate.tokens)} tokens would exceed the ${fmt(call.windowTokens)}-token window`;
    const note = [ending.extra?.note ?? "", over].filter(Boolean).join("; ");
    return this.truncate(call, candidate.turns, { ...ending, extra: { ...ending.extra, note } });
  }

  /** No plan: shadow mode sends the original; otherwise local truncation (the remembered decisions applied first). */
  private withoutService(call: PreparedCall, reason: string): OptimizedContents {
    if (this.flags.mode === "shadow") return this.finish(call, { outcome: "shadow", extra: { note: `no plan: ${reason}` } });
    const projected = this.memory.isEmpty ? undefined : this.judgeRemembered(call);
    return this.truncate(call, projected?.verdict.accepted ? projected.sized.turns : call.current.turns, { outcome: "fallback", extra: { note: reason } });
  }

  /** Local truncation of `turns`; `ending.extra.note` says why, its counts stay when something is sent. */
  private truncate(call: PreparedCall, turns: readonly MappedContent[], ending: Ending): OptimizedContents {
    const { note: reason = "", ...counts } = ending.extra ?? {};
    const local = truncateLocally(turns, reason, {
      targetTokens: call.targetTokens,
      windowTokens: call.windowTokens,
      lockedTurns: call.lockedTurns,
      fixedTokens: call.fixedTokens,
      partTokens: (part) => this.sizing.counts.partTokens(part),
      recount: (clipped) => this.sizing.counts.counted(clipped),
    });
    const rest = planAndSync(ending);
    if (local.sent === undefined) return this.finish(call, { outcome: "fallback", extra: { note: local.note }, ...rest });
    const extra = { ...counts, droppedTurns: local.droppedTurns, note: local.note };
    return this.finish(call, { outcome: "fallback", sent: { turns: local.sent, tokens: local.tokens }, extra, ...rest });
  }

  private finish(call: PreparedCall, ending: Ending): OptimizedContents {
    const used = ending.sent ?? call.current;
    this.sizing.rememberSent(used);
    const contents = ending.sent === undefined ? [...call.original] : toContents(ending.sent.turns);
    const base = { model: call.model, windowTokens: call.windowTokens, tokensBefore: call.current.tokens, tokensAfter: used.tokens, started: call.started };
    return this.report(base, contents, ending);
  }

  private report(base: Omit<SummaryBase, "mode" | "outcome" | "serverMs">, contents: Content[], ending: Ending): OptimizedContents {
    const summary = buildSummary({ ...base, mode: this.flags.mode, outcome: ending.outcome, serverMs: ending.plan?.serverMs ?? 0 }, ending.extra);
    const line = summaryLine(summary);
    this.options.onSummary?.(summary, line);
    return { contents, changed: ending.sent !== undefined, summary, summaryLine: line, ...planAndSync(ending) };
  }
}

/** A counting sync followed by the plan's own sync, reported as one. */
function mergedSync(counting: SyncReport, sync: SyncReport): SyncReport {
  return { appended: counting.appended + sync.appended, removed: counting.removed + sync.removed, resynced: counting.resynced || sync.resynced };
}

/** GEMINI_CONTEXT_OPTIMIZATION as set, else the caller's default mode. */
function modeDefaulted(env: NodeJS.ProcessEnv, mode: Flags["mode"] | undefined): NodeJS.ProcessEnv {
  if (mode === undefined || (env["GEMINI_CONTEXT_OPTIMIZATION"] ?? "").trim() !== "") return env;
  return { ...env, GEMINI_CONTEXT_OPTIMIZATION: mode };
}

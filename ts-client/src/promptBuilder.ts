import type { Content, Part } from "./gemini/types.js";
import { type CallSettings, CtxoptClient } from "./client.js";
import { countActions } from "./serviceErrors.js";
import { type Flags, inRollout, readFlags } from "./flags.js";
import { type Chunk, type OptimizeResponse, Strategy } from "./generated/ctxopt/v1/ctxopt.js";
import { environmentContextTurns } from "./gemini/environment.js";
import { PlanJudge, tokensOf } from "./gemini/judgePlan.js";
import { chunksOf, type MappedContent, mapContents, systemChunk, toContents } from "./gemini/mapping.js";
import { unchangedPrefix } from "./gemini/prefix.js";
import { tokenLimit } from "./models.js";
import { type BudgetPercents, knownTargetPercent, resolvePercents, serverBudget } from "./pipeline/budget.js";
import { type Ending, planAndSync, type Sized } from "./pipeline/ending.js";
import { fmt, truncateLocally } from "./pipeline/fallback.js";
import { mandatoryRoots } from "./pipeline/roots.js";
import { ServiceGate } from "./pipeline/serviceGate.js";
import { SessionMirror, type SyncReport } from "./sessionMirror.js";
import type { ContextSummary } from "./summary.js";
import { buildSummary, summaryLine } from "./summary.js";

/**
 * Budget knobs, percentages of the model's window. A percentage left unset
 * comes from GEMINI_CONTEXT_THRESHOLD_PERCENT / GEMINI_CONTEXT_TARGET_PERCENT,
 * else from the server's default budget (GetServerInfo): the server is the
 * one home of the defaults.
 */
export interface BudgetOptions {
  /** Overrides the model table's window size. */
  readonly contextLimitTokens?: number;
  /** The hook engages at this usage (default: the server's). */
  readonly thresholdPercent?: number;
  /** Where an optimization lands (default: the server's; never above the threshold). */
  readonly targetPercent?: number;
  /** PRESERVABLE chunks go only above this usage (default: the server's). */
  readonly pressurePercent?: number;
  /** Turns kept as GC roots (server default 10 when unset). */
  readonly recentTurns?: number;
}

/** Turns texts into embeddings (one vector per text), used when GEMINI_EMBEDDING_ENABLED is on. */
export type Embedder = (texts: readonly string[]) => Promise<number[][]>;

export interface PromptBuilderOptions {
  /** Feature flags (default: read from the environment). */
  readonly flags?: Flags;
  /** The service client (default: one on `flags.address`, closed by `close()`). */
  readonly client?: CtxoptClient;
  readonly budget?: BudgetOptions;
  readonly embedder?: Embedder;
  /**
   * Keep each decision's score breakdown in `BuiltPrompt.plan` (default
   * false: plans come lean, which is smaller and faster; reason codes stay).
   */
  readonly explain?: boolean;
}

/** One prompt to build: Gemini CLI's pieces of a generateContent request. */
export interface PromptInput {
  /** Stable id of the chat; the service session and the rollout hash use it. */
  readonly sessionId: string;
  readonly model: string;
  readonly systemInstruction?: string;
  /** Long-term memory (GEMINI.md content), sent with the system instruction. */
  readonly memory?: string;
  /** The chat history so far (pass back `BuiltPrompt.history` after each build). */
  readonly history: readonly Content[];
  /** The new user turn: text, or parts (e.g. the functionResponses of a pending call). */
  readonly message: string | readonly Part[];
  /** The task in progress; joins the message in the relevance query. */
  readonly activeTask?: string;
  /** The file being worked on; chunks showing it are roots. */
  readonly activeFilePath?: string;
  /** Chunk ids that must stay. */
  readonly pinnedIds?: readonly string[];
  /** Whether history[0] is the environment context (default: recognised by its text). */
  readonly environmentContext?: boolean;
}

/** A generateContent request as Gemini CLI builds one (model, contents, system instruction). */
export interface PromptRequest {
  model: string;
  contents: Content[];
  config?: { systemInstruction?: string };
}

export interface BuiltPrompt {
  /** What to send to generateContent. */
  readonly request: PromptRequest;
  /** `request.contents`, typed. */
  readonly contents: Content[];
  /**
   * The history to keep for the next turn: rewritten by the plan in `true`
   * mode (like Gemini CLI's compression), otherwise the history given.
   */
  readonly history: Content[];
  readonly summary: ContextSummary;
  readonly summaryLine: string;
  /** The service's plan, when one was made. */
  readonly plan?: OptimizeResponse;
  /** What this build sent to keep the service's session in step, when it talked to the service. */
  readonly sync?: SyncReport;
}

/** One build's inputs, mapped and measured. */
interface PreparedPrompt {
  readonly input: PromptInput;
  readonly started: number;
  readonly state: SessionState;
  /** The new user turn as Content. */
  readonly message: Content;
  /** Opening turns that are the environment context (LOCKED). */
  readonly lockedTurns: number;
  /** History plus message, mapped. */
  readonly turns: MappedContent[];
  /** Chunks of the system instruction and memory. */
  readonly fixed: readonly Chunk[];
  /** Tokens of the system instruction and memory. */
  readonly fixedTokens: number;
  /** Chunks of the prompt (fixed ones and one per part); the list itself is made only for the service. */
  readonly chunkCount: number;
  /** The turns and the whole prompt's tokens, as given. */
  readonly current: Sized;
  readonly windowTokens: number;
}

interface ServiceAnswer {
  readonly plan: OptimizeResponse;
  readonly sync: SyncReport;
}

interface SessionState {
  readonly mirror: SessionMirror;
  /** The mapped history (with the last message) as the service should hold it. */
  turns: MappedContent[];
  /** The Content objects `turns` came from, for a cheap identity check. */
  contents: Content[];
  nextTurn: number;
  readonly embeddings: Map<string, number[]>;
  /** The last plan's verdict, given again while the turns and the plan repeat. */
  readonly judge: PlanJudge;
  /** The system instruction's and memory's chunks, made again only when their texts change. */
  fixed: { readonly system: string; readonly memory: string; readonly chunks: readonly Chunk[] } | undefined;
  /** The chunk list last sent for `turns` (the fixed chunks first), reused while both are the same. */
  sent: { readonly turns: readonly MappedContent[]; readonly fixed: readonly Chunk[]; readonly chunks: readonly Chunk[] } | undefined;
}

/**
 * Gemini-CLI-style prompt construction with the ctxopt hook.
 *
 * Each build maps the history and the new message to chunks, and, when the
 * flags allow it and usage passes the threshold, sends the service only the
 * delta and asks for a plan. In `true` mode the plan is applied, Gemini's
 * history rules are re-checked and repaired, and the result is sent only when
 * it is valid and smaller (never worse); `shadow` reports and sends the
 * original. A failing, unhealthy or slow service, or an open circuit breaker
 * (`ServiceGate`), gives local truncation under the same rules
 * (`truncateLocally`), and the summary line says so.
 *
 * Threshold, target and pressure come from the budget option, else the
 * flags, else the server's defaults (asked once per connection): the server
 * is the one home of this front's defaults (the host optimizer's are shares
 * of its ceiling, cross-validated on the session replay). The local fallback
 * needs none of them: it lands at the target when one is known and
 * otherwise only makes the prompt fit the window.
 */
export class PromptBuilder {
  readonly flags: Flags;
  private readonly client: CtxoptClient;
  private readonly ownsClient: boolean;
  private readonly gate: ServiceGate;
  private readonly budget: BudgetOptions;
  private readonly embedder: Embedder | undefined;
  private readonly explain: boolean;
  private readonly sessions = new Map<string, SessionState>();

  constructor(options: PromptBuilderOptions = {}) {
    this.flags = options.flags ?? readFlags();
    this.ownsClient = options.client === undefined;
    this.client = options.client ?? new CtxoptClient(this.flags.address, { deadlineMs: this.flags.deadlineMs });
    this.gate = new ServiceGate(this.client, this.flags);
    this.budget = options.budget ?? {};
    this.embedder = options.embedder;
    this.explain = options.explain ?? false;
  }

  close(): void {
    if (this.ownsClient) this.client.close();
  }

  /** Forgets a session's client-side state (the service keeps its own). */
  forget(sessionId: string): void {
    this.sessions.delete(sessionId);
  }

  async build(input: PromptInput): Promise<BuiltPrompt> {
    const prompt = this.prepare(input);
    if (this.flags.mode === "false") return this.finish(prompt, { outcome: "pass-through" });
    if (!inRollout(input.sessionId, this.flags.rolloutPercent)) {
      return this.finish(prompt, { outcome: "pass-through", extra: { note: `session outside the ${this.flags.rolloutPercent}% rollout` } });
    }
    const tooManyChunks = this.flags.maxChunks > 0 && prompt.chunkCount > this.flags.maxChunks;
    const below = (thresholdPercent: number) => prompt.current.tokens < prompt.windowTokens * (thresholdPercent / 100) && !tooManyChunks;
    const skipped = this.gate.skipReason();
    if (skipped !== undefined) {
      const known = this.localThreshold() ?? serverBudget(this.client.lastServerInfo)?.threshold;
      if (known !== undefined && below(known)) return this.finish(prompt, { outcome: "below-threshold" });
      return this.withoutService(prompt, skipped);
    }
    const settings = this.gate.callSettings();
    let answer: ServiceAnswer;
    try {
      // A threshold given here decides without the service; the server's is asked once per connection.
      const threshold = this.localThreshold() ?? (await this.serverDefaults(settings)).threshold;
      if (below(threshold)) return this.finish(prompt, { outcome: "below-threshold" });
      answer = await this.askService(prompt, threshold, settings);
    } catch (error) {
      return this.withoutService(prompt, this.gate.failed(error));
    }
    return this.usePlan(prompt, answer);
  }

  /** Maps the history and the message, and measures them. */
  private prepare(input: PromptInput): PreparedPrompt {
    const started = performance.now();
    const state = this.session(input.sessionId);
    const message: Content = { role: "user", parts: typeof input.message === "string" ? [{ text: input.message }] : [...input.message] };
    const lockedTurns = environmentContextTurns(input.history, input.environmentContext);
    // `concat`, not a spread: one array of the exact size (a spread grows it, the largest garbage of a repeated build).
    const turns = this.reconcile(state, input.history.concat([message]), lockedTurns);
    const fixed = this.fixedChunks(state, input);
    const fixedTokens = fixed.reduce((sum, c) => sum + c.tokens, 0);
    return {
      input,
      started,
      state,
      message,
      lockedTurns,
      turns,
      fixed,
      fixedTokens,
      chunkCount: turns.reduce((count, turn) => count + turn.parts.length, fixed.length),
      current: { turns, tokens: fixedTokens + tokensOf(turns) },
      windowTokens: this.budget.contextLimitTokens ?? this.flags.windowTokens ?? tokenLimit(input.model),
    };
  }

  private async askService(prompt: PreparedPrompt, threshold: number, settings: CallSettings): Promise<ServiceAnswer> {
    await this.gate.ensureHealthy(settings);
    const request = this.optimizeRequest(prompt, await this.budgetPercents(threshold, settings));
    const { chunks, queryEmbedding } = await this.withEmbeddings(prompt.state, this.serviceChunks(prompt), request.query);
    return prompt.state.mirror.optimize(chunks, { ...request, queryEmbedding }, settings);
  }

  /** No plan: shadow mode sends the original; otherwise local truncation under the same history rules. */
  private withoutService(prompt: PreparedPrompt, reason: string): BuiltPrompt {
    if (this.flags.mode === "shadow") return this.finish(prompt, { outcome: "shadow", extra: { note: `no plan: ${reason}` } });
    const local = truncateLocally(prompt.turns, reason, {
      targetTokens: this.fallbackTargetTokens(prompt.windowTokens),
      windowTokens: prompt.windowTokens,
      lockedTurns: prompt.lockedTurns,
      fixedTokens: prompt.fixedTokens,
    });
    if (local.sent === undefined) return this.finish(prompt, { outcome: "fallback", extra: { note: local.note } });
    const sent = { turns: local.sent, tokens: local.tokens };
    return this.finish(prompt, { outcome: "fallback", sent, extra: { droppedTurns: local.droppedTurns, note: local.note } });
  }

  /** Never worse: the plan's result is sent only in `true` mode and only when valid and smaller. */
  private usePlan(prompt: PreparedPrompt, { plan, sync }: ServiceAnswer): BuiltPrompt {
    if (!plan.triggered) return this.finish(prompt, { outcome: "below-threshold", extra: { note: "service: not triggered" }, plan, sync });
    const counts = countActions(plan);
    const verdict = prompt.state.judge.judge(prompt.turns, plan);
    const after: Sized = { turns: verdict.turns, tokens: prompt.fixedTokens + verdict.tokensAfter };
    if (this.flags.mode === "shadow") {
      return this.finish(prompt, { outcome: "shadow", extra: { ...counts, tokensAfter: after.tokens, note: verdict.reason }, plan, sync });
    }
    if (!verdict.accepted) {
      if (prompt.current.tokens > prompt.windowTokens) return this.withoutService(prompt, `${verdict.reason}; the original exceeds the window`);
      return this.finish(prompt, { outcome: "kept-original", extra: { note: verdict.reason }, plan, sync });
    }
    if (after.tokens > prompt.windowTokens) {
      // Never over the window: an infeasible plan falls back to local truncation.
      const why = `plan ${plan.feasible ? "" : "infeasible, "}${fmt(after.tokens)} tokens over the ${fmt(prompt.windowTokens)}-token window`;
      return this.withoutService(prompt, why);
    }
    prompt.state.turns = verdict.turns;
    return this.finish(prompt, { outcome: "optimized", sent: after, extra: counts, plan, sync });
  }

  private finish(prompt: PreparedPrompt, ending: Ending): BuiltPrompt {
    const sent = ending.sent ?? prompt.current;
    const contents = toContents(sent.turns);
    const history = ending.outcome === "optimized" ? this.keepRewritten(prompt.state, contents, prompt.message) : prompt.input.history.slice();
    const summary = buildSummary(
      {
        mode: this.flags.mode,
        model: prompt.input.model,
        windowTokens: prompt.windowTokens,
        tokensBefore: prompt.current.tokens,
        outcome: ending.outcome,
        tokensAfter: sent.tokens,
        serverMs: ending.plan?.serverMs ?? 0,
        started: prompt.started,
      },
      ending.extra,
    );
    return { request: this.request(prompt.input, contents), contents, history, summary, summaryLine: summaryLine(summary), ...planAndSync(ending) };
  }

  private session(sessionId: string): SessionState {
    let state = this.sessions.get(sessionId);
    if (state === undefined) {
      state = {
        mirror: new SessionMirror(this.client, sessionId),
        turns: [],
        contents: [],
        nextTurn: 0,
        embeddings: new Map(),
        judge: new PlanJudge(),
        fixed: undefined,
        sent: undefined,
      };
      this.sessions.set(sessionId, state);
    }
    return state;
  }

  /**
   * Maps `contents`, reusing the mapped turns (and so the chunk ids) of the
   * longest prefix that matches the previous build; turns after it are new
   * and numbered on from the session's turn counter.
   */
  private reconcile(state: SessionState, contents: readonly Content[], lockedTurns: number): MappedContent[] {
    const same = unchangedPrefix(contents, state.contents, state.turns);
    if (same === contents.length && same === state.turns.length) {
      // Nothing new: keep the mapped turns, and remember the caller's objects for the next identity check.
      state.contents.length = same;
      for (let index = 0; index < same; index += 1) state.contents[index] = contents[index]!;
      return state.turns;
    }
    const firstTurn = same === 0 ? 0 : state.nextTurn;
    const locked = new Set<number>();
    for (let index = same; index < lockedTurns; index += 1) locked.add(index - same);
    const fresh = mapContents(contents.slice(same), { firstTurn, lockedIndexes: locked, previous: state.turns[same - 1] });
    const turns = state.turns.slice(0, same);
    for (const turn of fresh) turns.push(turn);
    state.turns = turns;
    state.contents = contents.slice();
    for (const turn of turns) state.nextTurn = Math.max(state.nextTurn, turn.turn + 1);
    return turns;
  }

  private fixedChunks(state: SessionState, input: PromptInput): readonly Chunk[] {
    const system = input.systemInstruction ?? "";
    const memory = input.memory ?? "";
    if (state.fixed?.system === system && state.fixed.memory === memory) return state.fixed.chunks;
    const chunks: Chunk[] = [];
    if (system) chunks.push(systemChunk("system", system));
    if (memory) chunks.push(systemChunk("memory", memory));
    state.fixed = { system, memory, chunks };
    return chunks;
  }

  /** The chunks the service should hold for this prompt: the list last sent when nothing changed, else a new one. */
  private serviceChunks({ state, turns, fixed }: PreparedPrompt): readonly Chunk[] {
    if (state.sent?.turns === turns && state.sent.fixed === fixed) return state.sent.chunks;
    const chunks = [...fixed, ...chunksOf(turns)];
    state.sent = { turns, fixed, chunks };
    return chunks;
  }

  private optimizeRequest({ input, turns, windowTokens }: PreparedPrompt, percents: BudgetPercents) {
    const messageText = typeof input.message === "string" ? input.message : input.message.map((p) => p.text ?? "").join("\n");
    return {
      query: [messageText, input.activeTask ?? ""].filter(Boolean).join("\n"),
      budget: {
        contextLimitTokens: windowTokens,
        thresholdPercent: percents.threshold,
        targetPercent: percents.target,
        pressurePercent: percents.pressure,
      },
      roots: {
        activeFilePath: input.activeFilePath ?? "",
        rootIds: [...mandatoryRoots(turns), ...(input.pinnedIds ?? [])],
        ...(this.budget.recentTurns !== undefined ? { recentTurns: this.budget.recentTurns } : {}),
      },
      dryRun: this.flags.mode === "shadow",
      aggressive: this.flags.aggressive,
      strategy: Strategy.STRATEGY_HYBRID,
      maxChunks: this.flags.maxChunks,
      lean: !this.explain,
    };
  }

  /** Budget option, else GEMINI_CONTEXT_THRESHOLD_PERCENT; undefined leaves it to the server. */
  private localThreshold(): number | undefined {
    return this.budget.thresholdPercent ?? this.flags.thresholdPercent;
  }

  /** Target and pressure as set (budget option, else flag), else the server's, around `threshold` (`resolvePercents`). */
  private async budgetPercents(threshold: number, settings: CallSettings): Promise<BudgetPercents> {
    const set = { threshold, target: this.budget.targetPercent ?? this.flags.targetPercent, pressure: this.budget.pressurePercent };
    const { target, pressure } = set;
    const defaults = target !== undefined && pressure !== undefined ? { threshold, target, pressure } : await this.serverDefaults(settings);
    return resolvePercents(set, defaults);
  }

  /**
   * The server's default budget (GetServerInfo, cached by the client per
   * connection). Health is checked before the first contact only, so a build
   * under the threshold costs no round trip once the defaults are known.
   */
  private async serverDefaults(settings: CallSettings): Promise<BudgetPercents> {
    if (this.client.lastServerInfo === undefined) await this.gate.ensureHealthy(settings);
    const info = await this.client.serverInfo(settings);
    const defaults = serverBudget(info);
    if (defaults === undefined) {
      throw new Error(
        `GetServerInfo.default_budget: expected threshold, target and pressure percentages in (0, 100] (got ${JSON.stringify(info.defaultBudget ?? null)})`,
      );
    }
    return defaults;
  }

  /**
   * Where the local fallback lands: the target as the budget option, the
   * flags or the server last said (`knownTargetPercent`), else the window
   * itself (never worse only needs the prompt to fit).
   */
  private fallbackTargetTokens(windowTokens: number): number {
    const set = { threshold: this.localThreshold(), target: this.budget.targetPercent ?? this.flags.targetPercent };
    const target = knownTargetPercent(set, serverBudget(this.client.lastServerInfo));
    return target === undefined ? windowTokens : windowTokens * (target / 100);
  }

  /**
   * With embeddings on, copies of the chunks carrying their vectors (computed
   * once per chunk id) and the query's; otherwise the chunks as they are.
   */
  private async withEmbeddings(state: SessionState, chunks: readonly Chunk[], query: string): Promise<{ chunks: readonly Chunk[]; queryEmbedding: number[] }> {
    if (!this.flags.embeddingEnabled || this.embedder === undefined) return { chunks, queryEmbedding: [] };
    const missing = chunks.filter((c) => !state.embeddings.has(c.id));
    const vectors = await this.embedder([query, ...missing.map((c) => c.text)]);
    missing.forEach((c, i) => state.embeddings.set(c.id, vectors[i + 1] ?? []));
    const embedded = chunks.map((c) => ({ ...c, embedding: state.embeddings.get(c.id) ?? [] }));
    return { chunks: embedded, queryEmbedding: vectors[0] ?? [] };
  }

  private request(input: PromptInput, contents: Content[]): PromptRequest {
    const system = [input.systemInstruction, input.memory].filter(Boolean).join("\n\n");
    return { model: input.model, contents, ...(system ? { config: { systemInstruction: system } } : {}) };
  }

  /** The rewritten history minus the new message, remembered for the next build's identity check. */
  private keepRewritten(state: SessionState, contents: readonly Content[], message: Content): Content[] {
    const last = contents.at(-1)!;
    const lastParts = last.parts ?? [];
    // Repair may have merged the message into a user turn before it: keep that turn's own parts.
    const rest = lastParts.slice(0, lastParts.length - (message.parts?.length ?? 0));
    const history = rest.length > 0 ? [...contents.slice(0, -1), { ...last, parts: rest }] : contents.slice(0, -1);
    state.contents = rest.length > 0 ? [] : [...history, message];
    return history;
  }
}

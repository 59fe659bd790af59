import type { Chunk } from "../generated/ctxopt/v1/ctxopt.js";
import { environmentContextTurns } from "../gemini/environment.js";
import { judgePlan, type PlanVerdict, tokensOf } from "../gemini/judgePlan.js";
import { chunksOf, type MappedContent, mapContents, systemChunk } from "../gemini/mapping.js";
import { unchangedPrefix } from "../gemini/prefix.js";
import { ServerCounts } from "../gemini/serverCounts.js";
import type { Content } from "../gemini/types.js";
import type { GcPolicy } from "../generated/ctxopt/v1/ctxopt.js";
import type { BudgetPercents } from "./budget.js";
import type { Sized } from "./ending.js";
import type { PlanDecisions } from "./planMemory.js";

/**
 * The most the provider's reported prompt size may exceed the service's count
 * of the same prompt before a report is taken for an error (cached or
 * multimodal accounting) rather than a tokenizer that counts more.
 */
const MAX_TOKEN_SCALE = 2;

/** A plan judged on a call: the verdict, and its result sized at window counts. */
export interface Judged {
  readonly verdict: PlanVerdict;
  readonly sized: Sized;
}

/** One request of a host, mapped and sized. */
export interface PreparedCall {
  readonly started: number;
  readonly original: readonly Content[];
  readonly model: string;
  readonly windowTokens: number;
  /** The budget this call applies, in percent of the window. */
  readonly percents: BudgetPercents;
  readonly thresholdTokens: number;
  readonly targetTokens: number;
  readonly lockedTurns: number;
  /** The turns at the host's estimate (as mapped). */
  readonly estimated: MappedContent[];
  /** The system instruction's chunk, at the host's estimate. */
  readonly fixed: Chunk[];
  /** Tokens of the request outside the chunks (tool declarations). */
  readonly overheadTokens: number;
  /** Tokens of the request outside the turns, at window counts: the system instruction and the overhead. */
  readonly fixedTokens: number;
  readonly chunks: Chunk[];
  /** The turns at window counts (`ServerCounts`) and the whole request's tokens: the size before any decision. */
  readonly current: Sized;
}

/** What a host request carries besides its contents. */
export interface CallPieces {
  readonly model: string;
  /** The window before calibration (`reportUsage` may shrink it). */
  readonly windowTokens: number;
  readonly percents: BudgetPercents;
  readonly systemInstruction?: string;
  readonly overheadTokens?: number;
}

/**
 * How a host's requests are mapped and sized: the service's token counts
 * (`ServerCounts`), the previous call's mapping (its unchanged prefix is not
 * hashed again), and the calibration from the prompt size the provider
 * reports (`reportUsage`).
 */
export class HostSizing {
  /** The service's token counts, recorded from every AppendChunks answer and plan. */
  readonly counts: ServerCounts;
  /** How much more the provider counted than the service for the last report (>= 1; see `reportUsage`). */
  private tokenScale = 1;
  /** What the last call sent (none: a pass-through call, measured by the host's estimate only). */
  private lastSent?: Sized;
  /** The last call's contents and their mapping, kept for the next call's unchanged prefix. */
  private lastMapping: { readonly contents: readonly Content[]; readonly turns: readonly MappedContent[]; readonly lockedTurns: number } = {
    contents: [],
    turns: [],
    lockedTurns: 0,
  };

  constructor(
    hostEstimates: boolean,
    private readonly stepTextPolicy: GcPolicy,
  ) {
    this.counts = new ServerCounts(hostEstimates);
  }

  /**
   * The prompt size the provider reported for the last request sent. When the
   * model's tokenizer counts more than the service's cl100k count of the same
   * prompt, later calls judge sizes against the window shrunk by that ratio
   * (at most MAX_TOKEN_SCALE); a report of fewer tokens changes nothing.
   */
  reportUsage(promptTokens: number | undefined): void {
    const last = this.lastSent;
    // only against what the service counted: uncounted parts stand at their bytes
    if (promptTokens === undefined || promptTokens <= 0 || last === undefined || !this.counts.allCounted(last.turns)) return;
    const ratio = promptTokens / last.tokens;
    if (ratio <= MAX_TOKEN_SCALE) this.tokenScale = Math.max(1, ratio);
  }

  /** Records what was sent (undefined: the request went untouched and unmeasured). */
  rememberSent(sent: Sized | undefined): void {
    this.lastSent = sent;
  }

  prepare(contents: readonly Content[], pieces: CallPieces): PreparedCall {
    const started = performance.now();
    const windowTokens = pieces.windowTokens / this.tokenScale;
    const lockedTurns = environmentContextTurns(contents);
    const turns = this.mapTurns(contents, lockedTurns);
    const fixed = pieces.systemInstruction ? [systemChunk("system", pieces.systemInstruction)] : [];
    return this.recount({
      started,
      original: contents,
      model: pieces.model,
      windowTokens,
      percents: pieces.percents,
      thresholdTokens: windowTokens * (pieces.percents.threshold / 100),
      targetTokens: windowTokens * (pieces.percents.target / 100),
      lockedTurns,
      estimated: turns,
      fixed,
      overheadTokens: pieces.overheadTokens ?? 0,
      fixedTokens: 0,
      chunks: [...fixed, ...chunksOf(turns)],
      current: { turns, tokens: 0 },
    });
  }

  /** `call` with every part (and the system instruction) at its window count as the service has counted it so far. */
  recount(call: PreparedCall): PreparedCall {
    const turns = this.counts.counted(call.estimated);
    const fixedTokens = call.fixed.reduce((sum, c) => sum + this.windowTokens(c), call.overheadTokens);
    return { ...call, fixedTokens, current: { turns, tokens: fixedTokens + tokensOf(turns) } };
  }

  /** Whether the service has counted every chunk of the call. */
  allCounted(call: PreparedCall): boolean {
    return this.counts.allCounted(call.current.turns) && call.fixed.every((c) => this.counts.get(c.id, c.text) !== undefined);
  }

  /** `judgePlan` with the result at window counts (a rewritten part counts what the service counted for its replacement). */
  judge(call: PreparedCall, plan: PlanDecisions): Judged {
    const verdict = judgePlan(call.current.turns, plan);
    const counted = this.counts.counted(verdict.turns);
    const tokensAfter = tokensOf(counted);
    return { verdict: { ...verdict, turns: counted, tokensAfter }, sized: { turns: counted, tokens: call.fixedTokens + tokensAfter } };
  }

  /**
   * What the window count adds to the service's counts of `turns` and of the
   * system instruction: the service plans in its own counts, so this much
   * more comes off its window.
   */
  excess(call: PreparedCall, turns: readonly MappedContent[]): number {
    const fixedExcess = call.fixed.reduce((sum, c) => sum + this.windowTokens(c) - (this.counts.get(c.id, c.text) ?? this.windowTokens(c)), 0);
    return this.counts.excess(turns) + fixedExcess;
  }

  /** Forgets the counts of chunks no longer in the call. */
  retain(call: PreparedCall): void {
    this.counts.retain(new Set(call.chunks.map((c) => c.id)));
  }

  private windowTokens(chunk: Chunk): number {
    return this.counts.textTokens(chunk.id, chunk.text, chunk.tokens);
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
      stepTextPolicy: this.stepTextPolicy,
    });
    const turns = [...last.turns.slice(0, same), ...fresh];
    this.lastMapping = { contents: [...contents], turns, lockedTurns };
    return turns;
  }
}

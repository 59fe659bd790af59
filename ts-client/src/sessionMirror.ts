import { type CallSettings, CtxoptCallError, type CtxoptClient, GrpcStatus } from "./client.js";
import { applyPlanDelta } from "./planDelta.js";
import { Action, type Chunk, type DeepPartial, type OptimizeRequest, type OptimizeResponse } from "./generated/ctxopt/v1/ctxopt.js";

/** What one sync sent. */
export interface SyncReport {
  readonly appended: number;
  readonly removed: number;
  /** The server had lost the session (or its state was uncertain) and got all of it again. */
  readonly resynced: boolean;
}

/**
 * Keeps a server session equal to the client's history while sending only the
 * delta: chunks whose id the server lacks or holds with other text are
 * appended (an idempotent upsert), chunks the client no longer has are removed
 * (stashed, so nothing is lost). An append larger than the server's
 * per-request limits goes in several requests. When the server answers
 * NOT_FOUND for the session, the whole history is sent again and the call
 * retried once.
 */
export class SessionMirror {
  /** Chunk id -> the text the server holds for it. */
  private readonly held = new Map<string, string>();
  /** A call failed half way: the next sync sends everything again. */
  private uncertain = false;
  /** The last plan, whole, that deltas are asked against. */
  private lastPlan: OptimizeResponse | undefined;
  /**
   * The chunks (a copy of the list) the last delta left the server holding,
   * while `held` is exactly theirs: the same chunks again need no walk over
   * `held` (a repeated build's sync, 1,000 lookups, most of its cost while
   * the code is still cold).
   */
  private synced: readonly Chunk[] | undefined;

  constructor(
    private readonly client: CtxoptClient,
    readonly sessionId: string,
  ) {}

  /** Chunks the server is believed to hold. */
  get heldCount(): number {
    return this.held.size;
  }

  /** Sends what the server lacks so it holds exactly `chunks`. */
  async sync(chunks: readonly Chunk[], settings?: CallSettings): Promise<SyncReport> {
    const resync = this.uncertain;
    if (!resync && this.synced !== undefined && sameChunks(this.synced, chunks)) return { appended: 0, removed: 0, resynced: false };
    if (resync) this.held.clear();
    try {
      const report = await this.sendDelta(chunks, settings);
      this.uncertain = false;
      return { ...report, resynced: resync };
    } catch (error) {
      if (!isNotFound(error)) {
        this.uncertain = true;
        throw error;
      }
      // Either the session is gone, or it lacks chunks we believed it held
      // (RemoveChunks is all or nothing): start it over from the client's copy.
      if (!isSessionLost(error)) await this.client.deleteSession({ sessionId: this.sessionId }, settings);
      this.held.clear();
      const report = await this.sendDelta(chunks, settings);
      this.uncertain = false;
      return { ...report, resynced: true };
    }
  }

  /**
   * Syncs `chunks`, then asks for a plan. A lost session is re-appended and
   * the plan asked again. Unless `dry_run`, the server applied the plan, so
   * the mirror records it: removed chunks are gone, trimmed and masked ones
   * hold their replacement text.
   */
  async optimize(
    chunks: readonly Chunk[],
    request: DeepPartial<OptimizeRequest>,
    settings?: CallSettings,
  ): Promise<{ plan: OptimizeResponse; sync: SyncReport }> {
    const sync = await this.sync(chunks, settings);
    try {
      const plan = await this.askPlan(request, settings);
      if (!request.dryRun) this.record(plan);
      return { plan, sync };
    } catch (error) {
      if (!request.dryRun) this.uncertain = true;
      if (!isNotFound(error)) throw error;
      this.held.clear();
      const again = await this.sendDelta(chunks, settings);
      const plan = await this.askPlan(request, settings);
      this.uncertain = false;
      if (!request.dryRun) this.record(plan);
      return { plan, sync: { ...again, resynced: true } };
    }
  }

  /**
   * One Optimize, as a delta against the last plan this mirror got
   * (`keep_plan`, `base_plan_id`): a warm session's plans repeat, so the
   * answer carries only what changed. An answer that does not fit the plan
   * held is never used: a dry run asks again for the whole plan; an applied
   * plan cannot be asked twice, so the call fails and the next sync sends
   * the whole session again.
   */
  private async askPlan(request: DeepPartial<OptimizeRequest>, settings?: CallSettings): Promise<OptimizeResponse> {
    const held = this.lastPlan;
    this.lastPlan = undefined; // until an answer is in hand, there is no plan to name
    const ask = (basePlanId: string) => this.client.optimize({ ...request, sessionId: this.sessionId, keepPlan: true, basePlanId }, settings);
    let plan = applyPlanDelta(held, await ask(held?.planId ?? ""));
    if (plan === undefined && request.dryRun) plan = applyPlanDelta(undefined, await ask(""));
    if (plan === undefined) {
      this.uncertain = true;
      throw new Error(`Optimize: the plan delta does not fit the plan held (${held?.planId ?? "none"})`);
    }
    this.lastPlan = plan;
    return plan;
  }

  private async sendDelta(chunks: readonly Chunk[], settings?: CallSettings): Promise<Omit<SyncReport, "resynced">> {
    this.synced = undefined; // until every call below is answered
    const fresh: Chunk[] = [];
    let heldOfCurrent = 0;
    for (const chunk of chunks) {
      const text = this.held.get(chunk.id);
      if (text !== undefined) heldOfCurrent += 1;
      if (text !== chunk.text) fresh.push(chunk);
    }
    // Ids are unique within `chunks`: when every held id is among them, nothing is stale.
    const stale = heldOfCurrent === this.held.size ? [] : this.staleIds(chunks);
    if (stale.length > 0) {
      await this.client.removeChunks({ sessionId: this.sessionId, chunkIds: stale, stash: true }, settings);
      for (const id of stale) this.held.delete(id);
    }
    if (fresh.length > 0) {
      const limits = await this.client.serverInfo(settings);
      for (const batch of appendBatches(fresh, limits.maxChunksPerRequest, limits.maxMessageBytes)) {
        await this.client.appendChunks({ sessionId: this.sessionId, chunks: batch }, settings);
        for (const chunk of batch) this.held.set(chunk.id, chunk.text);
      }
    }
    this.synced = chunks.slice();
    return { appended: fresh.length, removed: stale.length };
  }

  private staleIds(chunks: readonly Chunk[]): string[] {
    const current = new Set(chunks.map((c) => c.id));
    return [...this.held.keys()].filter((id) => !current.has(id));
  }

  private record(plan: OptimizeResponse): void {
    this.synced = undefined; // `held` changes below
    for (const decision of plan.decisions) {
      if (decision.action === Action.ACTION_STASH || decision.action === Action.ACTION_DELETE) {
        this.held.delete(decision.chunkId);
      } else if (decision.action === Action.ACTION_TRIM || decision.action === Action.ACTION_MASK) {
        this.held.set(decision.chunkId, decision.replacementText);
      }
    }
  }
}

/** Room for a chunk's id, links and metadata beside its text, in bytes (a generous bound). */
const CHUNK_OVERHEAD_BYTES = 4096;

/**
 * Splits an append so no request passes the server's limits (GetServerInfo):
 * at most `maxChunks` chunks (0: no limit) and, counting 3 bytes a UTF-16
 * unit, at most `maxBytes` (0: no limit). A chunk is never split.
 */
export function appendBatches(chunks: readonly Chunk[], maxChunks: number, maxBytes: number): Chunk[][] {
  const batches: Chunk[][] = [];
  let batch: Chunk[] = [];
  let bytes = 0;
  for (const chunk of chunks) {
    const size = 3 * chunk.text.length + CHUNK_OVERHEAD_BYTES;
    const full = (maxChunks > 0 && batch.length >= maxChunks) || (maxBytes > 0 && bytes + size > maxBytes);
    if (full && batch.length > 0) {
      batches.push(batch);
      batch = [];
      bytes = 0;
    }
    batch.push(chunk);
    bytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

/** The same chunk objects in the same order (chunks are never changed in place). */
function sameChunks(a: readonly Chunk[], b: readonly Chunk[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

function isNotFound(error: unknown): boolean {
  return error instanceof CtxoptCallError && error.code === GrpcStatus.NOT_FOUND;
}

/** The server names the field at fault first: `session_id: no such session ...`. */
function isSessionLost(error: unknown): boolean {
  return isNotFound(error) && (error as CtxoptCallError).details.startsWith("session_id");
}

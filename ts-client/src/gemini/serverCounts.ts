import type { CtxoptClient } from "../client.js";
import type { AppendChunksResponse, Decision } from "../generated/ctxopt/v1/ctxopt.js";
import { Action } from "../generated/ctxopt/v1/ctxopt.js";
import type { MappedContent, MappedPart } from "./mapping.js";
import { readsAsText } from "./parts.js";

/**
 * The token counts the service measured (tiktoken cl100k for a chunk sent
 * with `tokens: 0`), by chunk id and text, and the count the adapter judges
 * the window with.
 *
 * A part whose chunk text is what the model reads (`readsAsText`) counts the
 * service's count of that text; a media part counts the larger of that and
 * the host's estimate (an image costs what Gemini CLI says, not its
 * placeholder's tokens), and so does every part for a host that sizes the
 * history with its own estimate (`hostEstimates`: Gemini CLI). A part the service has not counted yet counts at
 * least the UTF-8 byte length of its text: a byte-level BPE token (cl100k)
 * holds at least one byte, so the count can only be smaller. Dense code, JSON
 * or non-English text, where chars/4 falls short, therefore never makes a
 * request look smaller than it is; plain prose, where chars/4 runs above the
 * real count, does not make it look larger either (the provider, and Gemini
 * CLI's compression, go by the model's tokenizer: the estimate is only
 * Gemini CLI's guess for a request it has not sent yet).
 */
export class ServerCounts {
  /** Chunk id -> the texts the service counted under it (the original, and a trim or mask replacement). */
  private readonly byId = new Map<string, { text: string; tokens: number }[]>();

  /**
   * @param hostEstimates every part counts at least the host's estimate too:
   *   for a host that sizes the history with its own estimate (Gemini CLI
   *   after it edits the history, and for every new request).
   */
  constructor(private readonly hostEstimates = false) {}

  /** The service's count of `text` under `id`, when it has counted it. */
  get(id: string, text: string): number | undefined {
    return this.byId.get(id)?.find((entry) => entry.text === text)?.tokens;
  }

  record(id: string, text: string, tokens: number): void {
    const entries = (this.byId.get(id) ?? []).filter((entry) => entry.text !== text);
    // Two texts at most: the original and the replacement the last plan gave it.
    this.byId.set(id, [...entries.slice(-1), { text, tokens }]);
  }

  /** Counts from an AppendChunks exchange (request chunks and the answer, by id). */
  recordAppend(chunks: readonly { id: string; text: string }[], response: AppendChunksResponse): void {
    const texts = new Map(chunks.map((c) => [c.id, c.text]));
    for (const counted of response.chunks) {
      const text = texts.get(counted.id);
      if (text !== undefined) this.record(counted.id, text, counted.tokens);
    }
  }

  /** A plan's rewrites carry the service's count of their replacement text. */
  recordDecisions(decisions: readonly Decision[]): void {
    for (const d of decisions) {
      if (d.action === Action.ACTION_TRIM || d.action === Action.ACTION_MASK) this.record(d.chunkId, d.replacementText, d.tokensAfter);
    }
  }

  /** Forgets chunks no longer in the history. */
  retain(ids: ReadonlySet<string>): void {
    for (const id of this.byId.keys()) if (!ids.has(id)) this.byId.delete(id);
  }

  /** Whether every part of `turns` has been counted by the service. */
  allCounted(turns: readonly MappedContent[]): boolean {
    return turns.every((t) => t.parts.every((p) => this.get(p.chunk.id, p.chunk.text) !== undefined));
  }

  /** `turns` with every part's tokens set to the window count (see the class). */
  counted(turns: readonly MappedContent[]): MappedContent[] {
    return turns.map((turn) => ({ ...turn, parts: turn.parts.map((p) => this.countedPart(p)) }));
  }

  /**
   * What the window count adds to the service's counts of the same parts:
   * the service plans in its own counts, so this much more room is taken off
   * its window for the adapter's count to land where the service aims.
   */
  excess(turns: readonly MappedContent[]): number {
    let excess = 0;
    for (const turn of turns) {
      for (const p of turn.parts) {
        const server = this.get(p.chunk.id, p.chunk.text);
        if (server !== undefined) excess += Math.max(0, this.countedPart(p).chunk.tokens - server);
      }
    }
    return excess;
  }

  /** A text's window count, `estimate` being the host's. */
  textTokens(id: string, text: string, estimate: number): number {
    return windowTokensOf(estimate, text, this.get(id, text), !this.hostEstimates);
  }

  /** A part's window count (its chunk's tokens being the host's estimate). */
  partTokens(mapped: MappedPart): number {
    return windowTokensOf(
      mapped.chunk.tokens,
      mapped.chunk.text,
      this.get(mapped.chunk.id, mapped.chunk.text),
      !this.hostEstimates && readsAsText(mapped.part),
    );
  }

  private countedPart(mapped: MappedPart): MappedPart {
    const tokens = this.partTokens(mapped);
    return tokens === mapped.chunk.tokens ? mapped : { ...mapped, chunk: { ...mapped.chunk, tokens } };
  }
}

/** The window count of one part or text: see `ServerCounts`. */
export function windowTokensOf(estimate: number, text: string, serverTokens: number | undefined, asText = true): number {
  const counted = serverTokens ?? Math.max(estimate, Buffer.byteLength(text, "utf8"));
  return asText ? counted : Math.max(estimate, counted);
}

/**
 * `client` as the session mirror should use it: every AppendChunks answer
 * (the service's per-chunk counts) is recorded in `counts` on its way back.
 */
export function countingClient(client: CtxoptClient, counts: ServerCounts): CtxoptClient {
  const appendChunks: CtxoptClient["appendChunks"] = async (request, settings) => {
    const response = await client.appendChunks(request, settings);
    const chunks = (request.chunks ?? []).map((c) => ({ id: c?.id ?? "", text: c?.text ?? "" }));
    counts.recordAppend(chunks, response);
    return response;
  };
  return new Proxy(client, {
    get: (target, property) => {
      if (property === "appendChunks") return appendChunks;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

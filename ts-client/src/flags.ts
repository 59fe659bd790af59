import { createHash } from "node:crypto";

/** `false`: pass-through; `true`: optimize and send the result; `shadow`: optimize, report, send the original. */
export type OptimizationMode = "false" | "true" | "shadow";

/** Client-side feature flags, read from the environment (README lists each with its default). */
export interface Flags {
  /** GEMINI_CONTEXT_OPTIMIZATION, default `false`. */
  readonly mode: OptimizationMode;
  /** GEMINI_CONTEXT_ROLLOUT_PERCENT (0-100), default 100: share of sessions the mode applies to. */
  readonly rolloutPercent: number;
  /** GEMINI_CONTEXT_MAX_CHUNKS, default 0 (no limit): the prompt keeps at most this many chunks. */
  readonly maxChunks: number;
  /** GEMINI_EMBEDDING_ENABLED, default false: send embeddings when the builder has an embedder. */
  readonly embeddingEnabled: boolean;
  /** GEMINI_PRUNING_AGGRESSIVE, default false: prefer stashing over trimming and aim lower. */
  readonly aggressive: boolean;
  /** CTXOPT_ADDR, default 127.0.0.1:50051. */
  readonly address: string;
  /** CTXOPT_DEADLINE_MS, default 1500: time the service gets per prompt build before the local fallback. */
  readonly deadlineMs: number;
  /** CTXOPT_BREAKER_MS, default 30000: after a failed call the service is skipped this long (circuit breaker). */
  readonly breakerMs: number;
  /** GEMINI_CONTEXT_THRESHOLD_PERCENT: usage that engages the hook (unset: the server's default). */
  readonly thresholdPercent?: number;
  /** GEMINI_CONTEXT_TARGET_PERCENT: where an optimization lands (unset: the server's default). */
  readonly targetPercent?: number;
  /** GEMINI_CONTEXT_WINDOW_TOKENS: the context window (unset: the model table's). */
  readonly windowTokens?: number;
}

export const DEFAULT_FLAGS: Flags = {
  mode: "false",
  rolloutPercent: 100,
  maxChunks: 0,
  embeddingEnabled: false,
  aggressive: false,
  address: "127.0.0.1:50051",
  deadlineMs: 1500,
  breakerMs: 30_000,
};

type Env = Readonly<Record<string, string | undefined>>;

/** Reads every flag; an unparsable value throws an error naming the variable and the value. */
export function readFlags(env: Env = process.env): Flags {
  return {
    mode: readMode(env),
    rolloutPercent: readInteger(env, "GEMINI_CONTEXT_ROLLOUT_PERCENT", DEFAULT_FLAGS.rolloutPercent, 0, 100),
    maxChunks: readInteger(env, "GEMINI_CONTEXT_MAX_CHUNKS", DEFAULT_FLAGS.maxChunks, 0, 1_000_000),
    embeddingEnabled: readBoolean(env, "GEMINI_EMBEDDING_ENABLED", DEFAULT_FLAGS.embeddingEnabled),
    aggressive: readBoolean(env, "GEMINI_PRUNING_AGGRESSIVE", DEFAULT_FLAGS.aggressive),
    address: readAddress(env),
    deadlineMs: readInteger(env, "CTXOPT_DEADLINE_MS", DEFAULT_FLAGS.deadlineMs, 1, 600_000),
    breakerMs: readInteger(env, "CTXOPT_BREAKER_MS", DEFAULT_FLAGS.breakerMs, 0, 86_400_000),
    ...optionalPercent(env, "GEMINI_CONTEXT_THRESHOLD_PERCENT", "thresholdPercent"),
    ...optionalPercent(env, "GEMINI_CONTEXT_TARGET_PERCENT", "targetPercent"),
    ...(raw(env, "GEMINI_CONTEXT_WINDOW_TOKENS") === undefined
      ? {}
      : { windowTokens: readInteger(env, "GEMINI_CONTEXT_WINDOW_TOKENS", 0, 1_000, 100_000_000) }),
  };
}

/**
 * Whether a session falls inside the rollout: a stable hash of the session id
 * maps it to a bucket 0-99, so a session stays in or out for its whole life.
 */
export function inRollout(sessionId: string, rolloutPercent: number): boolean {
  return rolloutBucket(sessionId) < rolloutPercent;
}

export function rolloutBucket(sessionId: string): number {
  return createHash("sha256").update(sessionId).digest().readUInt32BE(0) % 100;
}

function raw(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === "" ? undefined : value;
}

const TRUE_WORDS = ["1", "true", "yes", "on"];
const FALSE_WORDS = ["0", "false", "no", "off"];

/** `shadow`, or any boolean word the other flags accept. */
function readMode(env: Env): OptimizationMode {
  const value = raw(env, "GEMINI_CONTEXT_OPTIMIZATION")?.toLowerCase();
  if (value === undefined) return DEFAULT_FLAGS.mode;
  if (value === "shadow") return value;
  if (TRUE_WORDS.includes(value)) return "true";
  if (FALSE_WORDS.includes(value)) return "false";
  throw new Error(`GEMINI_CONTEXT_OPTIMIZATION: expected true, false or shadow (or 1/0, yes/no, on/off) (got ${JSON.stringify(value)})`);
}

function readBoolean(env: Env, name: string, fallback: boolean): boolean {
  const value = raw(env, name)?.toLowerCase();
  if (value === undefined) return fallback;
  if (TRUE_WORDS.includes(value)) return true;
  if (FALSE_WORDS.includes(value)) return false;
  throw new Error(`${name}: expected true or false (got ${JSON.stringify(value)})`);
}

function optionalPercent<K extends "thresholdPercent" | "targetPercent">(env: Env, name: string, key: K): Partial<Record<K, number>> {
  if (raw(env, name) === undefined) return {};
  const value = readInteger(env, name, 0, 1, 100);
  const result: Partial<Record<K, number>> = {};
  result[key] = value;
  return result;
}

function readInteger(env: Env, name: string, fallback: number, min: number, max: number): number {
  const value = raw(env, name);
  if (value === undefined) return fallback;
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < min || parsed > max) {
    throw new Error(`${name}: expected an integer in [${min}, ${max}] (got ${JSON.stringify(value)})`);
  }
  return parsed;
}

function readAddress(env: Env): string {
  const value = raw(env, "CTXOPT_ADDR");
  if (value === undefined) return DEFAULT_FLAGS.address;
  if (!/^[^\s]+:\d{1,5}$/.test(value)) {
    throw new Error(`CTXOPT_ADDR: expected HOST:PORT (got ${JSON.stringify(value)})`);
  }
  return value;
}

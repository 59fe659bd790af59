import { type CallSettings, type CtxoptClient, ServingStatus } from "../client.js";
import { fallbackReason, ServiceUnhealthy } from "../serviceErrors.js";

/** Health is asked again after this long, or at once after a failure. */
export const HEALTH_TTL_MS = 30_000;

/** The flags that time the service. */
export interface GateTiming {
  /** Time the service gets per request before the local fallback (CTXOPT_DEADLINE_MS). */
  readonly deadlineMs: number;
  /** How long the service is skipped after a failed call (CTXOPT_BREAKER_MS). */
  readonly breakerMs: number;
}

/**
 * Whether a request may talk to the service: health, asked at most every
 * HEALTH_TTL_MS while it answers SERVING, and a circuit breaker that skips
 * the service for `breakerMs` after a failed call, so a dead service costs
 * one deadline, not one per request.
 */
export class ServiceGate {
  private healthyUntil = 0;
  private breakerUntil = 0;
  private lastFailure = "";

  constructor(
    private readonly client: CtxoptClient,
    private readonly timing: GateTiming,
  ) {}

  /** Why the service is skipped now (the circuit is open), else undefined. */
  skipReason(): string | undefined {
    const now = Date.now();
    if (now >= this.breakerUntil) return undefined;
    const seconds = Math.ceil((this.breakerUntil - now) / 1000);
    return `service skipped for ${seconds} s after a failure (${this.lastFailure}; circuit open)`;
  }

  /** The settings of one request's calls: its deadline starts now. */
  callSettings(): CallSettings {
    return { deadline: new Date(Date.now() + this.timing.deadlineMs) };
  }

  /** Throws `ServiceUnhealthy` unless the service answered SERVING within HEALTH_TTL_MS. */
  async ensureHealthy(settings: CallSettings): Promise<void> {
    if (Date.now() < this.healthyUntil) return;
    if ((await this.client.health("", settings)) !== ServingStatus.SERVING) throw new ServiceUnhealthy();
    this.healthyUntil = Date.now() + HEALTH_TTL_MS;
  }

  /** Records a failed call (health is asked again, the circuit opens) and says why, for the summary. */
  failed(error: unknown): string {
    this.healthyUntil = 0;
    this.lastFailure = fallbackReason(error);
    this.breakerUntil = Date.now() + this.timing.breakerMs;
    return this.lastFailure;
  }
}

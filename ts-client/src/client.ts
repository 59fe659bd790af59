import { type CallOptions, Channel, type ChannelCredentials, credentials as grpcCredentials, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import {
  AppendChunksRequest,
  type AppendChunksResponse,
  ContextOptimizerClient,
  DeleteSessionRequest,
  type DeleteSessionResponse,
  type DeepPartial,
  GetServerInfoRequest,
  type GetServerInfoResponse,
  GetSessionStatsRequest,
  type GetSessionStatsResponse,
  OptimizeContextRequest,
  type OptimizeContextResponse,
  OptimizeRequest,
  type OptimizeResponse,
  RemoveChunksRequest,
  type RemoveChunksResponse,
  RestoreRequest,
  type RestoreResponse,
  ScoreRequest,
  type ScoreResponse,
  SearchStashRequest,
  type SearchStashResponse,
  UpdateChunksRequest,
  type UpdateChunksResponse,
} from "./generated/ctxopt/v1/ctxopt.js";
import { HealthCheckResponse_ServingStatus, HealthClient } from "./generated/grpc/health/v1/health.js";

export { status as GrpcStatus } from "@grpc/grpc-js";
export { HealthCheckResponse_ServingStatus as ServingStatus } from "./generated/grpc/health/v1/health.js";

export interface ClientOptions {
  /** Deadline of a call that names none, in milliseconds (default 1500). */
  readonly deadlineMs?: number;
  /** First pause before retrying an UNAVAILABLE call; doubles per attempt (default 25 ms). */
  readonly initialBackoffMs?: number;
  /** Longest pause between retries (default 400 ms). */
  readonly maxBackoffMs?: number;
  /** Channel credentials (default: insecure, for loopback). */
  readonly credentials?: ChannelCredentials;
  /** Sent as `authorization: Bearer <token>` when the server requires it. */
  readonly authToken?: string;
}

/** When a call must be done: an absolute deadline, or milliseconds from now. */
export interface CallSettings {
  readonly deadline?: Date;
  readonly deadlineMs?: number;
}

/** A failed call, with its gRPC status code and the method that failed. */
export class CtxoptCallError extends Error {
  constructor(
    readonly method: string,
    readonly code: status,
    readonly details: string,
  ) {
    super(`${method}: ${status[code] ?? code}: ${details}`);
    this.name = "CtxoptCallError";
  }
}

/**
 * HTTP/2 flow-control window of the channel. A plan over 1,000 chunks is a
 * response of ~170 KB; with the 64 KB default it waits for window updates.
 */
const FLOW_CONTROL_WINDOW_BYTES = 16 * 1024 * 1024;

type Callback<Res> = (error: ServiceError | null, response: Res) => void;
type UnaryMethod<Req, Res> = (request: Req, metadata: Metadata, options: Partial<CallOptions>, callback: Callback<Res>) => unknown;

/**
 * Typed, promise-based client of the ctxopt service.
 *
 * Every call has a deadline (its own or the client default). A call that
 * finds the server UNAVAILABLE is retried with exponential backoff until its
 * deadline, while the channel reconnects underneath with its own backoff.
 * Other errors are raised at once as `CtxoptCallError`. `serverInfo()` asks
 * the server for its defaults and limits once per connection.
 */
export class CtxoptClient {
  private readonly channel: Channel;
  private readonly optimizer: ContextOptimizerClient;
  private readonly healthClient: HealthClient;
  private readonly deadlineMs: number;
  private readonly initialBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly authToken: string;
  private info: GetServerInfoResponse | undefined;
  /** The connection failed since `info` was read: ask again. */
  private infoStale = false;
  private infoCall: Promise<GetServerInfoResponse> | undefined;

  constructor(
    readonly address: string,
    options: ClientOptions = {},
  ) {
    const credentials = options.credentials ?? grpcCredentials.createInsecure();
    this.channel = new Channel(address, credentials, {
      "grpc.initial_reconnect_backoff_ms": 50,
      "grpc.max_reconnect_backoff_ms": 1000,
      // No limits of the client's own: the server enforces its max_message_bytes
      // and reports it (GetServerInfo), and SessionMirror splits appends by it.
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
      "grpc-node.flow_control_window": FLOW_CONTROL_WINDOW_BYTES,
    });
    this.optimizer = new ContextOptimizerClient(address, credentials, { channelOverride: this.channel });
    this.healthClient = new HealthClient(address, credentials, { channelOverride: this.channel });
    this.deadlineMs = options.deadlineMs ?? 1500;
    this.initialBackoffMs = options.initialBackoffMs ?? 25;
    this.maxBackoffMs = options.maxBackoffMs ?? 400;
    this.authToken = options.authToken ?? "";
  }

  appendChunks(request: DeepPartial<AppendChunksRequest>, settings?: CallSettings): Promise<AppendChunksResponse> {
    return this.call("AppendChunks", this.optimizer.appendChunks, AppendChunksRequest.fromPartial(request), settings);
  }

  updateChunks(request: DeepPartial<UpdateChunksRequest>, settings?: CallSettings): Promise<UpdateChunksResponse> {
    return this.call("UpdateChunks", this.optimizer.updateChunks, UpdateChunksRequest.fromPartial(request), settings);
  }

  removeChunks(request: DeepPartial<RemoveChunksRequest>, settings?: CallSettings): Promise<RemoveChunksResponse> {
    return this.call("RemoveChunks", this.optimizer.removeChunks, RemoveChunksRequest.fromPartial(request), settings);
  }

  optimize(request: DeepPartial<OptimizeRequest>, settings?: CallSettings): Promise<OptimizeResponse> {
    return this.call("Optimize", this.optimizer.optimize, OptimizeRequest.fromPartial(request), settings);
  }

  score(request: DeepPartial<ScoreRequest>, settings?: CallSettings): Promise<ScoreResponse> {
    return this.call("Score", this.optimizer.score, ScoreRequest.fromPartial(request), settings);
  }

  optimizeContext(request: DeepPartial<OptimizeContextRequest>, settings?: CallSettings): Promise<OptimizeContextResponse> {
    return this.call("OptimizeContext", this.optimizer.optimizeContext, OptimizeContextRequest.fromPartial(request), settings);
  }

  searchStash(request: DeepPartial<SearchStashRequest>, settings?: CallSettings): Promise<SearchStashResponse> {
    return this.call("SearchStash", this.optimizer.searchStash, SearchStashRequest.fromPartial(request), settings);
  }

  restore(request: DeepPartial<RestoreRequest>, settings?: CallSettings): Promise<RestoreResponse> {
    return this.call("Restore", this.optimizer.restore, RestoreRequest.fromPartial(request), settings);
  }

  getSessionStats(request: DeepPartial<GetSessionStatsRequest>, settings?: CallSettings): Promise<GetSessionStatsResponse> {
    return this.call("GetSessionStats", this.optimizer.getSessionStats, GetSessionStatsRequest.fromPartial(request), settings);
  }

  deleteSession(request: DeepPartial<DeleteSessionRequest>, settings?: CallSettings): Promise<DeleteSessionResponse> {
    return this.call("DeleteSession", this.optimizer.deleteSession, DeleteSessionRequest.fromPartial(request), settings);
  }

  /**
   * The server's budget defaults and input limits (GetServerInfo), the one
   * source for them on the client. Asked once per connection: after a call
   * found the server UNAVAILABLE the next `serverInfo()` asks again.
   * Concurrent callers share one round trip.
   */
  async serverInfo(settings?: CallSettings): Promise<GetServerInfoResponse> {
    if (this.info !== undefined && !this.infoStale) return this.info;
    this.infoCall ??= this.call("GetServerInfo", this.optimizer.getServerInfo, GetServerInfoRequest.fromPartial({}), settings).finally(() => {
      this.infoCall = undefined;
    });
    const info = await this.infoCall;
    this.info = info;
    this.infoStale = false;
    return info;
  }

  /** The last answer of `serverInfo()`, if any (it may predate a lost connection). */
  get lastServerInfo(): GetServerInfoResponse | undefined {
    return this.info;
  }

  /** The server's status through grpc.health.v1 (`service` "" is the whole server). */
  async health(service = "", settings?: CallSettings): Promise<HealthCheckResponse_ServingStatus> {
    const response = await this.call("Health.Check", this.healthClient.check, { service }, settings);
    return response.status;
  }

  /** True when the server answers SERVING before the deadline; never throws. */
  async isServing(settings?: CallSettings): Promise<boolean> {
    try {
      return (await this.health("", settings)) === HealthCheckResponse_ServingStatus.SERVING;
    } catch {
      return false;
    }
  }

  close(): void {
    this.optimizer.close();
    this.healthClient.close();
    this.channel.close();
  }

  private async call<Req, Res>(name: string, method: UnaryMethod<Req, Res>, request: Req, settings?: CallSettings): Promise<Res> {
    const deadline = settings?.deadline ?? new Date(Date.now() + (settings?.deadlineMs ?? this.deadlineMs));
    const bound = method.bind(name.startsWith("Health.") ? this.healthClient : this.optimizer) as UnaryMethod<Req, Res>;
    let backoff = this.initialBackoffMs;
    for (;;) {
      try {
        return await this.attempt(name, bound, request, deadline);
      } catch (error) {
        const retriable = error instanceof CtxoptCallError && error.code === status.UNAVAILABLE;
        if (retriable) this.infoStale = true;
        if (!retriable || Date.now() + backoff >= deadline.getTime()) throw error;
        await sleep(backoff);
        backoff = Math.min(backoff * 2, this.maxBackoffMs);
      }
    }
  }

  private attempt<Req, Res>(name: string, method: UnaryMethod<Req, Res>, request: Req, deadline: Date): Promise<Res> {
    const metadata = new Metadata();
    if (this.authToken !== "") metadata.set("authorization", `Bearer ${this.authToken}`);
    return new Promise<Res>((resolve, reject) => {
      method(request, metadata, { deadline }, (error, response) => {
        if (error) reject(new CtxoptCallError(name, error.code, error.details));
        else resolve(response);
      });
    });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

import { type RunningServer, startServer } from "./server.js";

/**
 * A real server started with `CTXOPT_*` settings in its environment (e.g.
 * `{ CTXOPT_GC_THRESHOLD_PERCENT: "5" }`); this process's environment is
 * left as it was.
 */
export function startServerWith(env: Readonly<Record<string, string>>, options: { addr?: string } = {}): Promise<RunningServer> {
  const saved = Object.fromEntries(Object.keys(env).map((name) => [name, process.env[name]]));
  Object.assign(process.env, env);
  try {
    // startServer spawns before its first await, so the child sees `env`.
    return startServer(options);
  } finally {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

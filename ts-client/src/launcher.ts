#!/usr/bin/env node
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CtxoptClient } from "./client.js";
import { readFlags } from "./flags.js";
import { FACTORY_SIGNATURE } from "./geminiCliLoader.js";
import { packageVersion } from "./version.js";

const USAGE = `usage: ctxopt-gemini [--ctxopt-addr HOST:PORT] [--ctxopt-no-serve] [--ctxopt-gemini PATH]
                     [--ctxopt-log FILE] [--] [gemini arguments...]

Runs your installed Gemini CLI (@google/gemini-cli) with ctxopt's context
optimizer wrapped around its content generator: no fork, no patched copy.
Every argument that does not start with --ctxopt- goes to gemini
(\`ctxopt-gemini -- --help\` shows gemini's own help).

  --ctxopt-addr HOST:PORT  the ctxopt service (default CTXOPT_ADDR, else 127.0.0.1:50051)
  --ctxopt-no-serve        do not start \`ctxopt serve\` when no service answers
                           (default: start it on that loopback address with the
                           default data directory, stop it when gemini exits)
  --ctxopt-gemini PATH     Gemini CLI's entry (default: \`gemini\` on PATH, or CTXOPT_GEMINI_BIN)
  --ctxopt-log FILE        append each context summary line to FILE (CTXOPT_SUMMARY_LOG)
  --version                ctxopt-gemini's version (offline)
  -h, --help               this help (offline)

The optimizer is on unless GEMINI_CONTEXT_OPTIMIZATION says otherwise. Its
ceiling is the lower of the window (GEMINI_CONTEXT_WINDOW_TOKENS, else the
model's) and Gemini CLI's compression line (your model.compressionThreshold,
default 0.5, of Gemini CLI's model limit); it acts at the ceiling and lands at
90% of it, so Gemini CLI's own compression is not needed. Other flags: see the
README.
\`ctxopt serve\` is found as CTXOPT_SERVE_BIN, else \`ctxopt\` on PATH; a server
started here logs to server.log in its data directory (CTXOPT_DATA_DIR, else
$XDG_DATA_HOME/ctxopt or ~/.local/share/ctxopt), and the path is printed.`;

interface LauncherOptions {
  readonly address: string;
  readonly serve: boolean;
  readonly gemini: string | undefined;
  readonly log: string | undefined;
  readonly help: boolean;
  readonly version: boolean;
  readonly geminiArgs: string[];
}

function parse(argv: readonly string[]): LauncherOptions {
  const geminiArgs: string[] = [];
  let address: string | undefined;
  let serve = true;
  let gemini: string | undefined;
  let log: string | undefined;
  let help = false;
  let version = false;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    const value = (): string => {
      const next = argv[i + 1];
      if (next === undefined) throw new Error(`${arg}: expected a value`);
      i += 1;
      return next;
    };
    if (arg === "--") {
      geminiArgs.push(...argv.slice(i + 1));
      break;
    } else if (arg === "--help" || arg === "-h") help = true;
    else if (arg === "--version") version = true;
    else if (arg === "--ctxopt-addr") address = value();
    else if (arg === "--ctxopt-no-serve") serve = false;
    else if (arg === "--ctxopt-gemini") gemini = value();
    else if (arg === "--ctxopt-log") log = value();
    else if (arg.startsWith("--ctxopt-")) throw new Error(`${arg}: unknown option (see --help)`);
    else geminiArgs.push(arg);
  }
  const env = address === undefined ? process.env : { ...process.env, CTXOPT_ADDR: address };
  return { address: readFlags(env).address, serve, gemini, log, help, version, geminiArgs };
}

/** Gemini CLI's entry script: the option, CTXOPT_GEMINI_BIN, or `gemini` on PATH (symlinks followed). */
function findGemini(explicit: string | undefined): string {
  const given = explicit ?? process.env["CTXOPT_GEMINI_BIN"];
  if (given !== undefined && given !== "") {
    if (!existsSync(given)) throw new Error(`Gemini CLI not found at ${given}`);
    return realpathSync(given);
  }
  for (const dir of (process.env["PATH"] ?? "").split(delimiter)) {
    const candidate = join(dir, "gemini");
    if (dir !== "" && existsSync(candidate)) return realpathSync(candidate);
  }
  throw new Error("Gemini CLI not found on PATH: install it (npm install -g @google/gemini-cli) or pass --ctxopt-gemini PATH");
}

/** Whether a file of Gemini CLI's bundle defines the factory the loader wraps. */
function bundleHasFactory(bundleDir: string): boolean {
  return readdirSync(bundleDir)
    .filter((name) => name.endsWith(".js"))
    .some((name) => FACTORY_SIGNATURE.test(readFileSync(join(bundleDir, name), "utf8")));
}

function isLoopback(address: string): boolean {
  const host = address.slice(0, address.lastIndexOf(":"));
  return host === "127.0.0.1" || host === "localhost" || host === "[::1]" || host === "::1";
}

async function serving(address: string): Promise<boolean> {
  const client = new CtxoptClient(address, { deadlineMs: 1000 });
  try {
    return await client.isServing({ deadlineMs: 1000 });
  } finally {
    client.close();
  }
}

/** The data directory `ctxopt serve` uses by default (config.py's `default_data_dir`). */
function serverDataDir(): string {
  const explicit = process.env["CTXOPT_DATA_DIR"];
  if (explicit) return explicit;
  return join(process.env["XDG_DATA_HOME"] || join(homedir(), ".local", "share"), "ctxopt");
}

/** Starts `ctxopt serve` on `address`, its log appended to `logPath`; resolves once it listens. */
function startServer(address: string, dataDir: string, logPath: string): Promise<ChildProcess> {
  const bin = process.env["CTXOPT_SERVE_BIN"] || "ctxopt";
  mkdirSync(dataDir, { recursive: true });
  const log = openSync(logPath, "a");
  // Its own process group: a Ctrl-C in Gemini CLI's terminal must not stop the server mid-session.
  const child = spawn(bin, ["serve", "--addr", address, "--data-dir", dataDir], { stdio: ["ignore", "pipe", log], detached: true });
  closeSync(log); // the child holds its own copy
  const lastLogLine = () => readFileSync(logPath, "utf8").trimEnd().split("\n").at(-1) ?? "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGTERM");
      reject(new Error(`ctxopt serve did not listen on ${address} within 30 s (log: ${logPath})`));
    }, 30_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (line.startsWith("ctxopt listening on ")) {
        clearTimeout(timer);
        resolve(child);
      }
    });
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${bin} serve (${error.message}): install the Python package or set CTXOPT_SERVE_BIN`));
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`ctxopt serve exited with ${code} before listening: ${lastLogLine()} (log: ${logPath})`));
    });
  });
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

async function main(argv: readonly string[]): Promise<number> {
  const options = parse(argv);
  if (options.help) {
    console.log(USAGE);
    return 0;
  }
  if (options.version) {
    console.log(`ctxopt-gemini ${packageVersion()}`);
    return 0;
  }
  const entry = findGemini(options.gemini);
  const bundleDir = dirname(entry);
  if (!bundleHasFactory(bundleDir)) {
    console.error(`ctxopt-gemini: ${entry}: no content generator factory found in this Gemini CLI version; running it without ctxopt`);
  }
  let server: ChildProcess | undefined;
  if (!(await serving(options.address))) {
    if (!options.serve) console.error(`ctxopt-gemini: no ctxopt service at ${options.address}; Gemini CLI runs with the local fallback`);
    else if (!isLoopback(options.address)) console.error(`ctxopt-gemini: no ctxopt service at ${options.address} (not loopback: not starting one)`);
    else {
      const dataDir = serverDataDir();
      const logPath = join(dataDir, "server.log");
      try {
        server = await startServer(options.address, dataDir, logPath);
        console.error(`ctxopt-gemini: started ctxopt serve on ${options.address}; its log: ${logPath}`);
      } catch (error) {
        console.error(`ctxopt-gemini: ${error instanceof Error ? error.message : String(error)}; Gemini CLI runs with the local fallback`);
      }
    }
  }
  const preload = new URL("./geminiCliPreload.js", import.meta.url).href;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    CTXOPT_ADDR: options.address,
    CTXOPT_GEMINI_BUNDLE_DIR: bundleDir,
    GEMINI_CONTEXT_OPTIMIZATION: process.env["GEMINI_CONTEXT_OPTIMIZATION"] || "true",
    ...(options.log === undefined ? {} : { CTXOPT_SUMMARY_LOG: options.log }),
  };
  const gemini = spawn(process.execPath, ["--import", preload, entry, ...options.geminiArgs], { stdio: "inherit", env });
  // Ctrl-C belongs to Gemini CLI (it shares the terminal); SIGTERM is passed on.
  const ignore = () => undefined;
  const forward = () => gemini.kill("SIGTERM");
  process.on("SIGINT", ignore);
  process.on("SIGTERM", forward);
  const code = await new Promise<number>((resolve) => {
    gemini.on("exit", (exitCode, signal) => resolve(exitCode ?? (signal ? 128 + 15 : 1)));
  });
  process.off("SIGINT", ignore);
  process.off("SIGTERM", forward);
  if (server !== undefined) await stop(server);
  return code;
}

// Run only as the bin (tests import nothing from here, but keep it inert if they do).
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(`ctxopt-gemini: ${error instanceof Error ? error.message : String(error)}`);
      process.exitCode = 1;
    },
  );
}

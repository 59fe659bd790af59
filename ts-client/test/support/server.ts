import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { repoRoot } from "./paths.js";

/** A real ctxopt server on loopback, started for a test. */
export interface RunningServer {
  readonly address: string;
  readonly dataDir: string;
  /** SIGTERM, then wait for the process to exit. */
  stop(): Promise<void>;
}

const LISTENING = /^ctxopt listening on (\S+)/;

/**
 * Starts `.venv/bin/ctxopt serve` on `addr` (default: a free loopback port)
 * and resolves once it prints `ctxopt listening on HOST:PORT`.
 */
export async function startServer(options: { addr?: string; dataDir?: string } = {}): Promise<RunningServer> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "ctxopt-ts-test-"));
  const ownsDir = options.dataDir === undefined;
  const child = spawn(join(repoRoot, ".venv/bin/ctxopt"), ["serve", "--addr", options.addr ?? "127.0.0.1:0", "--data-dir", dataDir], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const address = await listeningAddress(child);
  return {
    address,
    dataDir,
    stop: async () => {
      await stopProcess(child);
      if (ownsDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function listeningAddress(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let stderr = "";
    child.stderr!.on("data", (data: Buffer) => {
      stderr += data.toString();
    });
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`ctxopt serve did not print its address within 30 s\n${stderr}`));
    }, 30_000);
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      const match = LISTENING.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]!);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`ctxopt serve exited with ${code} before listening\n${stderr}`));
    });
  });
}

function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

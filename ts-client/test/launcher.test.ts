import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { FACTORY_SIGNATURE, wrapFactory } from "../src/geminiCliLoader.js";
import { closedPort } from "./support/network.js";
import { packageRoot, repoRoot } from "./support/paths.js";

const launcher = `${packageRoot}dist/src/launcher.js`;
const geminiEntry = `${packageRoot}node_modules/@google/gemini-cli/bundle/gemini.js`;
const scratch = mkdtempSync(join(tmpdir(), "ctxopt-launcher-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

function run(args: readonly string[], env: NodeJS.ProcessEnv, cwd = scratch): Promise<Run> {
  const started = Date.now();
  const child = spawn(process.execPath, [launcher, ...args], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr, ms: Date.now() - started })));
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** A scratch HOME and project where Gemini CLI runs headless on a fake model. */
function geminiEnv(extra: NodeJS.ProcessEnv): { env: NodeJS.ProcessEnv; project: string; log: string; fake: string } {
  const home = mkdtempSync(join(scratch, "home-"));
  const project = mkdtempSync(join(scratch, "project-"));
  const reply = {
    method: "generateContentStream",
    response: [{ candidates: [{ content: { role: "model", parts: [{ text: "FAKE-MODEL-REPLY" }] }, finishReason: "STOP", index: 0 }] }],
  };
  const fake = join(project, "responses.jsonl");
  writeFileSync(fake, Array.from({ length: 8 }, () => JSON.stringify(reply)).join("\n"));
  const env: NodeJS.ProcessEnv = {
    PATH: process.env["PATH"],
    HOME: home,
    GEMINI_API_KEY: "fake-key-for-tests",
    GEMINI_CLI_TRUST_WORKSPACE: "true",
    CTXOPT_SERVE_BIN: join(repoRoot, ".venv/bin/ctxopt"),
    CTXOPT_DATA_DIR: join(home, "ctxopt-data"),
    // Gemini CLI's first request is ~8k tokens: in a 10k window it crosses a 40% threshold (the ceiling, the
    // whole window here, would let it through untouched).
    GEMINI_CONTEXT_WINDOW_TOKENS: "10000",
    GEMINI_CONTEXT_THRESHOLD_PERCENT: "40",
    ...extra,
  };
  return { env, project, log: join(project, "ctxopt-summary.log"), fake };
}

test("ctxopt-gemini --help works offline: no Gemini CLI, no server, exit 0", async () => {
  const port = await closedPort();
  const result = await run(["--help"], { PATH: "", CTXOPT_ADDR: `127.0.0.1:${port}` });
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /^usage: ctxopt-gemini/);
  assert.match(result.stdout, /--ctxopt-no-serve/);
  assert.ok(result.ms < 5_000, `${result.ms} ms`);
  assert.equal(await listening(port), false);
});

test("ctxopt-gemini --version prints its own version offline, starting nothing", async () => {
  const port = await closedPort();
  const result = await run(["--version"], { PATH: "", CTXOPT_ADDR: `127.0.0.1:${port}` });
  assert.equal(result.code, 0, result.stderr);
  const manifest = JSON.parse(readFileSync(`${packageRoot}package.json`, "utf8")) as { version: string };
  assert.equal(result.stdout, `ctxopt-gemini ${manifest.version}\n`);
  assert.equal(await listening(port), false);
});

test("ctxopt-gemini says clearly when Gemini CLI is not installed", async () => {
  const result = await run(["-p", "hi"], { PATH: "" });
  assert.equal(result.code, 1);
  assert.match(result.stderr, /Gemini CLI not found on PATH: install it/);
});

test("ctxopt-gemini runs the installed Gemini CLI with the adapter (through its relaunch), starting ctxopt serve and stopping it at exit", async () => {
  const port = await closedPort();
  const { env, project, log, fake } = geminiEnv({ CTXOPT_ADDR: `127.0.0.1:${port}` });
  const result = await run(["--ctxopt-gemini", geminiEntry, "--ctxopt-log", log, "--", "--fake-responses-non-strict", fake, "-p", "Say hello."], env, project);
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /FAKE-MODEL-REPLY/);
  const lines = readFileSync(log, "utf8").trim().split("\n");
  assert.ok(lines.length >= 1, "the adapter summarised the main request");
  assert.match(lines[0]!, /ctxopt\[true\] .*of 10,000 tokens/);
  assert.match(lines[0]!, /server \d/, "the adapter talked to the service the launcher started");
  assert.equal(await listening(port), false, "the server the launcher started is stopped");
  assert.ok(existsSync(join(env["CTXOPT_DATA_DIR"]!, "ctxopt.db")), "the server used the default data directory");
  const serverLog = join(env["CTXOPT_DATA_DIR"]!, "server.log");
  assert.ok(result.stderr.includes(`its log: ${serverLog}`), result.stderr);
  assert.match(readFileSync(serverLog, "utf8"), /"method": "AppendChunks"/, "the server's log is in the file the launcher named");
});

test("ctxopt-gemini --ctxopt-no-serve starts no server: Gemini CLI runs on the local fallback and the summary says so", async () => {
  const port = await closedPort();
  const { env, project, log, fake } = geminiEnv({ CTXOPT_ADDR: `127.0.0.1:${port}`, CTXOPT_DEADLINE_MS: "300", GEMINI_CLI_NO_RELAUNCH: "true" });
  const result = await run(
    ["--ctxopt-no-serve", "--ctxopt-gemini", geminiEntry, "--ctxopt-log", log, "--", "--fake-responses-non-strict", fake, "-p", "Say hello."],
    env,
    project,
  );
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stderr, /no ctxopt service at 127\.0\.0\.1:\d+; Gemini CLI runs with the local fallback/);
  assert.match(result.stdout, /FAKE-MODEL-REPLY/);
  assert.match(readFileSync(log, "utf8"), /FALLBACK local truncation: service unavailable/);
  assert.equal(existsSync(env["CTXOPT_DATA_DIR"]!), false);
});

test("the loader wraps exactly Gemini CLI's content generator factory and leaves other modules alone", () => {
  const bundle = readFileSync(join(packageRoot, "node_modules/@google/gemini-cli/bundle", "gemini.js"), "utf8");
  assert.equal(wrapFactory(bundle, "file:///hook.js"), undefined, "the entry script defines no factory");
  const chunk =
    "const x = 1;\nasync function createContentGenerator(config2, gcConfig, sessionId) {\n  return make();\n}\nexport { createContentGenerator };\n";
  const wrapped = wrapFactory(chunk, "file:///hook.js")!;
  assert.match(wrapped, /^import \{ wrapGeminiCliGenerator as __ctxoptWrap \} from "file:\/\/\/hook\.js";/);
  assert.match(wrapped, /async function __ctxoptOriginalCreateContentGenerator\(config2, gcConfig, sessionId\)/);
  assert.match(
    wrapped,
    /async function createContentGenerator\(a, b, c\) \{ return __ctxoptWrap\(await __ctxoptOriginalCreateContentGenerator\(a, b, c\), b, c\); \}/,
  );
  assert.ok(FACTORY_SIGNATURE.test(chunk));
});

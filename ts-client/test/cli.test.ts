import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";
import { closedPort } from "./support/network.js";
import { cliPath, exampleHistory } from "./support/paths.js";

const run = promisify(execFile);

async function cli(args: string[], env: Record<string, string> = {}): Promise<{ stdout: string; stderr: string; code: number }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [cliPath, ...args], { env: { ...process.env, ...env } });
    return { stdout, stderr, code: 0 };
  } catch (error) {
    const failed = error as { stdout: string; stderr: string; code: number };
    return { stdout: failed.stdout, stderr: failed.stderr, code: failed.code };
  }
}

test("without --history the CLI prints its usage and exits 2", async () => {
  const result = await cli([]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /usage: ctxopt-prompt --history FILE/);
});

test("--version prints ctxopt-prompt's own version and nothing else", async () => {
  const result = await cli(["--version"]);
  assert.equal(result.code, 0);
  assert.match(result.stdout, /^ctxopt-prompt \d+\.\d+\.\d+\n$/);
});

test("with optimization off the CLI prints a pass-through summary line", async () => {
  const result = await cli(["--history", exampleHistory], { GEMINI_CONTEXT_OPTIMIZATION: "false" });
  assert.equal(result.code, 0);
  assert.match(result.stdout, /^ctxopt\[false\] gemini-2\.5-pro: .* pass-through\n$/);
});

test("against a stopped server the CLI falls back to local truncation and says so", async () => {
  const addr = `127.0.0.1:${await closedPort()}`;
  const result = await cli(["--history", exampleHistory, "--addr", addr, "--context-limit", "80000"], {
    GEMINI_CONTEXT_OPTIMIZATION: "true",
    CTXOPT_DEADLINE_MS: "300",
  });
  assert.equal(result.code, 0);
  assert.match(result.stdout, /FALLBACK local truncation/);
});

test("--json prints the generateContent request on stdout and the summary on stderr", async () => {
  const result = await cli(["--history", exampleHistory, "--json", "--message", "hello"], { GEMINI_CONTEXT_OPTIMIZATION: "false" });
  const request = JSON.parse(result.stdout) as { model: string; contents: { parts: { text?: string }[] }[] };
  assert.equal(request.model, "gemini-2.5-pro");
  assert.equal(request.contents.at(-1)?.parts[0]?.text, "hello");
  assert.match(result.stderr, /^ctxopt\[false\]/);
});

test("an invalid flag value stops the CLI with the variable named", async () => {
  const result = await cli(["--history", exampleHistory], { GEMINI_CONTEXT_OPTIMIZATION: "sometimes" });
  assert.equal(result.code, 1);
  assert.match(result.stderr, /GEMINI_CONTEXT_OPTIMIZATION/);
});

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { packageRoot } from "./support/paths.js";

const manifest = JSON.parse(readFileSync(`${packageRoot}package.json`, "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  exports: Record<string, unknown>;
  bin: Record<string, string>;
};

test("package-lock.json is in sync with package.json: npm ci accepts it (checked offline, nothing installed)", () => {
  const run = spawnSync("npm", ["ci", "--dry-run", "--offline", "--no-audit", "--no-fund"], { cwd: packageRoot, encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  assert.doesNotMatch(run.stderr, /EUSAGE|Missing: /);
});

test("every dependency is pinned to an exact version", () => {
  for (const [name, version] of Object.entries({ ...manifest.dependencies, ...manifest.devDependencies })) {
    assert.match(version, /^\d+\.\d+\.\d+$/, `${name}@${version}`);
  }
});

test("the runtime needs no @google/genai (Node 20; its types are structural) and exports the Gemini CLI entries", () => {
  assert.equal(manifest.dependencies["@google/genai"], undefined);
  assert.deepEqual(Object.keys(manifest.exports).sort(), [".", "./gemini-cli", "./genai", "./package.json"]);
  assert.deepEqual(Object.keys(manifest.bin).sort(), ["ctxopt-gemini", "ctxopt-prompt"]);
});

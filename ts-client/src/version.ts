import { readFileSync } from "node:fs";

/** This package's version, from its own package.json (two levels above dist/src/). */
export function packageVersion(): string {
  const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  return manifest.version;
}

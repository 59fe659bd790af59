#!/usr/bin/env node
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import type { Content } from "./gemini/types.js";
import { CtxoptClient } from "./client.js";
import { explainContents, formatReport, readContextFile } from "./explain.js";
import { readFlags } from "./flags.js";
import { tokenLimit } from "./models.js";
import { DEFAULT_MODEL } from "./pipeline/defaults.js";
import { PromptBuilder } from "./promptBuilder.js";
import { packageVersion } from "./version.js";

const USAGE = `usage: ctxopt-prompt --history FILE [--addr HOST:PORT] [--model NAME] [--message TEXT]
                     [--session ID] [--context-limit TOKENS] [--json]
       ctxopt-prompt --explain --history FILE [--addr HOST:PORT] [--model NAME]
                     [--context-limit TOKENS] [--top N] [--json]
       ctxopt-prompt context FILE [same options as --explain]
       ctxopt-prompt --version

Builds a Gemini prompt from a history JSON file through the ctxopt service and
prints the context summary line. FILE holds a Content[] array, or an object
{"systemInstruction"?, "memory"?, "history": Content[], "message"?, "activeTask"?}.
--json prints the generateContent request on stdout (the summary goes to stderr).

--explain (or the context subcommand) shows what fills the context: tokens by
category (system, user text, model text, tool calls, tool outputs, inline data,
stashed) and the largest chunks with the decision and reasons of a collection
run now (a dry plan: nothing is stored). FILE may also be what Gemini CLI
saves: a /chat save checkpoint ({"history": Content[]}, under
~/.gemini/tmp/<project>/) or a session recording (chats/session-*.jsonl).
Flags come from the environment: GEMINI_CONTEXT_OPTIMIZATION (false|true|shadow),
GEMINI_CONTEXT_ROLLOUT_PERCENT, GEMINI_CONTEXT_MAX_CHUNKS, GEMINI_EMBEDDING_ENABLED,
GEMINI_PRUNING_AGGRESSIVE, CTXOPT_ADDR, CTXOPT_DEADLINE_MS.`;

interface HistoryFile {
  readonly history: Content[];
  readonly systemInstruction?: string;
  readonly memory?: string;
  readonly message?: string;
  readonly activeTask?: string;
}

function readHistoryFile(path: string): { file: HistoryFile; digest: string } {
  const raw = readFileSync(path, "utf8");
  const parsed: unknown = JSON.parse(raw);
  const digest = createHash("sha256").update(raw).digest("hex").slice(0, 12);
  if (Array.isArray(parsed)) return { file: { history: parsed as Content[] }, digest };
  if (parsed !== null && typeof parsed === "object" && Array.isArray((parsed as { history?: unknown }).history)) {
    return { file: parsed as HistoryFile, digest };
  }
  throw new Error(`${path}: expected a Content[] array or an object with a "history" array`);
}

async function main(argv: string[]): Promise<number> {
  const subcommand = argv[0] === "context";
  const { values, positionals } = parseArgs({
    args: subcommand ? argv.slice(1) : argv,
    allowPositionals: subcommand,
    options: {
      explain: { type: "boolean", default: false },
      top: { type: "string", default: "10" },
      history: { type: "string" },
      addr: { type: "string" },
      model: { type: "string", default: DEFAULT_MODEL },
      message: { type: "string" },
      session: { type: "string" },
      "context-limit": { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
      version: { type: "boolean", default: false },
    },
  });
  if (values.version) {
    console.log(`ctxopt-prompt ${packageVersion()}`);
    return 0;
  }
  if (subcommand && values.history === undefined && positionals[0] !== undefined) values.history = positionals[0];
  if (!values.help && values.history !== undefined && (subcommand || values.explain)) {
    return explain(values.history, values.addr, values.model, values["context-limit"], values.top, values.json);
  }
  if (values.help || values.history === undefined) {
    (values.help ? console.log : console.error)(USAGE);
    return values.help ? 0 : 2;
  }
  const env = values.addr === undefined ? process.env : { ...process.env, CTXOPT_ADDR: values.addr };
  const flags = readFlags(env);
  const limit = values["context-limit"];
  const contextLimitTokens = limit === undefined ? undefined : Number(limit);
  if (contextLimitTokens !== undefined && (!Number.isInteger(contextLimitTokens) || contextLimitTokens <= 0)) {
    throw new Error(`--context-limit: expected a positive integer (got ${JSON.stringify(limit)})`);
  }
  const { file, digest } = readHistoryFile(values.history);
  const builder = new PromptBuilder({ flags, budget: contextLimitTokens === undefined ? {} : { contextLimitTokens } });
  try {
    const built = await builder.build({
      sessionId: values.session ?? `cli-${digest}`,
      model: values.model,
      history: file.history,
      message: values.message ?? file.message ?? "Continue with the task.",
      ...(file.systemInstruction ? { systemInstruction: file.systemInstruction } : {}),
      ...(file.memory ? { memory: file.memory } : {}),
      ...(file.activeTask ? { activeTask: file.activeTask } : {}),
    });
    if (values.json) {
      console.error(built.summaryLine);
      console.log(JSON.stringify(built.request, null, 2));
    } else {
      console.log(built.summaryLine);
    }
    return 0;
  } finally {
    builder.close();
  }
}

async function explain(path: string, addr: string | undefined, model: string, limit: string | undefined, top: string, json: boolean): Promise<number> {
  const flags = readFlags(addr === undefined ? process.env : { ...process.env, CTXOPT_ADDR: addr });
  const windowTokens = limit === undefined ? (flags.windowTokens ?? tokenLimit(model)) : Number(limit);
  if (!Number.isInteger(windowTokens) || windowTokens <= 0) throw new Error(`--context-limit: expected a positive integer (got ${JSON.stringify(limit)})`);
  const count = Number(top);
  if (!Number.isInteger(count) || count < 0) throw new Error(`--top: expected a non-negative integer (got ${JSON.stringify(top)})`);
  const file = await readContextFile(path);
  const client = new CtxoptClient(flags.address, { deadlineMs: Math.max(flags.deadlineMs, 5000) });
  try {
    const report = await explainContents(file.history, {
      source: path,
      model,
      windowTokens,
      client,
      top: count,
      ...(file.systemInstruction === undefined ? {} : { systemInstruction: file.systemInstruction }),
      ...(flags.thresholdPercent === undefined ? {} : { thresholdPercent: flags.thresholdPercent }),
      ...(flags.targetPercent === undefined ? {} : { targetPercent: flags.targetPercent }),
    });
    console.log(json ? JSON.stringify(report, null, 2) : formatReport(report));
    return 0;
  } finally {
    client.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    // Exit once stdout is flushed: gemini-cli-core, loaded to read a session
    // recording, leaves timers that would keep the process alive.
    process.stdout.write("", () => process.exit(code));
  },
  (error: unknown) => {
    console.error(`ctxopt-prompt: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);

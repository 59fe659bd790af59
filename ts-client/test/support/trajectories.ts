import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import type { Part } from "../../src/gemini/types.js";
import { repoRoot } from "./paths.js";

/** The recorded SWE-agent sessions (Gemini 3 Pro on SWE-bench Verified). */
export const SWE_TRAJECTORIES = `${repoRoot}../shared/datasets/swe-agent-gemini3-dev.jsonl.gz`;

/** One model reply and the user turn that follows it (tool responses or a text message). */
export interface Step {
  readonly model: Part[];
  readonly next: Part[];
}

export interface Session {
  readonly id: string;
  readonly task: string;
  readonly steps: Step[];
  /** Indexes of steps that hold two calls (a parallel step, only the first signed). */
  readonly parallelSteps: number[];
}

interface Message {
  readonly role: string;
  readonly content: string;
}

const COMMAND = /```bash\n([\s\S]*?)```/;

/**
 * Maps trajectories to Gemini CLI turns: each assistant message becomes a
 * model turn with its THOUGHT text and a `run_shell_command` call signed with
 * a thought signature (as Gemini 3 signs the first call of a step), each tool
 * output the functionResponse answering it. Every `parallelEvery`-th pair of
 * consecutive commands becomes one parallel step of two calls, only the
 * first signed.
 */
export function loadSessions(indexes: readonly number[], parallelEvery = 4): Session[] {
  const lines = gunzipSync(readFileSync(SWE_TRAJECTORIES)).toString("utf8").split("\n").filter(Boolean);
  return indexes.map((index) => toSession(JSON.parse(lines[index]!) as { instance_id: string; messages: Message[] }, parallelEvery));
}

function toSession(record: { instance_id: string; messages: Message[] }, parallelEvery: number): Session {
  const messages = record.messages.slice(2);
  const steps: Step[] = [];
  const parallelSteps: number[] = [];
  let callCount = 0;
  for (let i = 0; i + 1 < messages.length; i += 2) {
    const reply = messages[i]!;
    const outcome = messages[i + 1]!;
    if (reply.role !== "assistant" || outcome.role !== "user") break;
    const command = COMMAND.exec(reply.content)?.[1]?.trim();
    const thought = reply.content.replace(COMMAND, "").trim() || "Next step.";
    if (command === undefined) {
      steps.push({ model: [{ text: thought }], next: [{ text: outcome.content }] });
      continue;
    }
    const following = messages[i + 2];
    const followingCommand = following?.role === "assistant" ? COMMAND.exec(following.content)?.[1]?.trim() : undefined;
    const id = `call-${callCount++}`;
    const call: Part = { functionCall: { id, name: "run_shell_command", args: { command } }, thoughtSignature: `sig-${id}` };
    const answer: Part = { functionResponse: { id, name: "run_shell_command", response: { output: outcome.content } } };
    if (steps.length % parallelEvery === parallelEvery - 1 && followingCommand !== undefined && messages[i + 3]?.role === "user") {
      const secondId = `call-${callCount++}`;
      parallelSteps.push(steps.length);
      steps.push({
        model: [{ text: thought }, call, { functionCall: { id: secondId, name: "run_shell_command", args: { command: followingCommand } } }],
        next: [answer, { functionResponse: { id: secondId, name: "run_shell_command", response: { output: messages[i + 3]!.content } } }],
      });
      i += 2;
      continue;
    }
    steps.push({ model: [{ text: thought }, call], next: [answer] });
  }
  return { id: record.instance_id, task: record.messages[1]!.content, steps, parallelSteps };
}

import type { Content } from "@google/genai";
import { call, model, response, text, user } from "../test/support/histories.js";

/** An agent session of `exchanges` (question, tool call, tool output, answer) rounds: 4 chunks each. */
export function agentHistory(exchanges: number, seed: string): Content[] {
  const history: Content[] = [];
  for (let i = 0; i < exchanges; i += 1) {
    const file = `src/module${i % 37}/part${i}.ts`;
    history.push(
      user(text(`[${seed}] step ${i}: check ${file} for the handler of event ${i % 11}`)),
      model(call("read_file", `c${i}`, { absolute_path: file })),
      user(response("read_file", `c${i}`, Array.from({ length: 30 }, (_, l) => `export const value${l} = compute(${i}, ${l}); // line ${l}`).join("\n"))),
      model(text(`Step ${i}: ${file} registers handler ${i % 11}; nothing to change there.`)),
    );
  }
  return history;
}

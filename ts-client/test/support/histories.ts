import type { Content, Part } from "@google/genai";
import fc from "fast-check";

export const text = (value: string): Part => ({ text: value });
export const call = (name: string, id?: string, args: Record<string, unknown> = {}): Part => ({
  functionCall: { name, args, ...(id === undefined ? {} : { id }) },
});
export const response = (name: string, id: string | undefined, output: string): Part => ({
  functionResponse: { name, response: { output }, ...(id === undefined ? {} : { id }) },
});
export const user = (...parts: Part[]): Content => ({ role: "user", parts });
export const model = (...parts: Part[]): Content => ({ role: "model", parts });

const words = fc.string({ minLength: 1, maxLength: 40, unit: "grapheme" });
const toolName = fc.constantFrom("read_file", "run_shell_command", "search_file_content", "replace");

const textPart: fc.Arbitrary<Part> = fc.oneof(
  words.map(text),
  words.map((code) => text(`\`\`\`ts\n${code}\n\`\`\``)),
  fc.record({ mimeType: fc.constantFrom("image/png", "application/pdf"), data: fc.base64String({ maxLength: 24 }) }).map((inlineData) => ({ inlineData })),
);

/** One model turn and the user turn answering its calls (ids unique across the history). */
const exchange = (index: number): fc.Arbitrary<Content[]> =>
  fc
    .record({
      prose: fc.array(textPart, { maxLength: 2 }),
      calls: fc.array(fc.record({ name: toolName, withId: fc.boolean(), signed: fc.boolean(), output: words }), { maxLength: 3 }),
      next: fc.array(textPart, { minLength: 1, maxLength: 2 }),
    })
    .map(({ prose, calls, next }) => {
      const callParts = calls.map((c, i): Part => {
        const part = call(c.name, c.withId ? `call-${index}-${i}` : undefined, { step: i });
        return c.signed ? { ...part, thoughtSignature: `sig-${index}-${i}` } : part;
      });
      const modelParts = [...prose, ...callParts];
      const modelTurn = model(...(modelParts.length > 0 ? modelParts : [text("ok")]));
      if (calls.length === 0) return [modelTurn, user(...next)];
      const answers = calls.map((c, i) => response(c.name, c.withId ? `call-${index}-${i}` : undefined, c.output));
      return [modelTurn, user(...answers)];
    });

/** Valid Gemini histories: user first, alternating, every call answered in order. */
export const validHistory: fc.Arbitrary<Content[]> = fc
  .tuple(fc.array(textPart, { minLength: 1, maxLength: 2 }), fc.integer({ min: 0, max: 6 }))
  .chain(([opening, exchanges]) =>
    fc.tuple(...Array.from({ length: exchanges }, (_, i) => exchange(i))).map((pairs) => {
      const history: Content[] = [user(...opening)];
      for (const pair of pairs) {
        const [modelTurn, next] = pair as [Content, Content];
        history.push(modelTurn, next);
      }
      return history;
    }),
  );

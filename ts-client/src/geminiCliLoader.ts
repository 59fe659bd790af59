/**
 * Node module hooks the `ctxopt-gemini` launcher installs in Gemini CLI's
 * process. Gemini CLI ships as an esbuild bundle, so there is no module to
 * replace: when a bundle file that defines `createContentGenerator` loads,
 * the definition is renamed and a function of the same name is added that
 * wraps what the original returns with `withContextOptimizer`. Nothing on
 * disk changes; any other module loads untouched.
 */

export interface LoaderData {
  /** URL of the module exporting `wrapGeminiCliGenerator`. */
  readonly hookUrl: string;
  /** Only files under this directory are looked at (Gemini CLI's bundle). */
  readonly bundleDir: string;
}

/** Gemini CLI's content generator factory, as esbuild emits it (0.61: `(config2, gcConfig, sessionId)`). */
export const FACTORY_SIGNATURE = /async function createContentGenerator\((\w+), (\w+), (\w+)\) \{/;
const ORIGINAL = "__ctxoptOriginalCreateContentGenerator";

let data: LoaderData | undefined;

export function initialize(loaderData: LoaderData): void {
  data = loaderData;
}

interface LoadResult {
  format?: string | null;
  source?: string | ArrayBuffer | ArrayBufferView | null;
  shortCircuit?: boolean;
}
type NextLoad = (url: string, context?: unknown) => Promise<LoadResult>;

export async function load(url: string, context: unknown, nextLoad: NextLoad): Promise<LoadResult> {
  const result = await nextLoad(url, context);
  if (data === undefined || !url.startsWith(data.bundleDir) || result.format !== "module" || result.source == null) return result;
  const raw = result.source;
  const source =
    typeof raw === "string"
      ? raw
      : raw instanceof ArrayBuffer
        ? Buffer.from(raw).toString("utf8")
        : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString("utf8");
  const patched = wrapFactory(source, data.hookUrl);
  return patched === undefined ? result : { ...result, source: patched };
}

/** The module source with the factory wrapped, or undefined when it defines none. */
export function wrapFactory(source: string, hookUrl: string): string | undefined {
  const match = FACTORY_SIGNATURE.exec(source);
  if (match === null) return undefined;
  const [, config, gcConfig, sessionId] = match;
  const renamed = source.replace(FACTORY_SIGNATURE, `async function ${ORIGINAL}(${config}, ${gcConfig}, ${sessionId}) {`);
  const importLine = `import { wrapGeminiCliGenerator as __ctxoptWrap } from ${JSON.stringify(hookUrl)};\n`;
  const wrapper = `\nasync function createContentGenerator(a, b, c) { return __ctxoptWrap(await ${ORIGINAL}(a, b, c), b, c); }\n`;
  const shebang = renamed.startsWith("#!") ? renamed.slice(0, renamed.indexOf("\n") + 1) : "";
  return `${shebang}${importLine}${renamed.slice(shebang.length)}${wrapper}`;
}

/**
 * Context window per model, in tokens (Gemini CLI's table); a name not listed
 * gets the default, and a dated or suffixed variant matches its base name.
 */
export const MODEL_TOKEN_LIMITS: Readonly<Record<string, number>> = {
  "gemini-3-pro-preview": 1_048_576,
  "gemini-2.5-pro": 1_048_576,
  "gemini-2.5-flash": 1_048_576,
  "gemini-2.5-flash-lite": 1_048_576,
  "gemini-2.0-flash": 1_048_576,
  "gemini-2.0-flash-lite": 1_048_576,
  "gemini-2.0-flash-preview-image-generation": 32_000,
  "gemini-1.5-pro": 2_097_152,
  "gemini-1.5-flash": 1_048_576,
};

export const DEFAULT_TOKEN_LIMIT = 1_048_576;

export function tokenLimit(model: string): number {
  const exact = MODEL_TOKEN_LIMITS[model];
  if (exact !== undefined) return exact;
  const base = Object.keys(MODEL_TOKEN_LIMITS)
    .filter((name) => model.startsWith(`${name}-`))
    .sort((a, b) => b.length - a.length)[0];
  return base === undefined ? DEFAULT_TOKEN_LIMIT : MODEL_TOKEN_LIMITS[base]!;
}

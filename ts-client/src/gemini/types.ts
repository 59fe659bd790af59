/**
 * The Gemini `Content` shapes ctxopt reads and writes, declared structurally.
 *
 * Each field has the type every supported `@google/genai` declares for it
 * (1.30, the one Gemini CLI 0.61 brings, and 3.x), and fields whose types
 * differ between versions (e.g. `mediaResolution`) are left out: a `Content`
 * of either version is assignable to this one, and this one to either,
 * without casts. Parts ctxopt does not rewrite travel through untouched at run
 * time, whatever fields they carry.
 */
export interface Content {
  role?: string;
  parts?: Part[];
}

export interface Part {
  text?: string;
  thought?: boolean;
  thoughtSignature?: string;
  functionCall?: FunctionCall;
  functionResponse?: FunctionResponse;
  inlineData?: Blob;
  fileData?: FileData;
}

export interface FunctionCall {
  id?: string;
  name?: string;
  args?: Record<string, unknown>;
}

export interface FunctionResponse {
  id?: string;
  name?: string;
  response?: Record<string, unknown>;
}

export interface Blob {
  data?: string;
  mimeType?: string;
  displayName?: string;
}

export interface FileData {
  fileUri?: string;
  mimeType?: string;
  displayName?: string;
}

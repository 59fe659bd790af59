import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { ChunkKind, GcPolicy, Role } from "../src/generated/ctxopt/v1/ctxopt.js";
import { environmentContextTurns } from "../src/gemini/environment.js";
import { chunksOf, mapContents, systemChunk, toContents } from "../src/gemini/mapping.js";
import { call, model, response, text, user, validHistory } from "./support/histories.js";

test("mapping a history and back gives the same history (round trip)", () => {
  fc.assert(fc.property(validHistory, (history) => assert.deepEqual(toContents(mapContents(history)), history)));
});

test("the same history maps to the same chunk ids", () => {
  fc.assert(fc.property(validHistory, (history) => assert.deepEqual(chunksOf(mapContents(history)), chunksOf(mapContents(structuredClone(history))))));
});

test("chunk ids are unique within a history", () => {
  fc.assert(
    fc.property(validHistory, (history) => {
      const ids = chunksOf(mapContents(history)).map((c) => c.id);
      assert.equal(new Set(ids).size, ids.length);
    }),
  );
});

test("appending turns leaves the ids of earlier turns unchanged", () => {
  fc.assert(
    fc.property(validHistory, validHistory, (history, more) => {
      const before = chunksOf(mapContents(history)).map((c) => c.id);
      const after = chunksOf(mapContents([...history, ...more])).map((c) => c.id);
      assert.deepEqual(after.slice(0, before.length), before);
    }),
  );
});

test("the same text at another position gets another id", () => {
  const [first, , third] = chunksOf(mapContents([user(text("same")), model(text("x")), user(text("same"))]));
  assert.notEqual(first!.id, third!.id);
});

test("a call and its response share a group, matched by call id", () => {
  const chunks = chunksOf(
    mapContents([
      user(text("go")),
      model(call("read_file", "a"), call("read_file", "b")),
      user(response("read_file", "b", "B"), response("read_file", "a", "A")),
    ]),
  );
  const [, callA, callB, respB, respA] = chunks;
  assert.equal(respA!.groupId, callA!.groupId);
  assert.equal(respB!.groupId, callB!.groupId);
  assert.equal(respA!.parentId, callA!.id);
  assert.equal(respB!.parentId, callB!.id);
});

test("a parallel step (its calls and their responses) is one group, so the signed first call moves with its siblings", () => {
  const signed = { ...call("read_file", "a"), thoughtSignature: "sig" };
  const chunks = chunksOf(
    mapContents([user(text("go")), model(signed, call("read_file", "b")), user(response("read_file", "a", "A"), response("read_file", "b", "B"))]),
  );
  const [, callA, callB, respA, respB] = chunks;
  assert.notEqual(callA!.groupId, "");
  assert.deepEqual([callB!.groupId, respA!.groupId, respB!.groupId], [callA!.groupId, callA!.groupId, callA!.groupId]);
});

test("steps in different model turns are different groups", () => {
  const chunks = chunksOf(
    mapContents([user(text("go")), model(call("ls", "1")), user(response("ls", "1", "x")), model(call("ls", "2")), user(response("ls", "2", "y"))]),
  );
  assert.notEqual(chunks[1]!.groupId, chunks[3]!.groupId);
});

test("without ids, calls and responses pair by name in order", () => {
  const chunks = chunksOf(
    mapContents([
      user(text("go")),
      model(call("ls"), call("cat"), call("ls")),
      user(response("ls", undefined, "1"), response("cat", undefined, "2"), response("ls", undefined, "3")),
    ]),
  );
  const [, ls1, cat, ls2, r1, r2, r3] = chunks;
  assert.deepEqual([r1!.groupId, r2!.groupId, r3!.groupId], [ls1!.groupId, cat!.groupId, ls2!.groupId]);
});

test("kinds are inferred: tool call, tool result, code, message", () => {
  const chunks = chunksOf(
    mapContents([user(text("explain")), model(text("```ts\nconst x = 1;\n```"), call("read_file", "c")), user(response("read_file", "c", "data"))]),
  );
  assert.deepEqual(
    chunks.map((c) => c.kind),
    [ChunkKind.CHUNK_KIND_MESSAGE, ChunkKind.CHUNK_KIND_CODE, ChunkKind.CHUNK_KIND_TOOL_CALL, ChunkKind.CHUNK_KIND_TOOL_RESULT],
  );
});

test("roles map to ROLE_USER and ROLE_MODEL", () => {
  const chunks = chunksOf(mapContents([user(text("a")), model(text("b"))]));
  assert.deepEqual(
    chunks.map((c) => c.role),
    [Role.ROLE_USER, Role.ROLE_MODEL],
  );
});

test("a read_file call's path is the file path of the call and of its response", () => {
  const chunks = chunksOf(
    mapContents([user(text("go")), model(call("read_file", "r", { absolute_path: "/src/a.ts" })), user(response("read_file", "r", "code"))]),
  );
  assert.deepEqual(
    chunks.slice(1).map((c) => c.filePath),
    ["/src/a.ts", "/src/a.ts"],
  );
});

test("tool output keeps its line breaks in the chunk text so it can be trimmed by line", () => {
  const [, , result] = chunksOf(mapContents([user(text("go")), model(call("run", "r")), user(response("run", "r", "line 1\nline 2"))]));
  assert.equal(result!.text, "line 1\nline 2");
  assert.equal(result!.metadata["tool_name"], "run");
});

test("Gemini CLI's environment-context turn and its acknowledgement are LOCKED", () => {
  const history = [
    user(text("This is the Gemini CLI. We are setting up the context for our chat.\nToday's date is ...")),
    model(text("Got it. Thanks for the context!")),
    user(text("fix the bug")),
  ];
  const locked = environmentContextTurns(history);
  assert.equal(locked, 2);
  const chunks = chunksOf(mapContents(history, { lockedIndexes: new Set([0, 1]) }));
  assert.deepEqual(
    chunks.map((c) => c.policy),
    [GcPolicy.GC_POLICY_LOCKED, GcPolicy.GC_POLICY_LOCKED, GcPolicy.GC_POLICY_UNSPECIFIED],
  );
});

test("an ordinary first turn is not taken for the environment context", () => {
  assert.equal(environmentContextTurns([user(text("hello")), model(text("hi"))]), 0);
});

test("the system instruction maps to a LOCKED system chunk", () => {
  const chunk = systemChunk("system", "You are a CLI agent.");
  assert.equal(chunk.role, Role.ROLE_SYSTEM);
  assert.equal(chunk.kind, ChunkKind.CHUNK_KIND_SYSTEM);
  assert.equal(chunk.policy, GcPolicy.GC_POLICY_LOCKED);
});

test("thought and thoughtSignature parts come back exactly as received", () => {
  const history = [
    user(text("q")),
    model({ text: "thinking...", thought: true, thoughtSignature: "c2ln" }, { ...call("ls", "1"), thoughtSignature: "YWJj" }),
    user(response("ls", "1", "x")),
  ];
  assert.deepEqual(toContents(mapContents(history)), history);
});

test("a turn with a role other than user or model is refused, naming it", () => {
  assert.throws(() => mapContents([{ role: "system", parts: [text("x")] }]), /history\[0\]\.role.*"system"/);
});

test("Gemini CLI 0.61's <session_context> turn (coalesced with the task) is recognised as the environment context", () => {
  const opening = user(
    text("<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nToday's date is ...\n</session_context>"),
    text("Fix the bug."),
  );
  assert.equal(environmentContextTurns([opening, model(call("ls", "1")), user(response("ls", "1", "a"))]), 1);
  assert.equal(environmentContextTurns([user(text("<session_context>\nsomething else\n</session_context>"))]), 0);
  assert.equal(environmentContextTurns([user(text("Fix the bug."))]), 0);
});

test("Gemini CLI's synthetic thought signature does not change a chunk's id (it comes and goes with the active loop)", () => {
  const plain = call("run_shell_command", "1", { command: "ls" });
  const [withSynthetic] = chunksOf(mapContents([model({ ...plain, thoughtSignature: "skip_thought_signature_validator" })]));
  const [without] = chunksOf(mapContents([model(plain)]));
  const [withReal] = chunksOf(mapContents([model({ ...plain, thoughtSignature: "real-signature" })]));
  assert.equal(withSynthetic!.id, without!.id);
  assert.notEqual(withReal!.id, without!.id);
});

test("stepTextPolicy applies to the text of a model turn that calls tools, and to nothing else", () => {
  const history = [user(text("task")), model(text("I will list"), call("ls", "a")), user(response("ls", "a", "x")), model(text("done"))];
  const policies = chunksOf(mapContents(history, { stepTextPolicy: GcPolicy.GC_POLICY_EPHEMERAL })).map((c) => c.policy);
  const U = GcPolicy.GC_POLICY_UNSPECIFIED;
  assert.deepEqual(policies, [U, GcPolicy.GC_POLICY_EPHEMERAL, U, U, U]);
  assert.ok(
    chunksOf(mapContents(history)).every((c) => c.policy === U),
    "unset: the service's policy by kind",
  );
});

test("a call's multi-line string argument reaches the service line by line, after the name and the other arguments", () => {
  const heredoc = "cat <<'EOF' > fix.py\n    total = compute_total(items)\nEOF";
  const [turn] = mapContents([model(call("run_shell_command", "a", { command: heredoc, dir: "src" }))]);
  assert.equal(turn!.parts[0]!.chunk.text, `run_shell_command({"dir":"src"})\ncommand:\n${heredoc}`);
  const [plain] = mapContents([model(call("ls", "b", { path: "src" }))]);
  assert.equal(plain!.parts[0]!.chunk.text, `ls({"path":"src"})`);
});

test("an empty text part or tool output maps to a non-empty chunk (the service refuses empty ones); the part itself stays as it was", () => {
  const history = [
    user(text("go")),
    model({ text: "", thoughtSignature: "sig" }, call("run_shell_command", "c1", { command: "touch a" })),
    user(response("run_shell_command", "c1", "")),
  ];
  const chunks = chunksOf(mapContents(history));
  assert.ok(
    chunks.every((c) => c.text !== ""),
    JSON.stringify(chunks.map((c) => c.text)),
  );
  assert.deepEqual(toContents(mapContents(history)), history);
});

// OpenCode's own JavaScript client (@opencode-ai/sdk, pinned) against a running `rewind serve`.
// It records a turn that writes files (the user message through the client's prompt method, the
// assistant's step through rewind's extension routes, editing the files on disk between step start and
// finish), then uses the client's own methods and checks after each call the response and the files.
// Environment: REWIND_URL (the server), REWIND_REPO (a git worktree under the server's project roots),
// REWIND_BIN and REWIND_DATA (the binary and the server's data directory: the script runs a second server
// on the same database, which it stops and starts again).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { createOpencodeClient } from "@opencode-ai/sdk";
import { createOpencodeClient as createOpencodeClientV2 } from "@opencode-ai/sdk/v2";
import { Validator } from "@seriousme/openapi-schema-validator";

const base = process.env.REWIND_URL;
const repo = process.env.REWIND_REPO;
const bin = process.env.REWIND_BIN;
const data = process.env.REWIND_DATA;
assert.ok(base && repo && bin && data, "set REWIND_URL, REWIND_REPO, REWIND_BIN and REWIND_DATA");

const client = createOpencodeClient({ baseUrl: base, directory: repo });
const file = (name) => {
  const full = path.join(repo, name);
  return fs.existsSync(full) ? fs.readFileSync(full, "utf8") : null;
};
let passed = 0;
const check = (what, fn) => {
  fn();
  passed += 1;
  console.log(`ok - ${what}`);
};
async function extension(route, body) {
  const response = await fetch(`${base}${route}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-opencode-directory": encodeURIComponent(repo) },
    body: JSON.stringify(body ?? {}),
  });
  const json = await response.json();
  assert.equal(response.status, 200, `${route}: ${JSON.stringify(json)}`);
  return json;
}

// `GET /doc` is a valid OpenAPI document, by a validator of the OpenAPI Initiative's own schemas (that each
// answer fits the schema the document gives it is checked by the end-to-end tests in tests/tests/it).
const doc = await (await fetch(`${base}/doc`)).json();
const openapi = new Validator();
const validity = await openapi.validate(doc);
check(`GET /doc is a valid OpenAPI ${openapi.version} document`, () => {
  assert.ok(validity.valid, JSON.stringify(validity.errors, null, 1));
  assert.ok(Object.keys(doc.components.schemas).includes("Session"));
});

// The live event stream, through the client's own SSE subscription.
const seen = [];
const subscription = await client.event.subscribe();
(async () => {
  for await (const event of subscription.stream) seen.push(event);
})().catch(() => {});
// OpenCode's stream of every worktree's events, through the client's `global.event()`: frames
// `{directory, payload}`.
const seenGlobal = [];
const globalSubscription = await client.global.event();
(async () => {
  for await (const frame of globalSubscription.stream) seenGlobal.push(frame);
})().catch(() => {});
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function eventAfter(start, predicate, what) {
  for (let i = 0; i < 200; i += 1) {
    const index = seen.findIndex((event, at) => at >= start && predicate(event));
    if (index >= 0) return index;
    await sleep(25);
  }
  throw new Error(`no ${what} event; saw ${seen.map((event) => event.type).join(", ")}`);
}
await eventAfter(0, (event) => event.type === "server.connected", "server.connected");
// The global stream starts where the outbox ends when it connects: nothing is recorded before it has.
for (let i = 0; i < 200 && seenGlobal[0]?.payload?.type !== "server.connected"; i += 1) await sleep(25);
assert.equal(seenGlobal[0]?.payload?.type, "server.connected", "global.event did not connect");
check("event.subscribe starts with server.connected", () => {
  assert.equal(seen[0].type, "server.connected");
  assert.match(seen[0].id, /^evt_/);
});

const created = await client.session.create({ body: { title: "sdk check" } });
check("session.create returns a session in the client's directory", () => {
  assert.equal(created.error, undefined, JSON.stringify(created.error));
  assert.match(created.data.id, /^ses_/);
  assert.equal(created.data.directory, repo);
  assert.equal(created.data.title, "sdk check");
});
const id = created.data.id;

const beforePrompt = seen.length;
const prompted = await client.session.prompt({
  path: { id },
  body: { parts: [{ type: "text", text: "create hello.txt and change a.txt" }] },
});
check("session.prompt records the user message", () => {
  assert.equal(prompted.error, undefined, JSON.stringify(prompted.error));
  assert.equal(prompted.data.info.role, "user");
  assert.equal(prompted.data.parts[0].text, "create hello.txt and change a.txt");
});
const userID = prompted.data.info.id;
// As OpenCode's prompt does (`Session.touch`): the session's update time moves to the prompt, announced
// after the message.
const promptedAt = prompted.data.info.time.created;
const messageAt = await eventAfter(
  beforePrompt,
  (event) => event.type === "message.updated" && event.properties.info.id === userID,
  "the prompt's message.updated",
);
await eventAfter(
  messageAt,
  (event) => event.type === "session.updated" && event.properties.info.id === id,
  "the prompt's session.updated",
);
const touched = await client.session.get({ path: { id } });
check("session.prompt touches the session: session.updated after the message, time.updated at the prompt or later", () => {
  assert.equal(touched.error, undefined, JSON.stringify(touched.error));
  assert.ok(touched.data.time.updated >= promptedAt, JSON.stringify(touched.data.time));
});

// The assistant's turn: rewind's extension routes, the edits made on disk inside the step.
const assistant = await extension(`/session/${id}/message`, {
  role: "assistant",
  parts: [{ type: "text", text: "done" }],
});
const assistantID = assistant.info.id;
await extension(`/session/${id}/message/${assistantID}/step`);
fs.writeFileSync(path.join(repo, "hello.txt"), "hello from the agent\n");
fs.writeFileSync(path.join(repo, "a.txt"), "a changed by the agent\n");
await extension(`/session/${id}/message/${assistantID}/step/finish`, {
  reason: "stop",
  cost: 0.01,
  tokens: { input: 100, output: 20, reasoning: 0, cache: { read: 0, write: 0 } },
});
await eventAfter(
  0,
  (event) => event.type === "session.idle" && event.properties.sessionID === id,
  "session.idle",
);
check("the step's end is announced as OpenCode announces it: session.idle", () => {});

const messages = await client.session.messages({ path: { id } });
check("messages read as OpenCode's TUI reads them: tokens and cost of the assistant's", () => {
  assert.equal(messages.error, undefined, JSON.stringify(messages.error));
  const last = messages.data.findLast(
    (m) => m.info.role === "assistant" && m.info.tokens.output > 0,
  );
  assert.equal(last?.info.id, assistantID);
  const cost = messages.data.reduce(
    (sum, m) => sum + (m.info.role === "assistant" ? m.info.cost : 0),
    0,
  );
  assert.equal(cost, 0.01);
  assert.deepEqual(last.info.path, { cwd: repo, root: repo });
  // How its last step ended, which OpenCode's clients read to tell a final answer.
  assert.equal(last.info.finish, "stop");
  assert.equal(last.info.error, undefined);
  assert.equal(typeof last.info.modelID, "string");
  assert.deepEqual(messages.data[0].info.model, { providerID: "", modelID: "" });
});
check("session.messages lists the turn with its patch", () => {
  assert.equal(messages.error, undefined, JSON.stringify(messages.error));
  assert.deepEqual(
    messages.data.map((m) => m.info.id),
    [userID, assistantID],
  );
  const patch = messages.data[1].parts.find((p) => p.type === "patch");
  assert.ok(patch, JSON.stringify(messages.data[1].parts));
  assert.deepEqual(patch.files, [`${repo}/a.txt`, `${repo}/hello.txt`]);
  assert.equal(file("hello.txt"), "hello from the agent\n");
});

const beforeRevert = seen.length;
const reverted = await client.session.revert({ path: { id }, body: { messageID: userID } });
check("session.revert puts the files back and returns the session with revert", () => {
  assert.equal(reverted.error, undefined, JSON.stringify(reverted.error));
  assert.equal(reverted.data.revert.messageID, userID);
  assert.equal(file("hello.txt"), null);
  assert.equal(file("a.txt"), "a0\n");
});

const revertDiff = await eventAfter(
  beforeRevert,
  (event) => event.type === "session.diff" && event.properties.sessionID === id,
  "session.diff",
);
const revertUpdated = await eventAfter(
  beforeRevert,
  (event) => event.type === "session.updated" && event.properties.info.revert?.messageID === userID,
  "session.updated",
);
check("the stream shows the revert: session.diff, then session.updated", () => {
  assert.ok(revertDiff < revertUpdated, seen.map((event) => event.type).join(", "));
  assert.deepEqual(
    seen[revertDiff].properties.diff.map((d) => d.file).sort(),
    ["a.txt", "hello.txt"],
  );
});

for (let i = 0; i < 200 && !seenGlobal.some((f) => f.payload?.id === seen[revertUpdated].id); i += 1) {
  await sleep(25);
}
check("global.event carries the same events, each with its session's worktree", () => {
  const kinds = seenGlobal.map((frame) => frame.payload?.type).join(", ");
  assert.equal(seenGlobal[0].directory, "global", kinds);
  assert.equal(seenGlobal[0].payload.type, "server.connected", kinds);
  const sessionFrames = seenGlobal.filter((frame) => frame.payload.properties?.sessionID === id);
  assert.ok(sessionFrames.length > 0, kinds);
  for (const frame of sessionFrames) assert.equal(frame.directory, repo, JSON.stringify(frame));
  const ofSession = (list) => list.filter((event) => event.properties?.sessionID === id);
  assert.deepEqual(sessionFrames.map((frame) => frame.payload), ofSession(seen).slice(0, sessionFrames.length));
  assert.ok(sessionFrames.some((frame) => frame.payload.id === seen[revertUpdated].id), kinds);
});

const got = await client.session.get({ path: { id } });
check("session.get shows the revert", () => {
  assert.equal(got.error, undefined, JSON.stringify(got.error));
  assert.equal(got.data.revert.messageID, userID);
  assert.deepEqual(got.data.summary, { additions: 2, deletions: 1, files: 2 });
  assert.equal(file("hello.txt"), null);
});

const diff = await client.session.diff({ path: { id } });
check("session.diff lists what the revert undid", () => {
  assert.equal(diff.error, undefined, JSON.stringify(diff.error));
  const byFile = Object.fromEntries(diff.data.map((d) => [d.file, d]));
  assert.deepEqual(Object.keys(byFile).sort(), ["a.txt", "hello.txt"]);
  assert.equal(byFile["hello.txt"].status, "added");
  assert.equal(byFile["hello.txt"].additions, 1);
  assert.equal(byFile["a.txt"].status, "modified");
  assert.match(byFile["a.txt"].patch, /^--- a\/a\.txt/m);
  assert.equal(file("a.txt"), "a0\n");
});

const unreverted = await client.session.unrevert({ path: { id } });
check("session.unrevert brings the agent's files back", () => {
  assert.equal(unreverted.error, undefined, JSON.stringify(unreverted.error));
  assert.equal(unreverted.data.revert, undefined);
  assert.equal(file("hello.txt"), "hello from the agent\n");
  assert.equal(file("a.txt"), "a changed by the agent\n");
});

const before = await client.session.children({ path: { id } });
const child = await client.session.create({ body: { title: "subagent", parentID: id } });
const children = await client.session.children({ path: { id } });
check("session.children lists the sessions created with the session's id as parentID", () => {
  assert.equal(before.error, undefined, JSON.stringify(before.error));
  assert.deepEqual(before.data, []);
  assert.equal(child.error, undefined, JSON.stringify(child.error));
  assert.equal(child.data.parentID, id);
  assert.equal(children.error, undefined, JSON.stringify(children.error));
  assert.deepEqual(children.data.map((s) => s.id), [child.data.id]);
});

const statuses = await client.session.status();
check("session.status lists no busy session once the step is finished", () => {
  assert.equal(statuses.error, undefined, JSON.stringify(statuses.error));
  assert.deepEqual(statuses.data, {});
});

const renamed = await client.session.update({ path: { id }, body: { title: "sdk check, renamed" } });
const reread = await client.session.get({ path: { id } });
check("session.update gives the session a new title", () => {
  assert.equal(renamed.error, undefined, JSON.stringify(renamed.error));
  assert.equal(renamed.data.title, "sdk check, renamed");
  assert.equal(reread.data.title, "sdk check, renamed");
});

// The v2 client's session.update also sets metadata and time.archived, and leaves the title.
const v2 = createOpencodeClientV2({ baseUrl: base, directory: repo });
const archivedAt = Date.now();
const archived = await v2.session.update({ sessionID: id, metadata: { ticket: 7 }, time: { archived: archivedAt } });
const rereadV2 = await v2.session.get({ sessionID: id });
check("the v2 client's session.update sets metadata and time.archived", () => {
  assert.equal(archived.error, undefined, JSON.stringify(archived.error));
  assert.deepEqual(archived.data.metadata, { ticket: 7 });
  assert.equal(archived.data.time.archived, archivedAt);
  assert.equal(archived.data.title, "sdk check, renamed");
  assert.deepEqual(rereadV2.data, archived.data);
});

const health = await v2.global.health();
check("the v2 client's global.health says the server is healthy, with its version", () => {
  assert.equal(health.error, undefined, JSON.stringify(health.error));
  assert.equal(health.data.healthy, true);
  assert.match(health.data.version, /^\d+\.\d+\.\d+/);
});

// OpenCode's paging of the messages, through the v2 client: `limit`, then `before` set to the page's
// `X-Next-Cursor`, newest page first, each page ascending, until a page names no cursor.
const everyMessage = await v2.session.messages({ sessionID: id });
const pages = [];
let cursor;
for (let round = 0; round < 10; round += 1) {
  const page = await v2.session.messages({ sessionID: id, limit: 1, ...(cursor ? { before: cursor } : {}) });
  assert.equal(page.error, undefined, JSON.stringify(page.error));
  pages.push(page.data.map((m) => m.info.id));
  cursor = page.response.headers.get("x-next-cursor");
  if (!cursor) break;
}
check("the v2 client pages through the messages with limit and the X-Next-Cursor header", () => {
  assert.equal(everyMessage.error, undefined, JSON.stringify(everyMessage.error));
  const all = everyMessage.data.map((m) => m.info.id);
  assert.ok(all.length >= 2, JSON.stringify(all));
  assert.deepEqual(pages, all.map((one) => [one]).reverse());
});

// A turn interrupted while its tool runs: the client's own abort, then the messages as a TUI reads them.
const asked = await client.session.prompt({
  path: { id },
  body: { parts: [{ type: "text", text: "run the build" }] },
});
assert.equal(asked.error, undefined, JSON.stringify(asked.error));
const working = await extension(`/session/${id}/message`, { role: "assistant" });
await extension(`/session/${id}/message/${working.info.id}/step`);
await extension(`/session/${id}/message/${working.info.id}/part`, {
  type: "tool",
  callID: "call_build",
  tool: "bash",
  state: { status: "running", input: { command: "make" }, time: { start: Date.now() } },
});
const midStep = await client.session.update({ path: { id }, body: { title: "renamed while the build runs" } });
const aborted = await client.session.abort({ path: { id } });
const afterAbort = await client.session.messages({ path: { id } });
const titled = await client.session.get({ path: { id } });
check("session.update lands while a step is open, as in OpenCode, and the step's end keeps the title", () => {
  assert.equal(midStep.error, undefined, JSON.stringify(midStep.error));
  assert.equal(midStep.data.title, "renamed while the build runs");
  assert.equal(titled.data.title, "renamed while the build runs");
});
check("session.abort ends the running tool call as OpenCode does, and marks the turn interrupted", () => {
  assert.equal(aborted.error, undefined, JSON.stringify(aborted.error));
  assert.equal(aborted.data, true);
  const turn = afterAbort.data.find((message) => message.info.id === working.info.id);
  assert.equal(turn.info.finish, "aborted");
  assert.equal(turn.info.error.name, "MessageAbortedError");
  const call = turn.parts.find((part) => part.type === "tool");
  assert.equal(call.state.status, "error");
  assert.equal(call.state.error, "Tool execution aborted");
  assert.deepEqual(call.state.input, { command: "make" });
  assert.ok(call.state.time.end >= call.state.time.start);
  assert.equal(file("hello.txt"), "hello from the agent\n");
});

const missing = await client.session.get({ path: { id: "ses_000000000001abcdefghijklmn" } });
check("an unknown session is OpenCode's NotFoundError", () => {
  assert.equal(missing.response.status, 404);
  assert.equal(missing.error.name, "NotFoundError");
  assert.equal(file("hello.txt"), "hello from the agent\n");
});

const busy = await client.session.revert({ path: { id }, body: { messageID: "msg_bad" } });
check("a malformed messageID is OpenCode's BadRequest", () => {
  assert.equal(busy.response.status, 400);
  assert.equal(busy.error.name, "BadRequest");
  assert.equal(file("a.txt"), "a changed by the agent\n");
});

// A broken connection: the client's SSE subscription reconnects with Last-Event-ID and gets the events it
// missed, once each. It goes through a proxy the script cuts, while the renames go straight to the server.
const target = new URL(base);
const piped = new Set();
const proxy = net.createServer((socket) => {
  const upstream = net.connect(Number(target.port), target.hostname);
  const cut = () => {
    socket.destroy();
    upstream.destroy();
  };
  for (const end of [socket, upstream]) {
    piped.add(end);
    end.on("error", cut);
    end.on("close", cut);
  }
  socket.pipe(upstream);
  upstream.pipe(socket);
});
await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
const proxyPort = proxy.address().port;
// The events of a client subscription to the server at `port` that retries quickly after an error.
async function subscribeAt(port) {
  const events = [];
  const subscription = await client.event.subscribe({ baseUrl: `http://127.0.0.1:${port}`, sseDefaultRetryDelay: 50 });
  (async () => {
    for await (const event of subscription.stream) events.push(event);
  })().catch(() => {});
  return events;
}
const proxied = await subscribeAt(proxyPort);
async function arrived(events, predicate, what, tries = 400) {
  for (let i = 0; i < tries; i += 1) {
    const index = events.findIndex(predicate);
    if (index >= 0) return index;
    await sleep(25);
  }
  throw new Error(`no ${what} event; saw ${events.map((event) => event.type).join(", ")}`);
}
const titledAs = (title) => (event) => event.type === "session.updated" && event.properties.info.title === title;
const isConnected = (event) => event.type === "server.connected";
// The subscription connects as it is first read: an event committed before that is not its to receive.
await arrived(proxied, isConnected, "server.connected through the proxy");
await client.session.update({ path: { id }, body: { title: "before the break" } });
await arrived(proxied, titledAs("before the break"), "first rename");
await new Promise((resolve) => {
  proxy.close(resolve);
  for (const end of piped) end.destroy();
});
for (const title of ["while away 1", "while away 2"]) {
  const away = await client.session.update({ path: { id }, body: { title } });
  assert.equal(away.error, undefined, JSON.stringify(away.error));
}
await eventAfter(0, titledAs("while away 2"), "second rename on the unbroken stream");
await new Promise((resolve) => proxy.listen(proxyPort, "127.0.0.1", resolve));
await arrived(proxied, titledAs("while away 2"), "resumed rename");
// A subscription that reconnected once: two server.connected, no server.lagged, each of the renames it
// `missed` once, and the same events as the stream that never broke, from the first it received on.
function assertResumed(events, missed) {
  const kinds = events.map((event) => event.type).join(", ");
  assert.equal(events.filter((event) => event.type === "server.connected").length, 2, kinds);
  assert.equal(events.filter((event) => event.type === "server.lagged").length, 0, kinds);
  for (const title of missed) assert.equal(events.filter(titledAs(title)).length, 1, kinds);
  const last = titledAs(missed.at(-1));
  const outbox = (list) => list.filter((event) => !event.type.startsWith("server.")).map((event) => event.id);
  const got = outbox(events.slice(0, events.findIndex(last) + 1));
  const whole = outbox(seen.slice(0, seen.findIndex(last) + 1));
  assert.deepEqual(got, whole.slice(whole.indexOf(got[0])));
}
check("event.subscribe resumes after a broken connection with the events it missed, once each", () =>
  assertResumed(proxied, ["while away 1", "while away 2"]),
);
proxy.close();

// A restart: a second server on the same database, stopped with SIGTERM and started again on the same
// port. The client's subscription to it reconnects by itself (the stream breaks off as the server stops)
// and resumes with the events committed while the server was down, which go through the first server.
const { port: restartPort } = await new Promise((resolve) => {
  const probe = net.createServer().listen(0, "127.0.0.1", () => {
    const address = probe.address();
    probe.close(() => resolve(address));
  });
});
// The second server's runs: killed if the script ends first, their logs printed if it fails.
const runs = [];
process.on("exit", (code) => {
  for (const run of runs) {
    if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill("SIGKILL");
    if (code !== 0) console.error(`--- second server log ---\n${run.log}`);
  }
});
async function startServer() {
  const child = spawn(bin, ["serve", "--port", String(restartPort), "--data-dir", data, "--project-root", repo], {
    cwd: repo,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const run = { child, log: "" };
  runs.push(run);
  let out = "";
  child.stdout.on("data", (chunk) => (out += chunk));
  child.stderr.on("data", (chunk) => (run.log += chunk));
  for (let i = 0; i < 600 && !out.includes("http://"); i += 1) {
    assert.equal(child.exitCode, null, "the second server exited as it started");
    await sleep(25);
  }
  assert.ok(out.includes("http://"), "the second server did not start");
  return child;
}
async function stopServer(child) {
  const exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
  child.kill("SIGTERM");
  assert.equal(await exited, 0, "the second server's exit code after SIGTERM");
}
let second = await startServer();
const restarted = await subscribeAt(restartPort);
await arrived(restarted, isConnected, "server.connected from the second server");
await client.session.update({ path: { id }, body: { title: "before the restart" } });
await arrived(restarted, titledAs("before the restart"), "rename through the second server");
await stopServer(second);
for (const title of ["while down 1", "while down 2"]) {
  const down = await client.session.update({ path: { id }, body: { title } });
  assert.equal(down.error, undefined, JSON.stringify(down.error));
}
await eventAfter(0, titledAs("while down 2"), "second rename on the first server's stream");
second = await startServer();
await arrived(restarted, titledAs("while down 2"), "rename made while the second server was down", 1200);
await stopServer(second);
check("event.subscribe comes back after the server restarts, with the events committed while it was down", () =>
  assertResumed(restarted, ["while down 1", "while down 2"]),
);

console.log(`sdk: ${passed} passed, 0 failed`);
// The SSE subscription reconnects forever; the checks are done.
process.exit(0);

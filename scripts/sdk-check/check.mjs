// The official TypeScript SDKs of Mistral (@mistralai/mistralai) and
// Together (together-ai) against `sluice emulate`: upload, create, get,
// list, download, cancel, each answer parsed by the SDK's own types.
// Run by scripts/sdk-check/run.sh; needs node and npm. Not part of CI.
import { Mistral } from "@mistralai/mistralai";
import { createRequire } from "node:module";
import { writeFileSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

// together-ai 0.52's upload helper PUTs a stream without duplex: "half",
// which Node's fetch refuses; the shim adds it (an SDK bug, not the API's).
const nodeFetch = globalThis.fetch;
globalThis.fetch = (url, init) => nodeFetch(url, init?.body && typeof init.body.pipe === "function" ? { ...init, duplex: "half" } : init);
// together-ai's upload helper needs require (its ESM build cannot stat files).
const Together = createRequire(import.meta.url)("together-ai").default;
const root = process.argv[2]; // http://HOST:PORT
const key = "sdk-check-key";
const dir = mkdtempSync(join(tmpdir(), "sdk-check-"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fail = (msg) => { console.error("FAIL " + msg); process.exit(1); };
const lines = (n, model) => Array.from({ length: n }, (_, i) =>
  JSON.stringify({ custom_id: `r-${i}`, body: { model, max_tokens: 50, messages: [{ role: "user", content: `q ${i}` }] } })).join("\n") + "\n";

async function mistral() {
  const m = new Mistral({ apiKey: key, serverURL: root + "/mistral" });
  const f = await m.files.upload({ file: { fileName: "in.jsonl", content: Buffer.from(lines(5, "mistral-small-latest")) }, purpose: "batch" });
  if (!f.id || f.purpose !== "batch" || f.sizeBytes <= 0) fail("mistral upload " + JSON.stringify(f));
  let job = await m.batch.jobs.create({ inputFiles: [f.id], endpoint: "/v1/chat/completions", model: "mistral-small-latest", metadata: { sluice_job: "sdk" } });
  if (job.status !== "QUEUED") fail("mistral create " + JSON.stringify(job));
  for (let i = 0; i < 100 && !["SUCCESS", "FAILED"].includes(job.status); i++) { await sleep(50); job = await m.batch.jobs.get({ jobId: job.id }); }
  if (job.status !== "SUCCESS" || !job.outputFile || job.totalRequests !== 5) fail("mistral job " + JSON.stringify(job));
  const list = await m.batch.jobs.list({ page: 0, pageSize: 10 });
  if (list.total !== 1 || list.data[0].id !== job.id) fail("mistral list " + JSON.stringify(list));
  const stream = await m.files.download({ fileId: job.outputFile });
  const text = await new Response(stream).text();
  const out = text.trim().split("\n").map((l) => JSON.parse(l));
  if (out.length !== 5 || out.some((l) => l.response.status_code !== 200 || l.response.body.object !== "chat.completion")) fail("mistral output " + text);
  const f2 = await m.files.upload({ file: { fileName: "in2.jsonl", content: Buffer.from(lines(3, "m")) }, purpose: "batch" });
  const j2 = await m.batch.jobs.create({ inputFiles: [f2.id], endpoint: "/v1/chat/completions" });
  const c = await m.batch.jobs.cancel({ jobId: j2.id });
  if (c.status !== "CANCELLATION_REQUESTED") fail("mistral cancel " + JSON.stringify(c));
  try { await m.batch.jobs.get({ jobId: "nope" }); fail("mistral 404 accepted"); } catch (e) { if (e.statusCode !== 404) fail("mistral 404: " + e); }
  try { await m.batch.jobs.create({ inputFiles: [f.id], endpoint: "/v1/nope" }); fail("mistral 422 accepted"); } catch (e) { if (e.statusCode !== 422 && e.name !== "HTTPValidationError") fail("mistral 422: " + e); }
  console.log("mistral: upload, create, get, list, download, cancel, 404, 422 ok");
}

async function together() {
  // The upload helper takes its base URL from TOGETHER_API_BASE_URL (run.sh).
  const t = new Together({ apiKey: key, baseURL: root + "/together/v1", maxRetries: 0 });
  const path = join(dir, "in.jsonl");
  writeFileSync(path, lines(6, "meta-llama/Llama-3.3-70B-Instruct-Turbo"));
  const f = await t.files.upload(path, "batch-api", false); // the redirect flow: 302, PUT, retrieve
  if (!f.id || f.bytes <= 0) fail("together upload " + JSON.stringify(f));
  const created = await t.batches.create({ endpoint: "/v1/chat/completions", input_file_id: f.id });
  let job = created.job;
  if (!job || job.status !== "VALIDATING" || typeof created.warning !== "string") fail("together create " + JSON.stringify(created));
  for (let i = 0; i < 100 && !["COMPLETED", "FAILED"].includes(job.status); i++) { await sleep(50); job = await t.batches.retrieve(job.id); }
  if (job.status !== "COMPLETED" || !job.output_file_id) fail("together job " + JSON.stringify(job));
  const list = await t.batches.list();
  if (!Array.isArray(list) || list.length !== 1) fail("together list " + JSON.stringify(list));
  const content = await (await t.files.content(job.output_file_id)).text();
  const out = content.trim().split("\n").map((l) => JSON.parse(l));
  if (out.length !== 6 || out.some((l) => l.response.status_code !== 200)) fail("together output " + content);
  const c2 = await t.batches.create({ endpoint: "/v1/chat/completions", input_file_id: f.id });
  const c = await t.batches.cancel(c2.job.id);
  if (c.status !== "CANCELLED") fail("together cancel " + JSON.stringify(c));
  try { await t.batches.retrieve("nope"); fail("together 404 accepted"); } catch (e) { if (e.status !== 404) fail("together 404: " + e); }
  console.log("together: upload (302, PUT, retrieve), create 201, retrieve, list, content, cancel, 404 ok");
}

await mistral();
await together();

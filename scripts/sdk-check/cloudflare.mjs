// The official Cloudflare TypeScript SDK (`cloudflare` on npm) against
// `sluice emulate`'s Workers AI async batch. The SDK's ai.run percent-encodes
// the model's slashes (@cf%2Fmeta%2F...), which the live API answers 400 code
// 7000 "No route for that URI" (cloudflare-typescript PR 2796,
// cloudflare-python issue 2718): the emulator must answer the same. The
// workaround from those threads, client.post with the path as a plain string,
// must queue, poll and finish a batch. Run by scripts/sdk-check/cloudflare.sh;
// needs node and npm. Not part of CI.
import Cloudflare from "cloudflare";

const root = process.argv[2]; // http://HOST:PORT
const account = "acct";
const model = "@cf/meta/llama-3.3-70b-instruct-fp8-fast";
const embed = "@cf/baai/bge-base-en-v1.5";
const cf = new Cloudflare({ apiToken: "sdk-check-key", baseURL: root + "/client/v4", maxRetries: 0 });
const fail = (msg) => { console.error("FAIL " + msg); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const requests = [{ prompt: "Tell me a joke", external_reference: "ref0" }, { prompt: "no reference", max_tokens: 4 }];

// 1. The SDK's own ai.run: the encoded path is refused as the live API refuses it.
try {
  await cf.ai.run(model, { account_id: account, requests }, { query: { queueRequest: true } });
  fail("ai.run with an encoded model path was accepted");
} catch (e) {
  if (e.status !== 400 || e.errors?.[0]?.code !== 7000 || e.errors[0].message !== "No route for that URI") fail("ai.run: " + e);
  console.log("ai.run (default, %2F): " + e.status + " " + JSON.stringify(e.errors));
}

// 2. The workaround: the path as a plain string keeps the slashes.
const path = (m) => `/accounts/${account}/ai/run/${m}`;
const q = await cf.post(path(model), { body: { requests }, query: { queueRequest: true } });
if (!q.success || q.result?.status !== "queued" || q.result.model !== model || !q.result.request_id) fail("queue " + JSON.stringify(q));
let p = q;
for (let i = 0; i < 100 && p.result?.status; i++) {
  await sleep(50);
  p = await cf.post(path(model), { body: { request_id: q.result.request_id }, query: { queueRequest: true } });
}
const rs = p.result?.responses;
if (!p.success || rs?.length !== 2 || !p.result.usage) fail("final " + JSON.stringify(p));
const byID = Object.fromEntries(rs.map((r) => [r.id, r]));
if (byID[0].external_reference !== "ref0" || !byID[0].success || typeof byID[0].result.response !== "string") fail("item 0 " + JSON.stringify(byID[0]));
if (!("external_reference" in byID[1]) || byID[1].external_reference !== null) fail("item 1 lacks external_reference: null " + JSON.stringify(byID[1]));
console.log("client.post (literal slashes): queued " + q.result.request_id + ", " + rs.length + " responses, external_reference " +
  JSON.stringify(rs.map((r) => r.external_reference)));

// 3. bge-base answers 768-dimension vectors, synchronously through the same form.
const e = await cf.post(path(embed), { body: { text: ["a", "b"] } });
if (e.result?.shape?.[1] !== 768 || e.result.data?.[0]?.length !== 768) fail("bge-base shape " + JSON.stringify(e.result?.shape));
console.log("bge-base-en-v1.5: shape " + JSON.stringify(e.result.shape));
console.log("cloudflare: ok");

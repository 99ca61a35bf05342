// Package emulator is a local, deterministic server for the batch APIs sluice
// drives: OpenAI (and OpenAI-compatible, incl. Azure v1 paths) Files +
// Batches, Anthropic Message Batches, Cloudflare Workers AI async batch,
// the Gemini Developer API's Batch Mode with the Files API, Mistral batch
// jobs, Together batches and xAI batches, all on one
// http.Handler, with a fake model, the providers' real limits and
// fault injection. It is sluice's embedded default provider and the ground
// truth of its integration tests; the facts it follows are in docs/providers.md.
//
// # Routes
//
// OpenAI, under /v1 and /openai/v1 (Azure; "api-key" header accepted):
//
//	POST /files  GET /files  GET /files/{id}  GET /files/{id}/content  DELETE /files/{id}
//	POST /batches  GET /batches  GET /batches/{id}  POST /batches/{id}/cancel
//	POST /chat/completions /completions /embeddings /responses /moderations (direct calls)
//
// Anthropic (base URL without /v1):
//
//	POST /v1/messages/batches  GET /v1/messages/batches  GET /v1/messages/batches/{id}
//	POST /v1/messages/batches/{id}/cancel  DELETE /v1/messages/batches/{id}
//	GET /v1/messages/batches/{id}/results  POST /v1/messages (direct call)
//
// Cloudflare (base URL .../client/v4):
//
//	POST /client/v4/accounts/{account}/ai/run/{model...}
//	  ?queueRequest=true + {"requests":[…]}  queue a batch
//	  {"request_id":…} (with or without queueRequest)  poll it
//	  any other body  run the model once
//
// Mistral (base URL .../mistral, the SDK's server_url; docs/providers/mistral.md):
//
//	POST /mistral/v1/files  GET /mistral/v1/files  GET|DELETE /mistral/v1/files/{id}
//	GET /mistral/v1/files/{id}/content
//	POST /mistral/v1/batch/jobs  GET /mistral/v1/batch/jobs  GET|DELETE /mistral/v1/batch/jobs/{id}
//	POST /mistral/v1/batch/jobs/{id}/cancel
//
// Together (base URL .../together/v1; docs/providers/together.md):
//
//	POST /together/v1/files/upload (multipart, Go SDK)
//	POST /together/v1/files (multipart with the file; or a form without it: 302 to
//	  PUT /together/upload/{id}?signature=…, then POST /together/v1/files/{id}/preprocess)
//	GET /together/v1/files  GET|DELETE /together/v1/files/{id}  GET /together/v1/files/{id}/content
//	POST /together/v1/batches (201 {job, warning})  GET /together/v1/batches (bare array)
//	GET /together/v1/batches/{id}  POST /together/v1/batches/{id}/cancel
//
// xAI (base URL .../xai/v1; docs/providers/xai.md):
//
//	POST /xai/v1/batches {name, input_file_id?}  GET /xai/v1/batches
//	GET /xai/v1/batches/{id}  POST /xai/v1/batches/{id}:cancel (or /cancel)
//	POST|GET /xai/v1/batches/{id}/requests  GET /xai/v1/batches/{id}/results
//	POST|GET /xai/v1/files  GET|DELETE /xai/v1/files/{id}
//
// Mistral states: QUEUED 10%, RUNNING 90%, SUCCESS; past timeout_hours
// TIMEOUT_EXCEEDED; cancel goes CANCELLATION_REQUESTED, then CANCELLED
// BatchTime/10 later. Together: VALIDATING 10%, IN_PROGRESS 90%, COMPLETED;
// EXPIRED after 24 h; cancel ends CANCELLED at once. For both, lines that
// never ran (expired, cancelled) are in no result file; per-line failures
// go to the error file (Mistral: OpenAI output lines with a non-2xx
// status_code; Together: {"custom_id","error":{"message","code"}}).
//
// Gemini (base URL .../gemini, every route under both v1beta and v1 as {v};
// details and decisions in docs/providers/gemini.md):
//
//	POST /gemini/upload/{v}/files  resumable start; with ?upload_id= the
//	  commands upload, "upload, finalize", finalize, query, cancel
//	GET /gemini/{v}/files  GET|DELETE /gemini/{v}/files/{id}
//	GET /gemini/{v}/files/{id}:download?alt=media  GET /gemini/download/{v}/files/{id}:download?alt=media
//	POST /gemini/{v}/models/{model}:batchGenerateContent  (file or inlined requests)
//	POST /gemini/{v}/models/{model}:generateContent  (direct call)
//	GET /gemini/{v}/batches  GET|DELETE /gemini/{v}/batches/{id}  POST /gemini/{v}/batches/{id}:cancel
//
// Direct (synchronous) calls: OpenAI's above, Anthropic's POST /v1/messages,
// Mistral's POST /mistral/v1/chat/completions and /embeddings, Together's
// POST /together/v1/chat/completions and /completions, Gemini's
// :generateContent, Cloudflare's run without queueRequest answer with the same model. Options.SyncDelay delays each answer after the model ran;
// Options.SyncLimit and SyncWindow limit them (not Gemini's or Cloudflare's), announced in
// the family's rate-limit headers. A call naming its request (X-Sluice-Job,
// X-Sluice-Custom-Id) counts in RequestsProcessed and, when that request
// was already executed, in RequestsProcessedMoreThanOnce; every answered
// call counts in SyncRequests.
//
// Emulator: GET /_emulator/stats (JSON Stats; never faulted, no auth) and
// GET /_emulator/info ({"base_urls": {family: URL}}, from Families, the
// table the banner of `sluice emulate` prints too).
// Unknown routes get a 404 in the family's error envelope.
//
// # Lifecycle and time
//
// Everything is evaluated lazily from Options.Now on each call; there are no
// background goroutines, so a fake clock makes runs reproducible. BatchTime
// is split: OpenAI validating 10%, in_progress 80%, finalizing 10%, then
// completed; Anthropic in_progress 100% then ended; Cloudflare queued 10%,
// running 90%; Gemini PENDING 10%, RUNNING 90%. BatchTime 0 means done at the first read after create (the
// create response itself still shows validating / in_progress / queued).
// Lines are processed in a seeded random order; after a fraction f of the
// run, the first f·N lines of that order are done. Result files are written
// in that order, so output order is not input order. A batch still running
// 24 h after create expires. Results are produced at the terminal transition.
//
// A Gemini batch expires 48 h after create, with nothing run and no
// responses file; a Gemini cancel ends the batch at once (CANCELLED), the
// lines run by then answered and the rest absent.
//
// Cancel: from in_progress the batch goes to cancelling / canceling; it ends
// cancelled (Anthropic: ended) BatchTime/10 later (at the next read when
// BatchTime is 0), with the lines done by the cancel time executed and the
// rest cancelled.
//
// # Knobs (Options)
//
//   - BatchTime, Now, Seed, DataDir, Logf: see above and the field docs.
//   - HTTPFaultRate, FaultKinds: share of API calls faulted, with the kind
//     drawn from FaultKinds ("429", "500", "502", "503", "reset"; default
//     all). 429/5xx are answered before the handler runs (no side effect),
//     in the family's envelope; 429 carries Retry-After (whole seconds,
//     rounded up) and retry-after-ms from RetryAfter (default 1s). "reset"
//     runs the handler for real (the batch is created, the file stored) and
//     then sends the status line, headers and half the body and closes the
//     TCP connection with RST: the case crash-safe reconciliation exists for.
//   - SlowRate, SlowDelay: share of calls delayed (wall time, not Now).
//   - ExpireRate, ExpireDoneFraction: share of batches that expire at the end
//     of their run with only that fraction (default 0.5; negative = 0) done;
//     the rest are OpenAI error-file lines with error.code batch_expired,
//     Anthropic results {"type":"expired"}. Not applied to Cloudflare.
//   - ValidationFailRate: share of OpenAI batches failing validation with
//     errors.data code invalid_request (OpenAI only: Anthropic validates at
//     create and Cloudflare has no failed state).
//   - LineErrorRate: share of lines that fail: a quarter 429, a quarter 500
//     (retryable), half 400 (permanent). OpenAI: error-file line with
//     response.status_code and body {"error":{…}}; Anthropic: errored result
//     with rate_limit_error / api_error / invalid_request_error; Cloudflare:
//     success:false with error code 3040 / 3043 / 5004.
//   - OmitRate: share of lines executed (billed, counted) but missing from
//     every result file. They count as completed (OpenAI) / succeeded
//     (Anthropic) in request_counts.
//   - Hostile output, for clients that must not trust what they download
//     (rates are shares, 0..1; fates are pure functions of the seed and the
//     batch id, and line index, except truncation, drawn per download):
//   - MalformedLineRate: share of result lines replaced by a line that is
//     no result: half cut in the middle (not JSON), half JSON without the
//     custom_id. Cloudflare, whose answer is one JSON document, gets a bare
//     JSON string or an item without id and external_reference instead.
//     The request ran (and counts as processed); its result is lost.
//   - UnknownCustomIDRate: share of result lines followed by a copy for a
//     custom_id never sent ("ghost-<hex>"; Cloudflare: that
//     external_reference and an id past the batch's last index).
//   - DuplicateLineRate: share of result lines written twice. The copy of a
//     succeeded line is a retryable error for the same custom_id written
//     before it (OpenAI: an error-file line with status_code 500; Anthropic:
//     errored api_error; Cloudflare: success:false, code 3043), so a client
//     that keeps the first result it reads buys the request again; the copy
//     of any other line is identical.
//   - TruncateDownloadRate: share of result downloads (OpenAI
//     GET /files/{id}/content of batch output and error files, Anthropic
//     results, Cloudflare's final poll answer) answered 200 with the whole
//     body's Content-Length but only its first half, then the connection
//     is dropped: the client sees an unexpected EOF. Each download of the
//     same result draws again.
//   - OutputFile404Rate: share of batches whose results answer 404 although
//     the batch completed: OpenAI GET /files/{output_file_id}/content (the
//     file object and the error file stay), Anthropic results
//     (not_found_error). Not applied to Cloudflare (results come in the
//     poll answer). Their lines ran.
//   - StuckRate, StuckPhase: share of batches that never leave StuckPhase,
//     not even by the 24h expiry, until cancelled. "finalizing" (default):
//     every line ran; OpenAI shows finalizing, Anthropic in_progress,
//     Cloudflare running; a cancel ends it cancelled with every line's
//     result. "validating": nothing ran; OpenAI validating, Anthropic
//     in_progress, Cloudflare queued; a cancel ends it with nothing run
//     (Anthropic: every result canceled). Cloudflare cannot cancel.
//   - ForgetBatchRate: share of batches forgotten right after create
//     answered 200: polls and cancels get 404 (Cloudflare: 400 code 5004,
//     unknown request_id), listings omit them, none of their lines run.
//   - EnqueuedTokenLimit: per model, estimated input tokens (ceil(body
//     bytes/4)) of running batches (in_progress, finalizing, cancelling).
//     OpenAI: checked when validation ends; beyond it the batch ends failed
//     with token_limit_exceeded after create returned 200. Anthropic: create
//     answers 429 rate_limit_error (the model of the first request counts
//     for the whole batch). Not applied to Cloudflare.
//   - MaxRequestsPerBatch (50000), MaxBatchBytes (200 MB), MaxFileBytes
//     (512 MB, upload → 413), AnthropicMaxRequests (100000) and
//     AnthropicMaxBytes (256 MB, both → 413 request_too_large),
//     CloudflareMaxBytes (payload >= 10,000,000 bytes → 413 code 3006).
//   - CloudflareModels, CloudflareAnyModel: the async-capable models
//     (default: those docs/providers.md names). A batch queued for another
//     model is refused (400, code 5007) as the live API refuses it, unless
//     CloudflareAnyModel is set; synchronous runs take any model.
//   - CloudflareItemErrorString: failed item carries "error":"message"
//     instead of "error":{"code":N,"message":…} (shape unconfirmed).
//   - EmbeddingDim: fake embedding size (8), for OpenAI and the Cloudflare
//     embedding models whose size is not known; the bge models answer their
//     real sizes (small 384, base 768, large and m3 1024).
//   - Gemini: GeminiMaxFileBytes (2 GB), GeminiMaxActiveBatches (100
//     batches not ended; create beyond → 429 RESOURCE_EXHAUSTED),
//     GeminiUploadGranularity (8 MiB: chunks but the last are multiples of
//     it; a chunk cut short keeps whole granules), GeminiLineErrorField
//     ("status", or "error"). The other knobs apply to Gemini as to the
//     others: line errors are {"key","status":{"code":8|13|3,"message"}},
//     validation failures end FAILED with the Operation's error,
//     EnqueuedTokenLimit refuses the create with 429, hostile lines lose or
//     change "key", OutputFile404Rate makes the responses file answer 404.
//   - APIKey: when set, OpenAI needs "Authorization: Bearer KEY" or
//     "api-key: KEY" (else 401 code invalid_api_key), Anthropic "x-api-key"
//     (else 401 authentication_error) plus "anthropic-version" (else 400),
//     Cloudflare Bearer (else 401 code 10000), Gemini x-goog-api-key or
//     ?key= (wrong: 400 INVALID_ARGUMENT, reason API_KEY_INVALID; missing:
//     403 PERMISSION_DENIED). When empty, any key goes; but a Cloudflare
//     call that carries none (no Authorization, nor X-Auth-Key with
//     X-Auth-Email) is 400 code 9106 either way, as the live API answers.
//
// # Validation (OpenAI)
//
// Create answers 400 for a bad request (missing fields, endpoint not in the
// enum, completion_window other than "24h", metadata over 16 pairs / 64 /
// 512 characters), 404 for an unknown file. The input file is checked while
// validating; the batch then ends failed with errors.data entries (at most
// 100) carrying the 1-based line: invalid_json_line, url_mismatch,
// duplicate_custom_id, model_mismatch, invalid_request (missing custom_id or
// body.model, method not POST, body not an object), and with line null:
// empty_file, too_many_tasks, file_too_large. "/chat/completions" (Azure
// style, no /v1) is accepted as an endpoint and as a line url.
//
// # Fake model
//
// Pure function of the request body (plus the created timestamp where the
// object has one): a chat answer is "echo: " + the first 40 characters of
// the last user message reversed, cut to max_tokens (finish_reason length /
// stop_reason max_tokens). Usage is honest for that text: ceil(bytes/4) of
// the prompt text (all messages, system/instructions) and of the answer.
// Embeddings are unit vectors hashed from (model, input). Cloudflare LLMs
// answer {"response":…}; bge-* {shape,data}; bge-m3 {query,contexts} one
// {id,score} per context, {contexts} alone the contexts' vectors as
// {response,shape}; m2m100 {translated_text}. Unimplemented OpenAI
// endpoints (images, videos) give per-line 400s.
//
// # Stats and duplicate execution
//
// RequestsProcessed counts executed lines (succeeded, per-line error,
// omitted, malformed, in a lost file; not lines left expired or cancelled).
// LinesSucceeded counts the successes delivered intact in a result file
// that can be downloaded, so a client that keeps every success exactly once
// reports as many; LinesMalformed, LinesLost, LinesDuplicated and
// LinesUnknown count what the hostile knobs did, DownloadsTruncated,
// BatchesStuck and BatchesForgotten likewise. RequestsProcessedMoreThanOnce
// counts each execution of a (family, job, custom_id) after the first. The
// job is the OpenAI batch metadata "sluice_job", else the input filename up
// to its last "-c<digits>" (sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl), else ""
// (Mistral: its metadata, else its last input file's name; Together: its
// input file's name);
// Anthropic uses "" (custom_ids are job-wide), Cloudflare the item's
// external_reference (items without one are not tracked), Gemini the batch
// displayName up to its last "-c<digits>" with the line's key.
//
// # Persistence
//
// With DataDir, file and batch metadata are JSON files written atomically
// (temp + rename + fsync), contents and results are files beside them, the
// id counter and Stats are in state.json, the processed set is appended to
// processed.bin. A new Server on the same directory continues where the old
// one stopped; faults counters may lag by the calls made since the last
// state save.
//
// # Decisions on unconfirmed ([U]) points
//
//   - Batch lists are newest first.
//   - request_counts.failed includes expired and cancelled lines; total is 0
//     while validating and after a validation failure.
//   - Cancelling an OpenAI batch: from validating it ends cancelled with
//     nothing run and no files; from finalizing every line counts as done;
//     unexecuted lines of a cancelled batch are error-file lines with code
//     batch_cancelled. Cancelling a terminal batch is a 400 (both families);
//     cancelling a cancelling batch returns it unchanged.
//   - Output/error files exist only when they have at least one line.
//   - Anthropic: >100000 requests is 413 request_too_large like the size
//     limit; invalid params at create are 400s; results of a batch that has
//     not ended, and deleting it, are 400 invalid_request_error.
//   - Cloudflare: item schema violations are refused at submit (400, 5004;
//     the checks follow the model schemas, refusing only what every
//     published schema of the model refuses: see cloudflare_schema.go);
//     an unknown request_id polls to 400, 5004; a batch that outlives 24 h
//     yields success:false items with code 3007. A /client/v4 path with a
//     percent-encoded slash (the official SDKs' default for the model) is
//     answered 400 code 7000 "No route for that URI", before the token is
//     checked, as the live API does; every response item carries
//     external_reference, null when the request had none.
package emulator

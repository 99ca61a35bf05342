// Package splitter turns one input file of batch requests into chunk files
// that each fit one provider batch, and records every request and chunk in
// a plan sink (the tracker).
//
// # Input
//
// One request per line in the OpenAI batch input format (see docs/contract.md),
// plain, gzip or zstd, told by the first bytes of the file, not its name.
// Lines end in "\n"; a "\r" before it is dropped (CRLF files). A UTF-8 byte
// order mark at the start of the file is skipped. Blank lines (empty, or
// spaces, tabs and "\r" only) are skipped but counted, so line numbers are
// those of an editor. Lines longer than MaxLineBytes (64 MiB) are rejected
// without being held in memory.
//
// Split streams: it never holds the file. One goroutine reads,
// decompresses and hashes the raw bytes (xxh3-128, for the Fingerprint)
// and cuts blocks of whole lines; GOMAXPROCS workers validate lines and
// encode their wire items; one goroutine takes the blocks back in input
// order, checks custom_id uniqueness, gives ordinals and writes chunk
// files; one more feeds the sink (SQLite) so it works beside the writer.
// Output is deterministic: the same input, codec and limits give the same
// chunk files and rows.
//
// Memory stays flat (peak RSS measured with the real tracker, SQLite's
// 32 MiB page cache included: 97 MB for 1 GB / 0.5 million requests,
// 128 MB for 4 GB / 2 million): at most 2*GOMAXPROCS+4 blocks of 1 MiB in
// flight, 32 open chunk files with 256 KiB buffers, at most 16 batches of
// 512 request rows queued for the sink, and the custom_id filter (~8 bytes
// per request); with Config.KeyScope, a filter of the same kind on request
// bodies (~6 bytes per request) and a map of the bodies that repeat (see
// reuse.go).
//
// # Money
//
// In the same pass the scanner reads body.max_tokens,
// max_completion_tokens and max_output_tokens, summed per chunk as the
// upper bound of its output, and (with Config.KeyScope) each request gets
// its key in the ledger of bought answers (bodykey.go); with Config.Reuse
// requests already answered in an earlier job are taken from there instead
// of going into a chunk (reuse.go, docs/money.md).
// While Split runs it sets a soft Go memory limit of 96 MiB
// (debug.SetMemoryLimit) unless the process has its own (GOMEMLIMIT).
//
// # Validation
//
// Every line is checked in one pass by a hand-written scanner (see scan.go
// for why not gjson): the JSON grammar exactly as encoding/json.Valid has
// it, UTF-8, and the fields. The first problem of a line decides its
// reason. In the default mode Split stops at the first bad line with a
// *LineError, whose Error() is
//
//	FILE:LINE: custom_id "ID": REASON
//
// (without the custom_id part when it is not known). With SkipInvalid each
// bad line goes to the rejects file as one JSON line
// {"line":N,"custom_id":"ID","reason":"REASON","raw":"THE LINE"} (custom_id
// left out when unknown; raw is the line as a JSON string, invalid UTF-8
// bytes replaced by U+FFFD, cut to 1 KiB for over-long lines), and to
// DIR/rejected.results (RejectedResults) as a results record for the
// merge, and Split goes on: no line is dropped (the merger puts each in
// the errors file, and with a custom_id in the output, in its input
// place, with code invalid_request). The output holds a custom_id once:
// a rejected line whose custom_id an earlier line (valid or rejected)
// holds there is recorded with a null custom_id (errors file only), and a
// valid line after a rejected one of the same custom_id is a duplicate.
// Reasons, in the order they are checked (N is a 1-based byte column):
//
//	line is longer than 67108864 bytes
//	invalid UTF-8 at column N
//	control character U+00XX in a string at column N (must be escaped)
//	truncated JSON: the line ends before the JSON value is complete
//	invalid JSON at column N: unexpected character 'C'
//	invalid JSON at column N: invalid literal "W" (want true, ...)     (a bare word like this)
//	invalid JSON at column N: invalid escape sequence "\C" in a string
//	invalid JSON at column N: invalid escape sequence in a string       (bad \uXXXX)
//	invalid JSON at column N: nesting deeper than 10000 levels
//	unexpected data after the JSON object at column N
//	unexpected data after the JSON value at column N                    (a non-object line)
//	line is not a JSON object (got an array|a string|a number|a boolean|null)
//	duplicate key "custom_id"|"method"|"url"|"body"|"body.model"
//	missing custom_id
//	custom_id must be a string, got TYPE
//	custom_id is empty
//	missing method
//	method must be "POST", got VALUE
//	missing url
//	url must be a string, got TYPE
//	missing body
//	body must be a JSON object, got TYPE
//	body.model must be a string, got TYPE
//	body.model is empty
//	PROVIDER REASON                     (the text of Codec.Validate's error, e.g.)
//	  url "/v1/x" is not a batch endpoint of provider P (accepted: ...)[; it is an anthropic url: ...]
//	  custom_id "a b" does not match Anthropic's ^[a-zA-Z0-9_-]{1,64}$
//	  body.max_tokens must be a number >= 1 for Anthropic
//	  body.messages must be an array for Anthropic
//	  url /ai/run needs body.model or --model
//	  body.external_reference is set, but sluice sends custom_id there
//	missing body.model (and no --model given)
//	cannot encode the request for the provider: ERROR
//	request is N bytes on the provider's wire, over the batch limit of M bytes
//	request has about N input tokens, over the batch limit of M tokens
//	duplicate custom_id, first seen on line N
//
// Syntax errors found after custom_id was read still name it. Keys are
// matched exactly (encoding/json would match "Custom_ID" to a struct field;
// we do not); other top-level keys are allowed and passed on. Duplicate
// keys: gjson's Get returns the first of duplicate keys and encoding/json
// keeps the last, so a provider may read another model than we grouped by;
// the splitter therefore rejects a repeated custom_id, method, url, body or
// body.model key (other duplicates inside body are passed on as they are).
//
// Errors that are not about one line: an input with no valid request
// ("FILE: no requests: the input is empty", or "...: all N non-blank lines
// were rejected (see REJECTS)", both wrapping ErrNoRequests); a cut or
// corrupt compressed file ("FILE: zstd stream is truncated or corrupt after
// line N: ERROR", where N is the last whole line read, wrapping
// ErrCorrupt); read errors.
//
// # Uniqueness of custom_id
//
// An idSet keeps 48 bits of each custom_id's xxh3 hash (~6 bytes per id:
// ~25 MB for 4 million). A hit is confirmed against the sink (FindCustomID,
// a SQLite lookup, once the rows on their way there are recorded) before
// the line is called a duplicate, so a hash collision never rejects a good
// line.
//
// # Chunks
//
// Requests are grouped by (url, model); each group has one open chunk file
// at a time (chunks/.open-c000001, renamed to chunks/c000001-a1.jsonl, or
// .json for enveloped formats, when it closes). A chunk gets its id when it
// opens (1, 2, 3... in order of opening). It is closed when the next
// request of its group would push it over MaxBatchBytes (the wire size:
// Envelope().Size, envelope included), MaxBatchRequests or the chunk's
// token limit, Limits.ChunkTokens (MaxBatchTokens, and at most 80% of
// MaxEnqueuedTokens, so a chunk always fits the budget it is admitted
// under: limits.go says why 80%);
// Chunk.Bound names that limit ("bytes", "requests", "tokens") or "end"
// for the last chunk of a group, closed at the end of the input. Each
// request's row (ordinal, line, custom_id, chunk, index and byte
// offset/length of its item in the chunk file, estimated tokens) goes to
// the sink as soon as the request is placed, in batches of 512 through a
// bounded queue, so SQLite works while the input is read and memory stays
// flat whatever the limits. A closed chunk's file is fsynced and renamed
// beside that (at most 4 at once) and the chunk goes to the sink; Split
// returns once every file is synced. At most 32 chunk files are held open;
// more groups reopen theirs in turn.
//
// # Token estimate
//
// EstimateTokens counts the text of body's string values, except values of
// keys holding identifiers, enums or payloads rather than prose (model,
// role, type, url, id, tool_call_id, user, detail, encoding_format,
// service_tier, media_type, data, image_url, reasoning_effort), by class as
// the validator scans it (8 bytes at a time for ASCII): ASCII letters,
// spaces and the rest (digits, punctuation, escapes), accented Latin
// letters, other two-byte scripts (Greek, Cyrillic, Hebrew, Arabic), the
// scripts of India and Thai, CJK/kana/Hangul, and emoji. Each class has a
// rate fitted against OpenAI's o200k_base tokenizer (estimate.go); claude*
// models get 15% more (not measured: Anthropic's tokenizer is not public). Add 4 tokens per message and 3 per request, as
// OpenAI's counting recipe does. Measured against the exact tokenizer
// (TestEstimateTokensAgainstTokenizer, testdata/tokens: prose, requests,
// code and a table in eleven languages): mean error 6.6% (bytes/4: 36%),
// each sample within 25% but a table of numbers (35% under; bytes/4: 39%
// under). Image and base64 payloads are not estimated.
package splitter

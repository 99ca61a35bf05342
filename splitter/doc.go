// Package splitter turns one input file of batch requests into chunk files
// that each fit one provider batch, and records every request and chunk in
// a plan sink (the tracker).
//
// # Input
//
// One request per line in the OpenAI batch input format (see DESIGN.md),
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
// Memory stays flat (peak RSS measured with the real tracker: 75 MB for
// 1 GB / 0.5 million requests, 102 MB for 4 GB / 2 million, 103 MB for
// 2 GB / 4.3 million short requests): at most 2*GOMAXPROCS+4 blocks
// of 1 MiB in flight, 32 open chunk files with 256 KiB buffers, pending
// rows capped at 16 MB, and the custom_id filter (~8 bytes per request).
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
// bytes replaced by U+FFFD, cut to 1 KiB for over-long lines) and Split
// goes on. Reasons, in the order they are checked (N is a 1-based byte
// column):
//
//	line is longer than 67108864 bytes
//	invalid UTF-8 at column N
//	control character U+00XX in a string at column N (must be escaped)
//	truncated JSON: the line ends before the JSON value is complete
//	invalid JSON at column N: unexpected character 'C'
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
//	  url "/v1/x" is not a batch endpoint of this provider (accepted: ...)
//	  custom_id "a b" does not match Anthropic's ^[a-zA-Z0-9_-]{1,64}$
//	  body.max_tokens must be a number >= 1 for Anthropic
//	  body.messages must be an array for Anthropic
//	  url /ai/run needs body.model or --model
//	  body.external_reference is set, but sluice sends custom_id there
//	missing body.model (and no job model is set)
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
// line N: ERROR", where N is the last whole line read); read errors.
//
// # Uniqueness of custom_id
//
// An idSet keeps 48 bits of each custom_id's xxh3 hash (~6 bytes per id:
// ~25 MB for 4 million). A hit is confirmed against the rows of open chunks
// and then the sink (FindCustomID, a SQLite lookup) before the line is
// called a duplicate, so a hash collision never rejects a good line.
//
// # Chunks
//
// Requests are grouped by (url, model); each group has one open chunk file
// at a time (chunks/.open-*, renamed to chunks/c000001-a1.jsonl, or .json
// for enveloped formats, when it closes). A chunk is closed when the next
// request of its group would push it over MaxBatchBytes (the wire size:
// Envelope().Size, envelope included), MaxBatchRequests or MaxBatchTokens;
// Chunk.Bound names that limit ("bytes", "requests", "tokens") or "end"
// for the last chunk of a group, closed at the end of the input in order
// of the groups' first lines. A closed chunk is fsynced, gets the next id
// (1, 2, 3... in order of closing), and goes to the sink with its request
// rows (ordinal, line, custom_id, index and byte offset/length of its item
// in the chunk file, estimated tokens). Request rows wait in a compact
// buffer until their chunk's id is known; past 16 MB they spill to a file
// beside the chunk, so memory stays flat whatever the limits. At most 32
// chunk files are held open; more groups reopen theirs in turn.
//
// # Token estimate
//
// EstimateTokens counts the text of body's string values, except values of
// keys holding identifiers, enums or payloads rather than prose (model,
// role, type, url, id, tool_call_id, user, detail, encoding_format,
// service_tier, media_type, data, image_url, reasoning_effort): ASCII bytes
// divided by bytes-per-token (4.0, or 3.5 for claude* models), rounded up,
// plus 1 token per non-ASCII character (2 outside the BMP, e.g. emoji),
// plus 4 per message (each "role" key) and 3 per request. JSON escapes
// count as the character they stand for. Image and base64 payloads are not
// estimated. It is calibrated by hand on a few examples (see
// TestEstimateTokens), not yet against an exact tokenizer on a sample.
package splitter

package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Batch is what a provider says about one batch.
type Batch struct {
	ID             string
	Status         BatchStatus
	ProviderStatus string // the provider's own word, verbatim
	OutputFileID   string
	ErrorFileID    string
	Errors         []BatchError // batch-level errors (validation, token_limit_exceeded)
	Total          int
	Completed      int
	Failed         int
	// ResultsExpireAt is when the provider says the ended batch's results
	// expire (OpenAI: its output file's expires_at); zero when it did not.
	ResultsExpireAt time.Time
}

// BatchError is one batch-level error as the provider reports it.
type BatchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`
}

// QueueFull reports whether the batch failed only because the provider's
// enqueued-token queue was full: resubmit later, without spending an attempt.
func (b *Batch) QueueFull() bool {
	if b.Status != BatchFailed || len(b.Errors) == 0 {
		return false
	}
	for _, e := range b.Errors {
		if ErrorCode(e.Code) != CodeQueueFull {
			return false
		}
	}
	return true
}

// Usage is token usage as the provider reports it.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// ResultKind says what a request's result means for the job.
type ResultKind int

const (
	// ResultSucceeded: a 2xx answer from the endpoint.
	ResultSucceeded ResultKind = iota
	// ResultFailed: failed for good (4xx from the endpoint): final.
	ResultFailed
	// ResultRetryable: expired, cancelled, 429 or 5xx: try again in the next
	// attempt while attempts remain.
	ResultRetryable
)

func (k ResultKind) String() string {
	switch k {
	case ResultSucceeded:
		return "succeeded"
	case ResultFailed:
		return "failed"
	case ResultRetryable:
		return "retryable"
	}
	return fmt.Sprintf("ResultKind(%d)", int(k))
}

// Result is one request's result, already in the canonical output shape.
// A Result handed to a callback by Provider.Decode or
// ResultStreamer.StreamResults may lend its bytes (a response's Body) from
// the provider's read buffer, valid until the callback returns: a caller
// that keeps a Result keeps Owned().
type Result struct {
	CustomID string
	Kind     ResultKind
	Line     OutputLine
	Usage    Usage
}

// Owned returns r with its own copy of the bytes a provider may have lent
// it (the response and its Body), marked compact as r's were.
func (r Result) Owned() Result {
	if resp := r.Line.Response; resp != nil {
		cp := *resp
		cp.Body = bytes.Clone(resp.Body)
		cp.compact = nil
		if resp.MarkedCompact() {
			cp.MarkCompact()
		}
		r.Line.Response = &cp
	}
	return r
}

// Provider is one batch API. The dispatcher drives it; each client retries
// its own HTTP calls and keeps a client-side rate limit (provider/httpx). Every method that creates something at the
// provider names it after ref (upload filename, batch metadata, external
// reference) so that Find can adopt it after a crash.
type Provider interface {
	// Name is the provider's name as given to --provider.
	Name() string
	// Codec is the wire format of its chunk files.
	Codec() Codec
	// Limits are its default limits.
	Limits() Limits
	// Capabilities says how its batch API works where the dispatcher and
	// the commands must tell providers apart.
	Capabilities() Capabilities
	// Upload streams the chunk file to the provider and returns its file id.
	Upload(ctx context.Context, ref BatchRef) (fileID string, err error)
	// Create starts a batch: from fileID when Capabilities().Files, else by sending
	// the chunk file as the body.
	Create(ctx context.Context, ref BatchRef, fileID string) (Batch, error)
	// Poll returns the batch's current state.
	Poll(ctx context.Context, ref BatchRef, batchID string) (Batch, error)
	// Fetch downloads the results of an ended batch into dir (each file
	// written to a temp name and renamed) and returns their paths.
	Fetch(ctx context.Context, ref BatchRef, b Batch, dir string) ([]string, error)
	// Decode reads fetched result files and calls fn once per result line
	// (its Result's bytes valid until fn returns: Result.Owned). lookup
	// maps a position in the chunk to its custom_id, for providers that
	// answer by position.
	Decode(ctx context.Context, ref BatchRef, files []string, lookup func(index int) (string, bool), fn func(Result) error) error
	// Cancel asks the provider to cancel the batch.
	Cancel(ctx context.Context, batchID string) (Batch, error)
	// Find looks, at the provider, for the file and the batch a previous run
	// made for ref. Empty strings mean not found. Providers without listings
	// return ErrNoListing.
	Find(ctx context.Context, ref BatchRef) (fileID, batchID string, err error)
	// Forget deletes provider-side files made for ref that are no longer
	// needed (best effort; may be a no-op).
	Forget(ctx context.Context, ref BatchRef, fileIDs ...string) error
}

// ResultStreamer is a Provider that can read an ended batch's results
// straight from the download, line by line as they arrive, instead of
// Fetch writing them to files that Decode reads back (docs/architecture.md,
// "Results in parallel"). The dispatcher uses it when StreamsResults(ref)
// says so, else Fetch and Decode.
type ResultStreamer interface {
	// StreamsResults reports whether the results of ref's batch are read
	// by StreamResults (a provider routing by ref may say no for some).
	StreamsResults(ref BatchRef) bool
	// StreamResults downloads b's results and calls fn once per result, as
	// Decode would for the files Fetch writes: the same results, in the
	// same order, and lines that do not parse skipped and returned as a
	// *MalformedLines. An error of fn is returned as is; any other error is
	// a failed download, as Fetch's would be. A download that breaks after
	// fn was given some of its lines is not repeated (fn is never given a
	// line twice): its error matches ErrStreamBroken. Whatever fn was given
	// before an error must be discarded. As with Decode, a Result's bytes
	// are valid until fn returns (Result.Owned).
	StreamResults(ctx context.Context, ref BatchRef, b Batch, lookup func(index int) (string, bool), fn func(Result) error) error
}

// ErrStreamBroken is matched (errors.Is) by a streamed download that broke
// (a reset, a body cut short) after part of it was handed on: the reader
// must discard what it got and start over.
var ErrStreamBroken = errors.New("the download broke after part of it was read")

var (
	// ErrNoListing: the provider cannot list what was created, so a crashed
	// create cannot be reconciled.
	ErrNoListing = errors.New("provider has no listing to reconcile against")
	// ErrNotFound: the provider does not know the id.
	ErrNotFound = errors.New("not found at provider")
	// ErrUnreachable: no call to the provider got any answer (every
	// connection failed) for longer than the client's retry budget
	// (--http-max-wait): the network or the base URL is wrong, and retrying
	// on the poll schedule would only wait for ever.
	ErrUnreachable = errors.New("provider unreachable")
	// ErrUnsettled: a call that creates something (an upload, a create) may
	// have taken effect at the provider, its answer was lost, and the
	// lookup that would have told failed too. The caller must look again
	// before repeating the call, or it may buy the same batch twice.
	ErrUnsettled = errors.New("the call may have taken effect at the provider")
)

// APIError is a non-2xx answer of a provider's API.
type APIError struct {
	Status     int    // HTTP status
	Code       string // provider's error code or type
	Message    string
	RetryAfter string // the Retry-After header, verbatim
}

func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// Retryable reports whether the call may succeed if repeated
// (RetryableStatus).
func (e *APIError) Retryable() bool { return RetryableStatus(e.Status) }

// RetryableStatus is the one rule for provider calls: an answer with this
// HTTP status may succeed if the call is repeated: 408, 409, 429 and 5xx.
// The HTTP layer retries those (provider/httpx), and the dispatcher
// repeats a step that failed with one on its schedule. (A request's own
// result line is classified apart, by provider.StatusKind: there a 409 is
// the endpoint's verdict on the request.)
func RetryableStatus(code int) bool {
	return code == 408 || code == 409 || code == 429 || code >= 500
}

// Retryable reports whether a failed provider call may succeed when
// repeated: an answer with a RetryableStatus, or a broken connection (a
// net.Error), after the HTTP layer's own retries. An endpoint that
// answered nothing for the whole retry budget (ErrUnreachable), any other
// answer, and errors that are not the provider's are not.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrUnreachable) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Retryable()
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Capabilities are the ways providers' batch APIs differ that the
// dispatcher and the commands act on: one value per provider, instead of
// one optional interface per difference.
type Capabilities struct {
	// Files: a batch is created from an uploaded file (OpenAI family,
	// Gemini, Mistral, Together), so a chunk is uploaded before its batch
	// is created and its file is deleted once the job is done; otherwise
	// the chunk file itself is the create call's body.
	Files bool
	// Untagged: its batches carry nothing that names the chunk they came
	// from (Anthropic has no batch metadata). The dispatcher then creates
	// their batches one at a time, so a crash can leave at most one batch
	// that no chunk records, and Find can adopt it by time and size without
	// guessing between several.
	Untagged bool
	// UsagePerBatch: usage is reported for the whole batch rather than per
	// request (Cloudflare, on one of its results): what the usage is
	// compared with is then sluice's estimate of every request the batch
	// answered (docs/money.md).
	UsagePerBatch bool
	// LivePerModel: the provider's quota of batches submitted or running
	// is per model (Bedrock's concurrent jobs), so Limits.MaxLiveBatches
	// counts each model's batches apart.
	LivePerModel bool
}

// RealtimeCaller is a provider that can answer one request of a chunk
// through its synchronous API: the realtime fallback (--fallback realtime,
// docs/money.md). item is the request's item as the chunk file holds it
// (the wire line of a batch). The answer is the request's Result, as a
// batch line would have given it: a 2xx succeeded, a 408, 429 or 5xx after
// the HTTP layer's retries retryable, any other status failed. An error
// means there is no answer: ErrUnsettled when the call may have been
// answered at the provider (a connection lost after the body was sent),
// which is never repeated; any other error (the context, bad credentials,
// an item that is not a request) stops the fallback.
type RealtimeCaller interface {
	CallRealtime(ctx context.Context, ref BatchRef, item []byte) (Result, error)
}

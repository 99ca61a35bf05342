package sluice

import (
	"errors"
	"fmt"
	"time"
)

// ErrorCode is a machine-readable reason a request or a batch attempt
// failed. The codes below are part of sluice's output contract
// (docs/contract.md): scripts match on them, so a code is never renamed.
//
// A code reaches the user in two places:
//   - the output and errors files, as "error": {"code": ...} of a request
//     that failed for good without an HTTP answer of the endpoint
//     (OutputLine.Error). Codes a provider reports for a single request
//     (OpenAI's own batch_expired, say) and the codes of a provider's
//     batch-level errors pass through verbatim, so other values than these
//     constants may appear there;
//   - `sluice status --json` and `status JOB --chunks`, as the code of a
//     chunk's last error and of each recorded AttemptError.
//
// The constants marked "status only" are never written to an output line.
type ErrorCode string

const (
	// CodeBatchExpired: the provider's batch expired (its completion window
	// ended) before this request ran. Retryable: the request goes to the
	// next attempt while attempts remain. Anthropic's "expired" result is
	// reported with this code; OpenAI-compatible providers send it
	// themselves.
	CodeBatchExpired ErrorCode = "batch_expired"
	// CodeBatchCancelled: the batch was cancelled at the provider before
	// this request ran (by `sluice cancel`, or by sluice when the batch was
	// stuck, or by someone else). Retryable unless the job was cancelled.
	CodeBatchCancelled ErrorCode = "batch_cancelled"
	// CodeMissingResult: the batch ended but the provider's output had no
	// result (or no readable result) for this request, on every attempt.
	CodeMissingResult ErrorCode = "missing_result"
	// CodeBatchStuck: the batch did not end within the stuck bound after it
	// was submitted (stuck in validating or finalizing, say, or could not be
	// polled); sluice cancelled it, kept what it finished, and this request
	// got no result on its last attempt.
	CodeBatchStuck ErrorCode = "batch_stuck"
	// CodeRealtimeUnknown: the realtime fallback sent this request through
	// the provider's synchronous API and its answer was lost (the run was
	// killed mid-call, or the connection broke after the request was
	// sent). The provider may have answered, and charged, it; sluice never
	// sends it again, so it fails instead of being bought twice.
	CodeRealtimeUnknown ErrorCode = "realtime_unknown"
	// CodeBatchNotFound: the provider no longer knew the batch when polled:
	// its requests were never answered.
	CodeBatchNotFound ErrorCode = "batch_not_found"
	// CodeBatchFailed: the provider failed the batch without saying why. When
	// it does say why, its own first error code is used instead.
	CodeBatchFailed ErrorCode = "batch_failed"
	// CodePollRefused: the provider refused to report the batch's status for
	// good (a 4xx other than 404, 408, 409, 429) on every poll up to the
	// fetch-failure bound.
	CodePollRefused ErrorCode = "poll_refused"
	// CodeResultsUnavailable: the batch ended but its results could not be
	// downloaded (an output file that 404s, a download cut short) on every
	// poll up to the fetch-failure bound.
	CodeResultsUnavailable ErrorCode = "results_unavailable"
	// CodeResultsExpired: the batch ended but its results were gone when
	// fetched (404) past the time the provider's retention lets them go
	// (docs/providers.md, "Results expire"): its requests go to the next
	// attempt like any batch without results, and fail with this code when
	// attempts are spent.
	CodeResultsExpired ErrorCode = "results_expired"
	// CodeResultsUnreadable: the batch's results were downloaded but could
	// not be read, on every poll up to the fetch-failure bound.
	CodeResultsUnreadable ErrorCode = "results_unreadable"
	// CodeInvalidRequest: the provider refused the chunk's upload or batch
	// create for good (a 4xx other than 401, 403, 408, 409, 429): the body
	// as sent will never be accepted. Also the code of an input line that
	// --skip-invalid rejected (error.line is its line number; see
	// splitter.RejectedLine).
	CodeInvalidRequest ErrorCode = "invalid_request"
	// CodeCancelled: the job was cancelled (`sluice cancel`) before this
	// request was submitted.
	CodeCancelled ErrorCode = "cancelled"
	// CodeUntranslatableResponse: the provider answered a translated
	// /v1/chat/completions line with a 2xx whose body is not its response
	// shape, so it cannot be given as a chat.completion
	// (docs/translation.md). Final: asking again would get the same.
	CodeUntranslatableResponse ErrorCode = "untranslatable_response"

	// CodePollFailed (status only): a poll failed for a reason that may pass
	// (the network, a 5xx, a 429 after the HTTP layer's retries); it is
	// repeated on the poll schedule.
	CodePollFailed ErrorCode = "poll_failed"
	// CodeUploadFailed (status only): an upload failed for a reason that may
	// pass, or for bad credentials (401/403, which stop the run); the chunk
	// is uploaded again later.
	CodeUploadFailed ErrorCode = "upload_failed"
	// CodeCreateFailed (status only): a batch create failed for a reason
	// that may pass, or for bad credentials (401/403, which stop the run);
	// the batch is created again later.
	CodeCreateFailed ErrorCode = "create_failed"
	// CodeQueueFull: the provider failed the batch only because its queue
	// of enqueued tokens for the model was full. The chunk is submitted
	// again once sluice's own batches of that model drain, without spending
	// an attempt (status). A batch refused so while it was the job's only
	// batch of its model is over the limit by itself: it is split, its
	// chunk failed with this code and its requests moved to smaller chunks
	// (status; dispatcher/split.go). A chunk of one request cannot be: after
	// dispatcher.Options.MaxQueueRefusals such refusals its request fails
	// with this code (output lines).
	CodeQueueFull ErrorCode = "token_limit_exceeded"
	// CodeProviderOutput (status only): the batch's results were read, but
	// the provider's output was not as it should be (malformed lines,
	// results for custom_ids not in the batch, duplicates). The message
	// counts each anomaly; requests without a result were retried or failed
	// with CodeMissingResult.
	CodeProviderOutput ErrorCode = "provider_output"
	// CodeBelowMinimum: the requests left to retry of a batch were fewer
	// than the provider's minimum of requests per batch
	// (Limits.MinBatchRequests, Bedrock's minimum records per job), and
	// no other retries of the model could join them to reach it (they
	// wait for them while a batch of the model is unfinished): a
	// batch of them would be refused, so they are not sent and fail for
	// good (the message gives both numbers), unless --fallback realtime
	// sends them through the synchronous API. Run them again in a job with
	// enough other requests of the model, or on a provider without a
	// minimum.
	CodeBelowMinimum ErrorCode = "below_minimum_batch"
)

// AttemptError is one error recorded for one attempt of a chunk: every
// time the dispatcher records a new error for a chunk (a failed poll, a
// refused create, a stuck batch, a failed attempt), the tracker keeps it as
// a row, in the same transaction as the chunk's update. The chunk itself
// keeps only its last error.
type AttemptError struct {
	Job     string    `json:"job"`
	Chunk   int64     `json:"chunk"`
	Attempt int       `json:"attempt"`
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// SetError records err as the chunk's last error: code and message. The
// tracker keeps it as an AttemptError when the chunk is next written.
func (c *Chunk) SetError(code ErrorCode, msg string) {
	c.ErrorCode, c.LastError = code, msg
}

// ClearError forgets the chunk's last error (the step it was about has
// since succeeded). Recorded AttemptErrors stay.
func (c *Chunk) ClearError() { c.ErrorCode, c.LastError = "", "" }

// ErrorText is the chunk's last error as one line for people: "code:
// message", or the message alone when it has no code.
func (c *Chunk) ErrorText() string {
	if c.ErrorCode == "" {
		return c.LastError
	}
	return string(c.ErrorCode) + ": " + c.LastError
}

// Codes of a command's failure as a whole (wtf's error codes): what kind of
// end a run, a plan or a cancel came to. cmd/sluice maps each to its exit
// status in one table (docs/contract.md, "Exit codes"); they never reach
// an output line.
const (
	// CodeInternal: an error stopped the command (exit 1): the network, a
	// full disk, a bad key, a lock held elsewhere. Every error without a
	// code has it.
	CodeInternal ErrorCode = "internal"
	// CodeInvalid: bad usage or bad input (exit 2).
	CodeInvalid ErrorCode = "invalid"
	// CodeStopped: stopped with work left (exit 3): a deadline, --once, a
	// signal, the spend cap.
	CodeStopped ErrorCode = "stopped"
	// CodeFailures: finished and the output written, but some requests
	// failed for good or some lines were rejected (exit 4).
	CodeFailures ErrorCode = "failures"
)

// Error is a failure with a code (wtf's Error{Code, Message}): Err says
// what went wrong, Code what kind of end it makes. An Error without Err
// is an end without a message (the summary printed said it all).
type Error struct {
	Code ErrorCode
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Code)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode is the error's code: what Code of its chain says.
func (e *Error) ErrorCode() ErrorCode { return e.Code }

// Errorf is an Error of code with a message.
func Errorf(code ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// WithCode gives err the code (nil stays nil).
func WithCode(code ErrorCode, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Coder is an error that says its code: *Error, and the errors of other
// packages that name their kind (a bad input line, say).
type Coder interface {
	error
	ErrorCode() ErrorCode
}

// ErrorCodeOf is the code of err (wtf's ErrorCode): that of the first
// Coder in its chain, CodeInternal for an error without one, "" for nil.
func ErrorCodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var c Coder
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return CodeInternal
}

// Silent reports whether err is an end without a message: an Error whose
// code is all there is to say.
func Silent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Err == nil
}

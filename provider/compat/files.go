// Package compat is the kit of the OpenAI-compatible batch APIs (files
// uploaded with purpose=batch, batches created from them, output and error
// files of {custom_id, response|error} lines): the calls every such family
// makes (OpenAI, Mistral, Together), and the decoding of their result
// lines. It is not the OpenAI adapter (provider/openai), which uses it too.
package compat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// DefaultFindWindow is how far back Find lists files and batches.
const DefaultFindWindow = 7 * 24 * time.Hour

// UploadChunk streams ref's chunk file to url as multipart/form-data:
// fields, then the part "file" named provider.UploadName(ref). It returns
// the answer's "id" and the answer itself, for every client of a files API
// (OpenAI, Mistral, Together). A connection lost after the whole file was
// sent is settled by find (the id of the file already made, or "") before
// the upload is repeated; an adopted file comes back with a nil answer.
func UploadChunk(ctx context.Context, hc *httpx.Client, url string, fields []httpx.Field, ref sluice.BatchRef,
	find func(context.Context) (string, error), log zerolog.Logger) (string, json.RawMessage, error) {
	name := provider.UploadName(ref)
	body, ctype, _, err := httpx.Multipart(fields, "file", name, ref.Path)
	if err != nil {
		return "", nil, fmt.Errorf("upload chunk %d: %w", ref.Chunk, err)
	}
	var adopted string
	call := httpx.Call{
		Method: http.MethodPost, URL: url, Header: http.Header{"Content-Type": {ctype}}, Body: body,
		Reconcile: func(ctx context.Context) (bool, error) {
			id, err := find(ctx)
			adopted = id
			return adopted != "", err
		},
	}
	var raw json.RawMessage
	var f struct {
		ID string `json:"id"`
	}
	switch err := hc.JSON(ctx, call, &raw); {
	case errors.Is(err, httpx.ErrReconciled):
		log.Info().Str("file_id", adopted).Str("filename", name).Msg("upload answer lost; adopted the uploaded file")
		return adopted, nil, nil
	case err != nil:
		return "", nil, fmt.Errorf("upload chunk %d: %w", ref.Chunk, err)
	case json.Unmarshal(raw, &f) != nil || f.ID == "":
		return "", nil, fmt.Errorf("upload chunk %d: answer carries no file id", ref.Chunk)
	}
	return f.ID, raw, nil
}

// CreateBatch sends a create call (the JSON of req) to url and maps its
// answer, a T, with toBatch, for every client of a files-based batch API
// (provider.CreateBatch).
func CreateBatch[T any](ctx context.Context, hc *httpx.Client, url string, req any, ref sluice.BatchRef,
	find func(context.Context) (*T, error), toBatch func(*T) sluice.Batch, log zerolog.Logger) (sluice.Batch, error) {
	body, err := httpx.JSONBody(req)
	if err != nil {
		return sluice.Batch{}, err
	}
	return provider.CreateBatch(ctx, hc, url, body, ref, find, toBatch, log)
}

// CancelBatch sends a cancel call to cancelURL. When the provider refuses
// it (a 4xx other than 404 and 429) and a poll of pollURL shows the batch
// cancelling or ended, that batch is the answer: a cancel repeated after
// its first answer was lost, or a batch that ended meanwhile, has nothing
// left to cancel, and its results must still be fetched.
func CancelBatch[T any](ctx context.Context, hc *httpx.Client, cancelURL, pollURL, batchID string, toBatch func(*T) sluice.Batch) (sluice.Batch, error) {
	b, err := BatchCall(ctx, hc, http.MethodPost, cancelURL, "cancel batch "+batchID, toBatch)
	var ae *sluice.APIError
	if err == nil || !errors.As(err, &ae) || ae.Status/100 != 4 || ae.Status == http.StatusNotFound || ae.Status == http.StatusTooManyRequests {
		return b, err
	}
	if p, perr := BatchCall(ctx, hc, http.MethodGet, pollURL, "poll batch "+batchID, toBatch); perr == nil &&
		(p.Status.Ended() || p.Status == sluice.BatchCancelling) {
		return p, nil
	}
	return b, err
}

// BatchCall sends a bodiless call whose answer is one batch of the
// provider's shape T and maps it with toBatch; a 404 wraps
// sluice.ErrNotFound. what names the call in errors.
func BatchCall[T any](ctx context.Context, hc *httpx.Client, method, url, what string, toBatch func(*T) sluice.Batch) (sluice.Batch, error) {
	var w T
	if err := hc.JSON(ctx, httpx.Call{Method: method, URL: url}, &w); err != nil {
		return sluice.Batch{}, NotFound(what, err)
	}
	return toBatch(&w), nil
}

// FetchFiles downloads b's output and error files, whose content contentURL
// names, into dir as <batch>.output.jsonl and <batch>.errors.jsonl, for
// every client of a files-based batch API (OpenAI, Mistral, Together). A
// missing or empty error file is no error; empty files are not returned.
func FetchFiles(ctx context.Context, hc *httpx.Client, contentURL func(fileID string) string, b sluice.Batch, dir string, log zerolog.Logger) ([]string, error) {
	var paths []string
	for _, f := range resultFiles(b) {
		path := filepath.Join(dir, f.name)
		n, err := hc.Download(ctx, httpx.Call{Method: http.MethodGet, URL: contentURL(f.id)}, path)
		switch {
		case err != nil && f.optional && httpx.IsNotFound(err):
			log.Debug().Str("file_id", f.id).Msg("error file not found; treated as empty")
			continue
		case err != nil:
			return paths, NotFound(fmt.Sprintf("download file %s of batch %s", f.id, b.ID), err)
		case n == 0:
			os.Remove(path)
			continue
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// StreamFiles is FetchFiles then Decode without the files
// (sluice.ResultStreamer): b's output file, then its error file, are read
// line by line as they download (httpx.Client.Stream) and each line is
// decoded as Decode decodes it (its Result lent to fn), by the loop Decode
// uses (provider.DecodeJSONLReader), so fn gets the same results in the
// same order, and malformed lines are counted under the same names
// (<batch>.output.jsonl:N). A missing error
// file is no error. A download that fails before a line of it was handed
// to fn is retried by the HTTP layer; one that breaks after ends StreamFiles
// (a *httpx.BrokenError): the caller discards what fn got and starts over.
// An error of fn is returned as is; a download error is wrapped as
// FetchFiles wraps it.
func StreamFiles(ctx context.Context, hc *httpx.Client, contentURL func(fileID string) string, b sluice.Batch, maxLine int, log zerolog.Logger, fn func(sluice.Result) error) error {
	var bad sluice.MalformedLines
	for _, f := range resultFiles(b) {
		var (
			fileBad sluice.MalformedLines
			fnErr   error
		)
		err := hc.Stream(ctx, httpx.Call{Method: http.MethodGet, URL: contentURL(f.id)}, func(body io.Reader) (bool, error) {
			fileBad = sluice.MalformedLines{} // a repeated answer is read afresh
			started := false
			err := provider.DecodeJSONLReader(ctx, body, f.name, maxLine, &fileBad, decodeLent, func(r sluice.Result) error {
				started = true
				if err := fn(r); err != nil {
					fnErr = err
					return err
				}
				return nil
			})
			return started, err
		})
		switch {
		case fnErr != nil:
			return fnErr
		case err != nil && f.optional && httpx.IsNotFound(err):
			log.Debug().Str("file_id", f.id).Msg("error file not found; treated as empty")
			continue
		case err != nil:
			return NotFound(fmt.Sprintf("download file %s of batch %s", f.id, b.ID), err)
		}
		bad.AddAll(&fileBad)
	}
	return bad.Err()
}

// resultFile is one result file of a batch: its file id, the name it is
// downloaded (or, streamed, reported) under, and whether it may be missing.
type resultFile struct {
	id, name string
	optional bool
}

// resultFiles are b's output file, then its error file, when it has them.
func resultFiles(b sluice.Batch) []resultFile {
	var fs []resultFile
	for _, f := range []resultFile{{b.OutputFileID, ".output.jsonl", false}, {b.ErrorFileID, ".errors.jsonl", true}} {
		if f.id != "" {
			f.name = provider.SafeFileName(b.ID) + f.name
			fs = append(fs, f)
		}
	}
	return fs
}

// Files implements Fetch, Decode, StreamResults and Forget for the clients of a
// files-based batch API whose result lines have the OpenAI batch output
// shape (OpenAI, Mistral, Together): embed it.
type Files struct {
	Base *provider.Base // the HTTP client, MaxLine and Log
	// FileURL is the URL of a file.
	FileURL func(id string) string
	// ContentURL, when set, is the URL of a file's content (default
	// FileURL(id)+"/content").
	ContentURL func(id string) string
}

// Fetch downloads the batch's output and error files (FetchFiles).
func (f Files) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	return FetchFiles(ctx, f.Base.HC, f.contentURL, b, dir, f.Base.Log)
}

// StreamsResults: the results of every batch are streamed (StreamResults).
func (f Files) StreamsResults(sluice.BatchRef) bool { return true }

// StreamResults reads the batch's output and error files as they download,
// decoding each line as Decode does, without writing them (StreamFiles).
func (f Files) StreamResults(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return StreamFiles(ctx, f.Base.HC, f.contentURL, b, f.Base.MaxLine, f.Base.Log, fn)
}

func (f Files) contentURL(id string) string {
	if f.ContentURL != nil {
		return f.ContentURL(id)
	}
	return f.FileURL(id) + "/content"
}

// Decode streams the output and error files, one line at a time (lines of
// tens of MB are fine; nothing is loaded whole), and calls fn once per
// line:
//   - a response with a 2xx status_code: ResultSucceeded;
//   - a response with 408, 429 or 5xx: ResultRetryable; other statuses:
//     ResultFailed;
//   - no response, an error: ResultRetryable for batch_expired,
//     batch_cancelled, cancelled, rate_limit_exceeded, server_error (see
//     provider.CodeKind), else ResultFailed.
//
// Usage comes from response.body.usage (prompt_tokens/completion_tokens,
// or input_tokens/output_tokens for /v1/responses). A line that does not
// parse (not JSON, no custom_id, neither a response nor an error, cut
// short, over the line bound) is skipped and Decode goes on; it then
// returns a *sluice.MalformedLines naming each skipped file:line. Any
// other error (a file that cannot be read) ends Decode.
// lookup is not needed: every line carries its custom_id.
func (f Files) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, f.Base.MaxLine, decodeLent, fn)
}

// Forget deletes files (DeleteFiles).
func (f Files) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	return DeleteFiles(ctx, f.Base.HC, f.FileURL, fileIDs...)
}

// DeleteFiles deletes files with DELETE fileURL(id); a file already gone
// is no error.
func DeleteFiles(ctx context.Context, hc *httpx.Client, fileURL func(fileID string) string, fileIDs ...string) error {
	var errs []error
	for _, id := range fileIDs {
		if id == "" {
			continue
		}
		err := hc.JSON(ctx, httpx.Call{Method: http.MethodDelete, URL: fileURL(id)}, nil)
		if err != nil && !httpx.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete file %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// NotFound wraps err with what, adding sluice.ErrNotFound to a 404.
func NotFound(what string, err error) error {
	if httpx.IsNotFound(err) {
		return fmt.Errorf("%s: %w: %w", what, sluice.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// MapStatus maps a batch status onto sluice's, case-insensitively and
// ignoring '_', '-' and spaces: Azure's documents show "Validating" and
// "InProgress", Together's "CANCELING", Mistral's "TIMEOUT_EXCEEDED" and
// "CANCELLATION_REQUESTED". An unknown status maps to
// in_progress (the batch is polled on; its word is kept verbatim in
// ProviderStatus).
func MapStatus(s string) sluice.BatchStatus {
	k := strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', ' ':
			return -1
		}
		return r
	}, strings.ToLower(s))
	switch k {
	case "validating", "queued", "pending":
		return sluice.BatchValidating
	case "inprogress", "running":
		return sluice.BatchInProgress
	case "finalizing":
		return sluice.BatchFinalizing
	case "completed", "succeeded", "success":
		return sluice.BatchCompleted
	case "failed":
		return sluice.BatchFailed
	case "expired", "timeoutexceeded":
		return sluice.BatchExpired
	case "cancelling", "canceling", "cancellationrequested":
		return sluice.BatchCancelling
	case "cancelled", "canceled":
		return sluice.BatchCancelled
	}
	return sluice.BatchInProgress
}

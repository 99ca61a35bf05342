// Package openai is the client of the OpenAI Files + Batches API, and of
// every provider that copies it (Azure OpenAI global batch, Nebius, Groq,
// DeepInfra, the local emulator): one client, configured by a preset.
//
// A chunk file is the batch input JSONL, byte for byte. Upload streams it
// as multipart/form-data (purpose=batch) under the name
// sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl; Create starts a batch from it
// with metadata sluice_job / sluice_chunk / sluice_attempt / sluice_digest; Find lists
// files and batches to adopt what a crashed run created.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Config configures a Client. Preset is required; BaseURL defaults to the
// preset's (Azure and local have none: set it).
type Config struct {
	Preset  provider.Preset
	BaseURL string // with the version, as the SDKs take it: https://api.openai.com/v1
	APIKey  string // sent as "Authorization: Bearer" or Azure's "api-key", per the preset
	HTTP    *http.Client
	Retry   httpx.Retry
	// RateLimit defaults to the preset's; Limiter, when set, is shared.
	RateLimit httpx.RateLimit
	Limiter   *httpx.Limiter
	// CompletionWindow defaults to the preset's, else "24h".
	CompletionWindow string
	Limits           sluice.Limits // put over the preset's limits
	Logger           zerolog.Logger
	// Header is sent with every request (OpenAI-Organization,
	// OpenAI-Project, ...).
	Header http.Header
	// FileExpiresAfter, when set, is sent on upload as expires_after
	// (anchor created_at). Azure allows 500 batch files per resource, or
	// 10,000 when they carry an expiry of 14-30 days.
	FileExpiresAfter time.Duration
	// OutputExpiresAfter, when set, is sent on create as
	// output_expires_after (anchor created_at).
	OutputExpiresAfter time.Duration
	// FindWindow is how far back Find looks (default 7 days).
	FindWindow time.Duration
	// MaxLine bounds one result line in Decode (default
	// provider.DefaultMaxLine).
	MaxLine int
	Clock   httpx.Clock
}

// DefaultFindWindow is how far back Find lists files and batches.
const DefaultFindWindow = 7 * 24 * time.Hour

// Client implements sluice.Provider for the OpenAI family.
type Client struct {
	preset   provider.Preset
	base     *url.URL
	hc       *httpx.Client
	window   string
	limits   sluice.Limits
	fileTTL  time.Duration
	outTTL   time.Duration
	findBack time.Duration
	maxLine  int
	clock    httpx.Clock
	log      zerolog.Logger
	rt       provider.RealtimeLimits // the synchronous API's rate-limit headers (realtime.go)
}

var (
	_ sluice.Provider       = (*Client)(nil)
	_ sluice.ResultStreamer = (*Client)(nil)
)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	p := cfg.Preset
	if p.Family != provider.FamilyOpenAI {
		return nil, fmt.Errorf("openai: preset %q is of family %q", p.Name, p.Family)
	}
	raw := cfg.BaseURL
	if raw == "" {
		raw = p.BaseURL
	}
	if raw == "" {
		where := "--base-url"
		if p.BaseURLEnv != "" {
			where += " or " + p.BaseURLEnv
		}
		return nil, fmt.Errorf("provider %s needs a base URL (%s)", p.Name, where)
	}
	base, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("provider %s: base URL %q is not an http(s) URL", p.Name, raw)
	}
	base.Path = strings.TrimRight(base.Path, "/")
	c := &Client{
		preset: p, base: base, window: cfg.CompletionWindow,
		limits: p.Limits.Override(cfg.Limits), fileTTL: cfg.FileExpiresAfter, outTTL: cfg.OutputExpiresAfter,
		findBack: cfg.FindWindow, maxLine: cfg.MaxLine, clock: cfg.Clock, log: cfg.Logger,
	}
	if c.window == "" {
		c.window = p.CompletionWindow
	}
	if c.window == "" {
		c.window = "24h"
	}
	if c.findBack <= 0 {
		c.findBack = DefaultFindWindow
	}
	if c.clock == nil {
		c.clock = httpx.SystemClock{}
	}
	authHdr, scheme := p.AuthHeader, ""
	if authHdr == "" || strings.EqualFold(authHdr, "Authorization") {
		authHdr, scheme = "Authorization", "Bearer"
	}
	c.hc = httpx.New(httpx.Config{
		HTTP: cfg.HTTP, Retry: cfg.Retry, Limiter: cfg.Limiter,
		RateLimit:  cfg.RateLimit.Or(httpx.RateLimit{PerSecond: p.RequestsPerSecond, Burst: p.Burst}),
		AuthHeader: authHdr, AuthScheme: scheme, APIKey: cfg.APIKey,
		Header: cfg.Header, Errors: httpx.OpenAIErrors, Clock: c.clock, Logger: cfg.Logger,
	})
	return c, nil
}

func (c *Client) Name() string                      { return c.preset.Name }
func (c *Client) Codec() sluice.Codec               { return c.preset.Codec() }
func (c *Client) Limits() sluice.Limits             { return c.limits }
func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Files: true} }

// url is the base URL joined with path, with the base's query (Azure's
// classic api-version) merged with q.
func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	u.RawPath = ""
	if len(q) > 0 {
		all := u.Query()
		for k, vs := range q {
			all[k] = vs
		}
		u.RawQuery = all.Encode()
	}
	return u.String()
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// Upload streams the chunk file to POST /files (CreateFileRequest: purpose
// "batch", then file). A connection lost after the whole file was sent is
// settled by listing files before the upload is repeated.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	fields := []httpx.Field{{Name: "purpose", Value: "batch"}}
	if c.fileTTL > 0 {
		fields = append(fields,
			httpx.Field{Name: "expires_after[anchor]", Value: "created_at"},
			httpx.Field{Name: "expires_after[seconds]", Value: strconv.FormatInt(int64(c.fileTTL/time.Second), 10)})
	}
	id, _, err := UploadChunk(ctx, c.hc, c.url("/files", nil), fields, ref, func(ctx context.Context) (string, error) {
		f, err := c.findFile(ctx, ref)
		if f == nil {
			return "", err
		}
		return f.ID, err
	}, c.log)
	return id, err
}

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

// Create starts a batch from fileID: POST /batches with input_file_id,
// endpoint (the chunk's url), completion_window and metadata naming ref. A
// connection lost after the request was sent is settled by listing batches
// before the create is repeated, so a lost answer does not buy the batch
// twice.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: no input file id", ref.Chunk)
	}
	req := createBatchRequest{
		InputFileID: fileID, Endpoint: ref.URL, CompletionWindow: c.window,
		Metadata: provider.Metadata(ref),
	}
	if c.outTTL > 0 {
		req.OutputExpiresAfter = &expiresAfter{Anchor: "created_at", Seconds: int64(c.outTTL / time.Second)}
	}
	return CreateBatch(ctx, c.hc, c.url("/batches", nil), req, ref, func(ctx context.Context) (*batchObject, error) {
		return c.findBatch(ctx, ref)
	}, (*batchObject).toBatch, c.log)
}

// CreateBatch sends a create call (the JSON of req) to url and maps its
// answer, a T, with toBatch, for every client of a files-based batch API. A
// connection lost after the request was sent is settled by find (what the
// call made, or nil) before the create is repeated, so a lost answer does
// not buy the batch twice.
func CreateBatch[T any](ctx context.Context, hc *httpx.Client, url string, req any, ref sluice.BatchRef,
	find func(context.Context) (*T, error), toBatch func(*T) sluice.Batch, log zerolog.Logger) (sluice.Batch, error) {
	body, err := httpx.JSONBody(req)
	if err != nil {
		return sluice.Batch{}, err
	}
	var adopted *T
	call := httpx.Call{
		Method: http.MethodPost, URL: url, Header: jsonHeader, Body: body,
		Reconcile: func(ctx context.Context) (bool, error) {
			b, err := find(ctx)
			adopted = b
			return b != nil, err
		},
	}
	var w T
	switch err := hc.JSON(ctx, call, &w); {
	case errors.Is(err, httpx.ErrReconciled):
		b := toBatch(adopted)
		log.Info().Str("batch_id", b.ID).Int64("chunk", ref.Chunk).Msg("create answer lost; adopted the created batch")
		return b, nil
	case err != nil:
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	}
	b := toBatch(&w)
	if b.ID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: answer carries no batch id", ref.Chunk)
	}
	return b, nil
}

// Poll reads GET /batches/{id}.
// An ended batch's results expiry is read from its output (else error)
// file's expires_at (ResultsExpiry).
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	b, err := BatchCall(ctx, c.hc, http.MethodGet, c.url("/batches/"+url.PathEscape(batchID), nil), "poll batch "+batchID, (*batchObject).toBatch)
	if err == nil && b.Status.Ended() {
		b.ResultsExpireAt = c.ResultsExpiry(ctx, b)
	}
	return b, err
}

// ResultsExpiry asks GET /files/{id} of an ended batch's output file (else
// its error file) when it expires: the provider's own answer, with
// output_expires_after or without. Zero when it cannot tell (no file, a
// failed call, no expires_at): the caller keeps its own estimate.
func (c *Client) ResultsExpiry(ctx context.Context, b sluice.Batch) time.Time {
	id := b.OutputFileID
	if id == "" {
		id = b.ErrorFileID
	}
	if id == "" {
		return time.Time{}
	}
	var f struct {
		ExpiresAt flexTime `json:"expires_at"`
	}
	if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files/"+url.PathEscape(id), nil)}, &f); err != nil {
		c.log.Debug().Err(err).Str("file", id).Msg("results expiry unknown")
		return time.Time{}
	}
	return f.ExpiresAt.Time
}

// Cancel asks POST /batches/{id}/cancel (see CancelBatch).
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	u := c.url("/batches/"+url.PathEscape(batchID), nil)
	return CancelBatch(ctx, c.hc, c.url("/batches/"+url.PathEscape(batchID)+"/cancel", nil), u, batchID, (*batchObject).toBatch)
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

// Fetch downloads the batch's output file and error file (GET
// /files/{id}/content) into dir as <batch>.output.jsonl and
// <batch>.errors.jsonl. A missing or empty error file is no error (Azure
// gives even a clean batch an empty one); empty files are not returned.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	return FetchFiles(ctx, c.hc, c.contentURL, b, dir, c.log)
}

// StreamsResults: the results of every batch are streamed (StreamResults).
func (c *Client) StreamsResults(sluice.BatchRef) bool { return true }

// StreamResults reads the batch's output and error files as they download,
// decoding each line as Decode does, without writing them (StreamFiles).
func (c *Client) StreamResults(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return StreamFiles(ctx, c.hc, c.contentURL, b, c.maxLine, c.log, fn)
}

func (c *Client) contentURL(id string) string {
	return c.url("/files/"+url.PathEscape(id)+"/content", nil)
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

// Forget deletes files (DELETE /files/{id}); a file already gone is no
// error.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	return DeleteFiles(ctx, c.hc, func(id string) string { return c.url("/files/"+url.PathEscape(id), nil) }, fileIDs...)
}

// Files implements Fetch, Decode, StreamResults and Forget for the clients of a
// files-based batch API whose result lines have the OpenAI batch output
// shape (Mistral, Together): embed it.
type Files struct {
	HC *httpx.Client
	// FileURL is the URL of a file; its content is at FileURL(id)+"/content".
	FileURL func(id string) string
	MaxLine int // bound of one result line (default provider.DefaultMaxLine)
	Log     zerolog.Logger
}

// Fetch downloads the batch's output and error files (FetchFiles).
func (f Files) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	return FetchFiles(ctx, f.HC, f.contentURL, b, dir, f.Log)
}

// StreamsResults: the results of every batch are streamed (StreamResults).
func (f Files) StreamsResults(sluice.BatchRef) bool { return true }

// StreamResults reads the batch's output and error files as they download,
// decoding each line as Decode does, without writing them (StreamFiles).
func (f Files) StreamResults(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return StreamFiles(ctx, f.HC, f.contentURL, b, f.MaxLine, f.Log, fn)
}

func (f Files) contentURL(id string) string { return f.FileURL(id) + "/content" }

// Decode reads output and error file lines as DecodeLine does, each
// Result's body lent to fn (sluice.Result): {custom_id, response{status_code,
// body}} or {custom_id, error{code, message}} (error may be a bare string).
func (f Files) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, f.MaxLine, decodeLent, fn)
}

// Forget deletes files (DeleteFiles).
func (f Files) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	return DeleteFiles(ctx, f.HC, f.FileURL, fileIDs...)
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

// Package gemini is the client of the Gemini Developer API's Batch Mode
// with the Files API (docs/providers/gemini.md has the wire facts).
//
// A chunk file is the batch input JSONL, one {"key": custom_id, "request":
// GenerateContentRequest} per line. Upload sends it with the resumable
// protocol of the Files API (start, 8 MiB chunks, finalize; after a broken
// connection it queries the session and resumes from the server's offset)
// under the display name sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl; Create
// starts models/{model}:batchGenerateContent from it with the display name
// sluice-<job>-c<chunk>-a<attempt>-d<digest>, which Find matches in the batch listing
// after a crash. Results come back in a responses file, one {"key",
// "response"} or {"key","status"} line per request.
package gemini

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// DefaultChunkSize is the size of one upload request, the SDKs' 8 MiB.
const DefaultChunkSize = 8 << 20

// DefaultMimeType is the mimeType given to uploaded chunk files.
const DefaultMimeType = "application/jsonl"

// DefaultFindWindow is how far back Find looks at batches and files: the
// 48 hours a batch may live before it expires, and a margin.
const DefaultFindWindow = 72 * time.Hour

// Config configures a Client. The zero Preset means the "gemini" preset;
// BaseURL is without the version, as the Google SDKs take it
// (https://generativelanguage.googleapis.com); APIKey is sent as
// x-goog-api-key; FindWindow defaults to 72 h.
type Config struct {
	provider.Config
	// APIVersion is put after the base URL (default the preset's, v1beta).
	APIVersion string
	// ChunkSize is the bytes of one upload request (default 8 MiB), rounded
	// up to the granularity the server announces.
	ChunkSize int64
	// MimeType of uploaded chunk files (default application/jsonl).
	MimeType string
	// SDKDownloadPath downloads responses from /{version}/files/{id}:download
	// (what the SDKs call) instead of the docs' /download/{version}/….
	SDKDownloadPath bool
}

// Client implements sluice.Provider for the Gemini Developer API.
type Client struct {
	provider.Base
	version string
	once    *httpx.Client // one attempt per call: upload chunks, whose retries resume from the server's offset
	retry   httpx.Retry
	chunk   int64
	mime    string
	sdkDL   bool
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	wire := provider.Wire{AuthHeader: "x-goog-api-key", Errors: GoogleErrors, FindWindow: DefaultFindWindow}
	base, err := provider.NewBase(cfg.Config, provider.FamilyGemini, wire)
	if err != nil {
		return nil, err
	}
	for _, v := range []string{"/v1beta", "/v1"} {
		if strings.HasSuffix(base.URL.Path, v) {
			return nil, fmt.Errorf("provider %s: base URL %q ends in the API version; give it without (like https://generativelanguage.googleapis.com) and set the version apart", base.Preset.Name, cfg.BaseURL)
		}
	}
	c := &Client{Base: base, version: cfg.APIVersion, chunk: cfg.ChunkSize, mime: cfg.MimeType,
		sdkDL: cfg.SDKDownloadPath, retry: cfg.Retry.WithDefaults()}
	if c.version == "" {
		c.version = c.Preset.APIVersion
	}
	if c.version == "" {
		c.version = "v1beta"
	}
	if c.chunk <= 0 {
		c.chunk = DefaultChunkSize
	}
	if c.mime == "" {
		c.mime = DefaultMimeType
	}
	hc := c.HTTPConfig(cfg.Config, wire)
	hc.Retry = httpx.Retry{MaxAttempts: 1}
	c.once = httpx.New(hc)
	return c, nil
}

func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Files: true} }

// url is base/{version}/path with query q.
func (c *Client) url(path string, q url.Values) string {
	return c.urlAt("/"+c.version+path, q)
}

func (c *Client) urlAt(path string, q url.Values) string { return c.Join(path, q) }

// DisplayName is the display name of the batch made for ref:
// sluice-<job>-c<chunk>-a<attempt>-d<digest> (provider.BaseName). Find
// matches it.
func DisplayName(ref sluice.BatchRef) string { return provider.BaseName(ref) }

// batchName is "batches/<id>" for an id given with or without the prefix.
func batchName(id string) string {
	if strings.HasPrefix(id, "batches/") {
		return id
	}
	return "batches/" + id
}

// modelName is the model resource of a chunk: models/<id>, or a
// tunedModels/… name as given.
func modelName(model string) string {
	if strings.Contains(model, "/") {
		return model
	}
	return "models/" + model
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

type createRequest struct {
	Batch struct {
		DisplayName string `json:"displayName"`
		InputConfig struct {
			FileName string `json:"fileName"`
		} `json:"inputConfig"`
	} `json:"batch"`
}

// Create starts POST /{v}/models/{model}:batchGenerateContent from fileID
// with the display name naming ref. The create is not idempotent: a
// connection lost after the request was sent is settled by listing
// batches before it is repeated, so a lost answer does not buy the batch
// twice.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: no input file id", ref.Chunk)
	}
	if ref.Model == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: no model", ref.Chunk)
	}
	var req createRequest
	req.Batch.DisplayName = DisplayName(ref)
	req.Batch.InputConfig.FileName = fileName(fileID)
	body, err := httpx.JSONBody(req)
	if err != nil {
		return sluice.Batch{}, err
	}
	b, err := provider.CreateBatch(ctx, c.HC, c.url("/"+modelName(ref.Model)+":batchGenerateContent", nil), body, ref,
		func(ctx context.Context) (*operation, error) { return c.findBatch(ctx, ref) }, (*operation).toBatch, c.Log)
	return b, keyErr(err)
}

// Poll reads GET /{v}/batches/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	var op operation
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/"+batchName(batchID), nil)}, &op); err != nil {
		return sluice.Batch{}, notFound("poll batch "+batchID, err)
	}
	return op.toBatch(), nil
}

// Cancel asks POST /{v}/batches/{id}:cancel, then reads the batch. A batch
// that has already ended (400 FAILED_PRECONDITION) is just read.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	call := httpx.Call{Method: http.MethodPost, URL: c.url("/"+batchName(batchID)+":cancel", nil), Header: jsonHeader}
	return CancelThenPoll(ctx, c.HC, call, "cancel batch "+batchID, func() (sluice.Batch, error) {
		return c.Poll(ctx, sluice.BatchRef{}, batchID)
	})
}

// CancelThenPoll asks Google's :cancel custom method (call), then reads
// the batch with poll; one that has already ended (400
// FAILED_PRECONDITION) is just read. Vertex AI's jobs cancel the same way.
func CancelThenPoll(ctx context.Context, hc *httpx.Client, call httpx.Call, what string, poll func() (sluice.Batch, error)) (sluice.Batch, error) {
	err := hc.JSON(ctx, call, nil)
	var ae *sluice.APIError
	if err != nil && !(errors.As(err, &ae) && ae.Code == "FAILED_PRECONDITION") {
		return sluice.Batch{}, notFound(what, err)
	}
	return poll()
}

// Fetch downloads the batch's responses file into dir as
// <batch>.responses.jsonl. A batch without one (expired, or cancelled
// before any request ran) has no results: no files, no error.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	if b.OutputFileID == "" {
		return nil, nil
	}
	id := strings.TrimPrefix(b.OutputFileID, "files/")
	src := c.urlAt("/download/"+c.version+"/files/"+url.PathEscape(id)+":download", url.Values{"alt": {"media"}})
	if c.sdkDL {
		src = c.url("/files/"+url.PathEscape(id)+":download", url.Values{"alt": {"media"}})
	}
	path := filepath.Join(dir, provider.SafeFileName(b.ID)+".responses.jsonl")
	if _, err := c.HC.Download(ctx, httpx.Call{Method: http.MethodGet, URL: src}, path); err != nil {
		return nil, notFound(fmt.Sprintf("download responses file %s of batch %s", b.OutputFileID, b.ID), err)
	}
	return []string{path}, nil
}

// Forget deletes uploaded files (DELETE /{v}/files/{id}); a file already
// gone (404, or 403 as Google answers for a file it does not show) is no
// error. Batches are kept: their responses may be fetched again.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	var errs []error
	for _, id := range fileIDs {
		if id == "" {
			continue
		}
		err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodDelete, URL: c.url("/"+fileName(id), nil)}, nil)
		var ae *sluice.APIError
		if err != nil && !(errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusForbidden)) {
			errs = append(errs, fmt.Errorf("delete file %s: %w", id, keyErr(err)))
		}
	}
	return errors.Join(errs...)
}

// fileName is "files/<id>" for an id given with or without the prefix.
func fileName(id string) string {
	if strings.HasPrefix(id, "files/") {
		return id
	}
	return "files/" + id
}

// notFound wraps err with what, adding sluice.ErrNotFound to a 404.
func notFound(what string, err error) error {
	err = keyErr(err)
	if httpx.IsNotFound(err) {
		return fmt.Errorf("%s: %w: %w", what, sluice.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// keyErr reports a key Google refuses as the 401 it is: Google answers a
// wrong API key 400 INVALID_ARGUMENT with reason API_KEY_INVALID, which
// would otherwise read as a request refused for good.
func keyErr(err error) error {
	var ae *sluice.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(ae.Code, "API_KEY_INVALID") {
		ae.Status = http.StatusUnauthorized
		ae.Message += " (HTTP 400 from Google)"
	}
	return err
}

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
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Config configures a Client. BaseURL, with the version as the SDKs take
// it (https://api.openai.com/v1), defaults to the preset's (Azure and
// local have none: set it); APIKey is sent as "Authorization: Bearer" or
// Azure's "api-key", per the preset; Header carries OpenAI-Organization,
// OpenAI-Project, ...; FindWindow defaults to 7 days.
type Config struct {
	provider.Config
	// CompletionWindow defaults to the preset's, else "24h".
	CompletionWindow string
	// FileExpiresAfter, when set, is sent on upload as expires_after
	// (anchor created_at). Azure allows 500 batch files per resource, or
	// 10,000 when they carry an expiry of 14-30 days.
	FileExpiresAfter time.Duration
	// OutputExpiresAfter, when set, is sent on create as
	// output_expires_after (anchor created_at).
	OutputExpiresAfter time.Duration
}

// Client implements sluice.Provider for the OpenAI family.
type Client struct {
	provider.Base
	compat.Files // Fetch, Decode, StreamResults, Forget
	window       string
	fileTTL      time.Duration
	outTTL       time.Duration
	rt           provider.RealtimeLimits // the synchronous API's rate-limit headers (realtime.go)
}

var (
	_ sluice.Provider       = (*Client)(nil)
	_ sluice.ResultStreamer = (*Client)(nil)
)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	authHdr, scheme := cfg.Preset.AuthHeader, ""
	if authHdr == "" || strings.EqualFold(authHdr, "Authorization") {
		authHdr, scheme = "Authorization", "Bearer"
	}
	base, err := provider.NewBase(cfg.Config, provider.FamilyOpenAI, provider.Wire{
		AuthHeader: authHdr, AuthScheme: scheme, Errors: httpx.OpenAIErrors, FindWindow: compat.DefaultFindWindow})
	if err != nil {
		return nil, err
	}
	c := &Client{Base: base, window: cfg.CompletionWindow, fileTTL: cfg.FileExpiresAfter, outTTL: cfg.OutputExpiresAfter}
	if c.window == "" {
		c.window = c.Preset.CompletionWindow
	}
	if c.window == "" {
		c.window = "24h"
	}
	c.Files = compat.Files{Base: &c.Base, FileURL: c.fileURL, ContentURL: c.contentURL}
	return c, nil
}

func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Files: true} }

// url is the base URL joined with path, with the base's query (Azure's
// classic api-version) merged with q.
func (c *Client) url(path string, q url.Values) string { return c.Join(path, q) }

func (c *Client) fileURL(id string) string { return c.url("/files/"+url.PathEscape(id), nil) }
func (c *Client) contentURL(id string) string {
	return c.url("/files/"+url.PathEscape(id)+"/content", nil)
}

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
	id, _, err := compat.UploadChunk(ctx, c.HC, c.url("/files", nil), fields, ref, provider.FileIDOf(ref, c.findFile, (*fileObject).id), c.Log)
	return id, err
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
	return compat.CreateBatch(ctx, c.HC, c.url("/batches", nil), req, ref, func(ctx context.Context) (*batchObject, error) {
		return c.findBatch(ctx, ref)
	}, (*batchObject).toBatch, c.Log)
}

// Poll reads GET /batches/{id}.
// An ended batch's results expiry is read from its output (else error)
// file's expires_at (ResultsExpiry).
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	b, err := compat.BatchCall(ctx, c.HC, http.MethodGet, c.url("/batches/"+url.PathEscape(batchID), nil), "poll batch "+batchID, (*batchObject).toBatch)
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
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files/"+url.PathEscape(id), nil)}, &f); err != nil {
		c.Log.Debug().Err(err).Str("file", id).Msg("results expiry unknown")
		return time.Time{}
	}
	return f.ExpiresAt.Time
}

// Cancel asks POST /batches/{id}/cancel (see CancelBatch).
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	u := c.url("/batches/"+url.PathEscape(batchID), nil)
	return compat.CancelBatch(ctx, c.HC, c.url("/batches/"+url.PathEscape(batchID)+"/cancel", nil), u, batchID, (*batchObject).toBatch)
}

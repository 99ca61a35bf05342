// Package mistral is the client of Mistral's batch API
// (docs/providers/mistral.md): files uploaded with purpose=batch, jobs
// created at POST /v1/batch/jobs from input_files with a job-level model
// and metadata naming the chunk, polled, cancelled, listed for
// reconciliation, and their output and error files downloaded.
//
// The base URL is the SDK's server_url, without the version
// (https://api.mistral.ai); the paths carry /v1. A base URL ending in /v1
// is accepted too.
package mistral

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/openai"
)

// Config configures a Client.
type Config struct {
	Preset  provider.Preset // default: provider.Presets["mistral"]
	BaseURL string          // default: the preset's
	APIKey  string          // sent as Authorization: Bearer
	HTTP    *http.Client
	Retry   httpx.Retry
	// RateLimit defaults to the preset's; Limiter, when set, is shared.
	RateLimit httpx.RateLimit
	Limiter   *httpx.Limiter
	Limits    sluice.Limits // put over the preset's limits
	Logger    zerolog.Logger
	// TimeoutHours is sent on create as timeout_hours (default 24, the
	// API's default).
	TimeoutHours int
	// FindWindow is how far back Find looks (default 7 days).
	FindWindow time.Duration
	// MaxLine bounds one result line in Decode.
	MaxLine int
	Clock   httpx.Clock
}

// Client implements sluice.Provider for Mistral.
type Client struct {
	openai.Files // Fetch, Decode, StreamResults, Forget
	preset       provider.Preset
	base         string // scheme://host/path, without a trailing /v1
	hc           *httpx.Client
	limits       sluice.Limits
	timeout      int
	findBack     time.Duration
	clock        httpx.Clock
	log          zerolog.Logger
	rt           provider.RealtimeLimits // the synchronous API's rate-limit headers (realtime.go)
}

var (
	_ sluice.Provider       = (*Client)(nil)
	_ sluice.ResultStreamer = (*Client)(nil)
)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	p, base, err := provider.Resolve(cfg.Preset, provider.FamilyMistral, cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	base.Path = strings.TrimSuffix(base.Path, "/v1")
	base.RawQuery, base.Fragment = "", ""
	c := &Client{
		preset: p, base: base.String(), limits: p.Limits.Override(cfg.Limits), timeout: cfg.TimeoutHours,
		findBack: cfg.FindWindow, clock: cfg.Clock, log: cfg.Logger,
	}
	if c.timeout <= 0 {
		c.timeout = 24
	}
	if c.findBack <= 0 {
		c.findBack = openai.DefaultFindWindow
	}
	if c.clock == nil {
		c.clock = httpx.SystemClock{}
	}
	c.hc = httpx.New(httpx.Config{
		HTTP: cfg.HTTP, Retry: cfg.Retry, Limiter: cfg.Limiter,
		RateLimit:  cfg.RateLimit.Or(httpx.RateLimit{PerSecond: p.RequestsPerSecond, Burst: p.Burst}),
		AuthHeader: "Authorization", AuthScheme: "Bearer", APIKey: cfg.APIKey,
		Errors: httpx.MistralErrors, Clock: c.clock, Logger: cfg.Logger,
	})
	c.Files = openai.Files{HC: c.hc, FileURL: c.fileURL, MaxLine: cfg.MaxLine, Log: cfg.Logger}
	return c, nil
}

func (c *Client) Name() string                      { return c.preset.Name }
func (c *Client) Codec() sluice.Codec               { return c.preset.Codec() }
func (c *Client) Limits() sluice.Limits             { return c.limits }
func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Files: true} }

// url is the base URL joined with /v1 and path, with query q.
func (c *Client) url(path string, q url.Values) string {
	u := c.base + "/v1" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Client) fileURL(id string) string { return c.url("/files/"+url.PathEscape(id), nil) }
func (c *Client) jobURL(id string) string  { return c.url("/batch/jobs/"+url.PathEscape(id), nil) }

// fileObject is Mistral's FileSchema, as far as sluice reads it (the size
// is the wire key "bytes").
type fileObject struct {
	ID         string `json:"id"`
	Bytes      int64  `json:"bytes"`
	CreatedAt  int64  `json:"created_at"`
	Filename   string `json:"filename"`
	Purpose    string `json:"purpose"`
	SampleType string `json:"sample_type"`
}

type fileList struct {
	Data  []fileObject `json:"data"`
	Total int          `json:"total"`
}

// createRequest is CreateBatchJobRequest.
type createRequest struct {
	InputFiles   []string          `json:"input_files"`
	Endpoint     string            `json:"endpoint"`
	Model        string            `json:"model,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	TimeoutHours int               `json:"timeout_hours"`
}

// job is BatchJob, as far as sluice reads it.
type job struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	InputFiles        []string          `json:"input_files"`
	Metadata          map[string]any    `json:"metadata"`
	Endpoint          string            `json:"endpoint"`
	Model             *string           `json:"model"`
	OutputFile        *string           `json:"output_file"`
	ErrorFile         *string           `json:"error_file"`
	Errors            []jobError        `json:"errors"`
	Status            string            `json:"status"`
	CreatedAt         int64             `json:"created_at"`
	TotalRequests     int               `json:"total_requests"`
	CompletedRequests int               `json:"completed_requests"`
	SucceededRequests int               `json:"succeeded_requests"`
	FailedRequests    int               `json:"failed_requests"`
	StartedAt         *int64            `json:"started_at"`
	CompletedAt       *int64            `json:"completed_at"`
	Outputs           []json.RawMessage `json:"outputs"`
}

type jobError struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

type jobList struct {
	Data   []job  `json:"data"`
	Object string `json:"object"`
	Total  int    `json:"total"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// toBatch maps a job onto sluice's Batch.
func (j *job) toBatch() sluice.Batch {
	b := sluice.Batch{
		ID: j.ID, Status: MapStatus(j.Status), ProviderStatus: j.Status,
		OutputFileID: str(j.OutputFile), ErrorFileID: str(j.ErrorFile),
		Total: j.TotalRequests, Completed: j.SucceededRequests, Failed: j.FailedRequests,
	}
	for _, e := range j.Errors {
		msg := e.Message
		if e.Count > 1 {
			msg += fmt.Sprintf(" (%d times)", e.Count)
		}
		b.Errors = append(b.Errors, sluice.BatchError{Message: msg})
	}
	return b
}

// inputFile is the job's one input file, or "" when it has none or
// several (sluice makes each job from one file).
func (j *job) inputFile() string {
	if len(j.InputFiles) != 1 {
		return ""
	}
	return j.InputFiles[0]
}

// metadata returns the job's metadata with every value as text.
func (j *job) metadata() map[string]string {
	m := make(map[string]string, len(j.Metadata))
	for k, v := range j.Metadata {
		switch v := v.(type) {
		case string:
			m[k] = v
		default:
			b, _ := json.Marshal(v)
			m[k] = string(b)
		}
	}
	return m
}

// MapStatus maps Mistral's job statuses: QUEUED validating, RUNNING
// in_progress, SUCCESS completed, FAILED failed, TIMEOUT_EXCEEDED expired
// (its unfinished requests are retried), CANCELLATION_REQUESTED cancelling,
// CANCELLED cancelled. Unknown statuses are polled on as in_progress.
func MapStatus(s string) sluice.BatchStatus { return openai.MapStatus(s) }

// Upload streams the chunk file to POST /v1/files as multipart/form-data
// (purpose=batch, then file named sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl).
// A connection lost after the whole file was sent is settled by listing
// files before the upload is repeated.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	id, _, err := openai.UploadChunk(ctx, c.hc, c.url("/files", nil), []httpx.Field{{Name: "purpose", Value: "batch"}}, ref,
		func(ctx context.Context) (string, error) {
			f, err := c.findFile(ctx, ref)
			if f == nil {
				return "", err
			}
			return f.ID, err
		}, c.log)
	return id, err
}

// Create starts a job: POST /v1/batch/jobs with input_files [fileID],
// endpoint (the chunk's url), model (the chunk's), metadata naming ref and
// timeout_hours. A connection lost after the request was sent is settled
// by listing jobs before the create is repeated.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: no input file id", ref.Chunk)
	}
	req := createRequest{InputFiles: []string{fileID}, Endpoint: ref.URL, Model: ref.Model,
		Metadata: provider.Metadata(ref), TimeoutHours: c.timeout}
	return openai.CreateBatch(ctx, c.hc, c.url("/batch/jobs", nil), req, ref, func(ctx context.Context) (*job, error) {
		return c.findJob(ctx, ref)
	}, (*job).toBatch, c.log)
}

// Poll reads GET /v1/batch/jobs/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	return openai.BatchCall(ctx, c.hc, http.MethodGet, c.jobURL(batchID), "poll batch "+batchID, (*job).toBatch)
}

// Cancel asks POST /v1/batch/jobs/{id}/cancel; the job goes
// CANCELLATION_REQUESTED, then CANCELLED. A refused cancel of a job that
// has ended answers the job (openai.CancelBatch).
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	return openai.CancelBatch(ctx, c.hc, c.jobURL(batchID)+"/cancel", c.jobURL(batchID), batchID, (*job).toBatch)
}

// listPage is the page size of listings (the API's default).
const listPage = 100

// maxPages bounds a listing, whatever the server says about its total.
const maxPages = 10_000

// Find looks for what a previous run made for ref: the job whose metadata
// names ref's job, chunk, attempt and digest, made from ref's file when the
// tracker knows it (provider.MatchesMetadata; GET /v1/batch/jobs, newest
// first, paged), else the file uploaded under ref's name, which carries its
// digest, with ref's size (provider.MatchesFile; GET
// /v1/files?purpose=batch). The list's metadata filter is not used: how the
// API reads it is unconfirmed (docs/providers/mistral.md); jobs are matched
// here instead. A live job is preferred to a failed, timed-out or cancelled
// one.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	j, err := c.findJob(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, err)
	}
	if j != nil {
		if len(j.InputFiles) > 0 {
			fileID = j.InputFiles[0]
		}
		return fileID, j.ID, nil
	}
	f, err := c.findFile(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find file of chunk %d: %w", ref.Chunk, err)
	}
	if f != nil {
		return f.ID, "", nil
	}
	return "", "", nil
}

func (c *Client) cutoff() int64 { return c.clock.Now().Add(-c.findBack).Unix() }

// findJob returns the job made for ref, or nil.
func (c *Client) findJob(ctx context.Context, ref sluice.BatchRef) (*job, error) {
	cutoff := c.cutoff()
	var pick provider.Adopt[job]
	seen := 0
	for page := 0; page < maxPages; page++ {
		q := url.Values{"page": {strconv.Itoa(page)}, "page_size": {strconv.Itoa(listPage)}, "order_by": {"-created"}}
		var l jobList
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/batch/jobs", q)}, &l); err != nil {
			return nil, err
		}
		allOld := len(l.Data) > 0
		for i := range l.Data {
			j := &l.Data[i]
			if j.CreatedAt == 0 || j.CreatedAt >= cutoff {
				allOld = false
			}
			if provider.MatchesMetadata(j.metadata(), j.inputFile(), ref) && pick.Offer(j, MapStatus(j.Status)) {
				return j, nil
			}
		}
		seen += len(l.Data)
		if len(l.Data) < listPage || allOld || (l.Total > 0 && seen >= l.Total) {
			break
		}
	}
	return pick.Best(), nil
}

// findFile returns the newest batch file uploaded for ref, or nil.
func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	if ref.Digest == "" {
		return nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	var best *fileObject
	seen := 0
	for page := 0; page < maxPages; page++ {
		q := url.Values{"page": {strconv.Itoa(page)}, "page_size": {strconv.Itoa(listPage)}, "purpose": {"batch"}}
		var l fileList
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files", q)}, &l); err != nil {
			return nil, err
		}
		for i := range l.Data {
			f := l.Data[i]
			if provider.MatchesFile(f.Filename, f.Bytes, ref) && (best == nil || f.CreatedAt > best.CreatedAt) {
				best = &f
			}
		}
		seen += len(l.Data)
		if len(l.Data) < listPage || (l.Total > 0 && seen >= l.Total) {
			break
		}
	}
	return best, nil
}

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

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Config configures a Client: the zero Preset means the "mistral"
// preset; APIKey is sent as Authorization: Bearer; FindWindow defaults to
// 7 days.
type Config struct {
	provider.Config
	// TimeoutHours is sent on create as timeout_hours (default 24, the
	// API's default).
	TimeoutHours int
}

// Client implements sluice.Provider for Mistral.
type Client struct {
	provider.Base
	compat.Files           // Fetch, Decode, StreamResults, Forget
	compat.Realtime        // CallRealtime: the body to the batch's endpoint under the base URL
	base            string // scheme://host/path, without a trailing /v1
	timeout         int
}

var (
	_ sluice.Provider       = (*Client)(nil)
	_ sluice.ResultStreamer = (*Client)(nil)
	_ sluice.RealtimeCaller = (*Client)(nil)
)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	base, err := provider.NewBase(cfg.Config, provider.FamilyMistral,
		provider.Wire{Errors: httpx.MistralErrors, FindWindow: compat.DefaultFindWindow})
	if err != nil {
		return nil, err
	}
	u := *base.URL
	u.Path = strings.TrimSuffix(u.Path, "/v1")
	u.RawQuery = ""
	c := &Client{Base: base, base: u.String(), timeout: cfg.TimeoutHours}
	if c.timeout <= 0 {
		c.timeout = 24
	}
	c.Files = compat.Files{Base: &c.Base, FileURL: c.fileURL}
	c.Realtime = compat.Realtime{Base: &c.Base, URL: func(endpoint string) string { return c.base + endpoint }}
	return c, nil
}

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
func MapStatus(s string) sluice.BatchStatus { return compat.MapStatus(s) }

// Upload streams the chunk file to POST /v1/files as multipart/form-data
// (purpose=batch, then file named sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl).
// A connection lost after the whole file was sent is settled by listing
// files before the upload is repeated.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	id, _, err := compat.UploadChunk(ctx, c.HC, c.url("/files", nil), []httpx.Field{{Name: "purpose", Value: "batch"}}, ref,
		provider.FileIDOf(ref, c.findFile, (*fileObject).id), c.Log)
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
	return compat.CreateBatch(ctx, c.HC, c.url("/batch/jobs", nil), req, ref, func(ctx context.Context) (*job, error) {
		return c.findJob(ctx, ref)
	}, (*job).toBatch, c.Log)
}

// Poll reads GET /v1/batch/jobs/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	return compat.BatchCall(ctx, c.HC, http.MethodGet, c.jobURL(batchID), "poll batch "+batchID, (*job).toBatch)
}

// Cancel asks POST /v1/batch/jobs/{id}/cancel; the job goes
// CANCELLATION_REQUESTED, then CANCELLED. A refused cancel of a job that
// has ended answers the job (compat.CancelBatch).
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	return compat.CancelBatch(ctx, c.HC, c.jobURL(batchID)+"/cancel", c.jobURL(batchID), batchID, (*job).toBatch)
}

// listPage is the page size of listings (the API's default).
const listPage = 100

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
	return provider.FindBatchOrFile(ctx, ref, c.findJob, func(j *job) (string, string) {
		if len(j.InputFiles) > 0 {
			return j.InputFiles[0], j.ID
		}
		return "", j.ID
	}, c.findFile, (*fileObject).id)
}

// findJob returns the job made for ref, or nil.
func (c *Client) findJob(ctx context.Context, ref sluice.BatchRef) (*job, error) {
	l := provider.Listing[job]{
		Page: func(ctx context.Context, token string) (provider.Page[job], error) {
			return page[jobList](ctx, c, "/batch/jobs", url.Values{"order_by": {"-created"}}, token,
				func(l *jobList) ([]job, int) { return l.Data, l.Total })
		},
		Created: func(j *job) time.Time { return unix(j.CreatedAt) },
		Cutoff:  c.Cutoff(),
	}
	return l.Adopt(ctx, func(j *job) bool { return provider.MatchesMetadata(j.metadata(), j.inputFile(), ref) },
		func(j *job) sluice.BatchStatus { return MapStatus(j.Status) })
}

// findFile returns the newest batch file uploaded for ref, or nil.
func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	if ref.Digest == "" {
		return nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	l := provider.Listing[fileObject]{Page: func(ctx context.Context, token string) (provider.Page[fileObject], error) {
		return page[fileList](ctx, c, "/files", url.Values{"purpose": {"batch"}}, token,
			func(l *fileList) ([]fileObject, int) { return l.Data, l.Total })
	}}
	var best *fileObject
	err := l.Each(ctx, func(f *fileObject) bool {
		if provider.MatchesFile(f.Filename, f.Bytes, ref) && (best == nil || f.CreatedAt > best.CreatedAt) {
			best = f
		}
		return false
	})
	return best, err
}

// id is the file's id.
func (f *fileObject) id() string { return f.ID }

// page reads page token (a page number; "" is 0) of the listing at path,
// an L, whose entries and total parts gives. The next page is the one
// after, unless this one was short or the total is reached.
func page[L, T any](ctx context.Context, c *Client, path string, q url.Values, token string,
	parts func(*L) ([]T, int)) (provider.Page[T], error) {
	n, _ := strconv.Atoi(token)
	q.Set("page", strconv.Itoa(n))
	q.Set("page_size", strconv.Itoa(listPage))
	var l L
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url(path, q)}, &l); err != nil {
		return provider.Page[T]{}, err
	}
	items, total := parts(&l)
	p := provider.Page[T]{Items: items}
	if seen := n*listPage + len(items); len(items) == listPage && (total <= 0 || seen < total) {
		p.Next = strconv.Itoa(n + 1)
	}
	return p, nil
}

// unix is a creation time of unix seconds (zero when 0: unknown).
func unix(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0)
}

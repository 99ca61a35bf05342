// Package anthropic is the client of Anthropic's Message Batches API.
//
// There is no file upload: a chunk file is the create body itself,
// {"requests":[{"custom_id":...,"params":{...}}]}, streamed from disk with
// its exact Content-Length. Batches carry no metadata, so reconciling
// after a crash is heuristic (see Find).
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// DefaultVersion is the anthropic-version header sent.
const DefaultVersion = "2023-06-01"

// Config configures a Client. The zero Preset means the "anthropic"
// preset; BaseURL is without /v1, as the SDKs take it
// (https://api.anthropic.com); APIKey is sent as x-api-key; Header is sent
// with every request (anthropic-workspace-id, ...); FindWindow is how long
// after the intent a batch may have been created (default 15 min: the
// retries of one create fit in 10).
type Config struct {
	provider.Config
	Version string   // anthropic-version (default DefaultVersion)
	Beta    []string // anthropic-beta values, if any
	// FindSkew is how much earlier than the intent a batch may be stamped
	// by the provider's clock (default DefaultFindSkew).
	FindSkew time.Duration
	// Claimed, when set, reports whether a batch id is already recorded
	// for some chunk: Find never adopts those.
	Claimed func(batchID string) bool
}

// DefaultFindSkew is how much earlier than a chunk's create intent Find
// accepts a batch's created_at: the clock difference between this host and
// the provider's. Anthropic batches carry nothing of the chunk they were
// made for, so the time is the only thing that tells a batch this chunk's
// crashed create made from one made earlier for other content under the
// same job name (another state directory, a rewritten input): a batch
// stamped before intent - skew is never adopted. It was 2 minutes, which
// adopted such a batch (issue 21); a host whose clock runs ahead of
// Anthropic's by more than this may buy a crashed chunk's batch twice, never
// take another's answers.
const DefaultFindSkew = 2 * time.Second

// Client implements sluice.Provider for Anthropic.
type Client struct {
	provider.Base
	skew    time.Duration
	claimed func(string) bool
	own     sync.Map                // batch ids this process created or adopted
	rt      provider.RealtimeLimits // the synchronous API's rate-limit headers (realtime.go)
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	v := cfg.Version
	if v == "" {
		v = DefaultVersion
	}
	hdr := http.Header{"Anthropic-Version": {v}}
	if len(cfg.Beta) > 0 {
		hdr.Set("anthropic-beta", strings.Join(cfg.Beta, ","))
	}
	base, err := provider.NewBase(cfg.Config, provider.FamilyAnthropic, provider.Wire{
		AuthHeader: "x-api-key", Errors: httpx.AnthropicErrors, Header: hdr, FindWindow: 15 * time.Minute})
	if err != nil {
		return nil, err
	}
	c := &Client{Base: base, skew: cfg.FindSkew, claimed: cfg.Claimed}
	if c.skew <= 0 {
		c.skew = DefaultFindSkew
	}
	return c, nil
}

// Capabilities: no files (the chunk is the create call's body), and
// Untagged: Anthropic batches carry no metadata, so the dispatcher creates
// them one at a time for Find to adopt safely.
func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Untagged: true} }

func (c *Client) url(path string, q url.Values) string { return c.Join(path, q) }

func (c *Client) batchURL(id, suffix string) string {
	return c.url("/v1/messages/batches/"+url.PathEscape(id)+suffix, nil)
}

// Upload is not part of this API: batches are created from the body.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	return "", fmt.Errorf("anthropic: upload: %w (batches are created from the chunk body)", errors.ErrUnsupported)
}

// Create streams the chunk file as the body of POST /v1/messages/batches.
// A connection lost after the body was sent is settled with FindSince
// (from the start of this call) before the create is repeated.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, _ string) (sluice.Batch, error) {
	body, _, err := httpx.FileBody(ref.Path)
	if err != nil {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	}
	start := c.Clock.Now()
	b, err := provider.CreateBatch(ctx, c.HC, c.url("/v1/messages/batches", nil), body, ref, func(ctx context.Context) (*messageBatch, error) {
		return c.find(ctx, ref, start, c.Clock.Now())
	}, (*messageBatch).toBatch, c.Log)
	if err == nil {
		c.own.Store(b.ID, true)
	}
	return b, err
}

// Poll reads GET /v1/messages/batches/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	var w messageBatch
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.batchURL(batchID, "")}, &w); err != nil {
		return sluice.Batch{}, notFound("poll batch "+batchID, err)
	}
	return w.toBatch(), nil
}

// Cancel asks POST /v1/messages/batches/{id}/cancel. The batch goes to
// canceling; requests already running may still finish.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	var w messageBatch
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodPost, URL: c.batchURL(batchID, "/cancel")}, &w); err != nil {
		return sluice.Batch{}, notFound("cancel batch "+batchID, err)
	}
	return w.toBatch(), nil
}

// Fetch downloads the results (JSONL) into dir as <batch>.results.jsonl,
// from b.OutputFileID (the batch's results_url) when it is on the API's
// host, else from /v1/messages/batches/{id}/results: the key is never sent
// to another host.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	src := c.batchURL(b.ID, "/results")
	if u, err := url.Parse(b.OutputFileID); err == nil && b.OutputFileID != "" && u.Scheme == c.URL.Scheme && u.Host == c.URL.Host {
		src = b.OutputFileID
	}
	path := filepath.Join(dir, provider.SafeFileName(b.ID)+".results.jsonl")
	call := httpx.Call{Method: http.MethodGet, URL: src, Header: http.Header{"Accept": {"application/x-jsonl"}}}
	if _, err := c.HC.Download(ctx, call, path); err != nil {
		return nil, notFound("download results of batch "+b.ID, err)
	}
	return []string{path}, nil
}

// Forget does nothing: Anthropic keeps no input files, and an ended batch
// is kept until its results expire (29 days) rather than deleted, in case
// the results must be fetched again.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	return nil
}

// notFound wraps err with what, adding sluice.ErrNotFound to a 404.
func notFound(what string, err error) error {
	if httpx.IsNotFound(err) {
		return fmt.Errorf("%s: %w: %w", what, sluice.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// messageBatch is the API's MessageBatch.
type messageBatch struct {
	ID               string     `json:"id"`
	Type             string     `json:"type"`
	ProcessingStatus string     `json:"processing_status"`
	CreatedAt        time.Time  `json:"created_at"`
	EndedAt          *time.Time `json:"ended_at"`
	CancelInitiated  *time.Time `json:"cancel_initiated_at"`
	ResultsURL       string     `json:"results_url"`
	RequestCounts    struct {
		Processing int `json:"processing"`
		Succeeded  int `json:"succeeded"`
		Errored    int `json:"errored"`
		Canceled   int `json:"canceled"`
		Expired    int `json:"expired"`
	} `json:"request_counts"`
}

func (w *messageBatch) total() int {
	rc := w.RequestCounts
	return rc.Processing + rc.Succeeded + rc.Errored + rc.Canceled + rc.Expired
}

// toBatch maps a MessageBatch onto sluice's Batch: in_progress →
// in_progress, canceling → cancelling, ended → completed, or cancelled
// when a cancel was initiated. Completed counts succeeded requests, Failed
// errored, canceled and expired ones. OutputFileID carries results_url.
func (w *messageBatch) toBatch() sluice.Batch {
	b := sluice.Batch{ID: w.ID, ProviderStatus: w.ProcessingStatus, OutputFileID: w.ResultsURL,
		Total: w.total(), Completed: w.RequestCounts.Succeeded,
		Failed: w.RequestCounts.Errored + w.RequestCounts.Canceled + w.RequestCounts.Expired}
	switch strings.ToLower(w.ProcessingStatus) {
	case "canceling", "cancelling":
		b.Status = sluice.BatchCancelling
	case "ended":
		b.Status = sluice.BatchCompleted
		if w.CancelInitiated != nil {
			b.Status = sluice.BatchCancelled
		}
	default:
		b.Status = sluice.BatchInProgress
	}
	return b
}

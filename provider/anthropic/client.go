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

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// DefaultVersion is the anthropic-version header sent.
const DefaultVersion = "2023-06-01"

// Config configures a Client. The zero Preset means the "anthropic"
// preset.
type Config struct {
	Preset  provider.Preset
	BaseURL string // without /v1, as the SDKs take it: https://api.anthropic.com
	APIKey  string // sent as x-api-key
	HTTP    *http.Client
	Retry   httpx.Retry
	// RateLimit defaults to the preset's; Limiter, when set, is shared.
	RateLimit httpx.RateLimit
	Limiter   *httpx.Limiter
	Version   string   // anthropic-version (default DefaultVersion)
	Beta      []string // anthropic-beta values, if any
	// Header is sent with every request (anthropic-workspace-id, ...).
	Header http.Header
	Limits sluice.Limits // put over the preset's limits
	Logger zerolog.Logger
	// MaxLine bounds one result line in Decode (default
	// provider.DefaultMaxLine).
	MaxLine int
	Clock   httpx.Clock
	// FindSkew is how much earlier than the intent a batch may be stamped
	// by the provider's clock (default DefaultFindSkew); FindWindow how long after
	// the intent it may have been created (default 15 min: the retries of
	// one create fit in 10).
	FindSkew, FindWindow time.Duration
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
	preset  provider.Preset
	base    *url.URL
	hc      *httpx.Client
	limits  sluice.Limits
	maxLine int
	clock   httpx.Clock
	log     zerolog.Logger
	skew    time.Duration
	window  time.Duration
	claimed func(string) bool
	own     sync.Map                // batch ids this process created or adopted
	rt      provider.RealtimeLimits // the synchronous API's rate-limit headers (realtime.go)
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	p, base, err := provider.Resolve(cfg.Preset, provider.FamilyAnthropic, cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{preset: p, base: base, limits: p.Limits.Override(cfg.Limits), maxLine: cfg.MaxLine,
		clock: cfg.Clock, log: cfg.Logger, skew: cfg.FindSkew, window: cfg.FindWindow, claimed: cfg.Claimed}
	if c.clock == nil {
		c.clock = httpx.SystemClock{}
	}
	if c.skew <= 0 {
		c.skew = DefaultFindSkew
	}
	if c.window <= 0 {
		c.window = 15 * time.Minute
	}
	hdr := cfg.Header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	v := cfg.Version
	if v == "" {
		v = DefaultVersion
	}
	hdr.Set("anthropic-version", v)
	if len(cfg.Beta) > 0 {
		hdr.Set("anthropic-beta", strings.Join(cfg.Beta, ","))
	}
	c.hc = httpx.New(httpx.Config{
		HTTP: cfg.HTTP, Retry: cfg.Retry, Limiter: cfg.Limiter,
		RateLimit:  cfg.RateLimit.Or(httpx.RateLimit{PerSecond: p.RequestsPerSecond, Burst: p.Burst}),
		AuthHeader: "x-api-key", APIKey: cfg.APIKey,
		Header: hdr, Errors: httpx.AnthropicErrors, Clock: c.clock, Logger: cfg.Logger,
	})
	return c, nil
}

func (c *Client) Name() string          { return c.preset.Name }
func (c *Client) Codec() sluice.Codec   { return c.preset.Codec() }
func (c *Client) Limits() sluice.Limits { return c.limits }

// Capabilities: no files (the chunk is the create call's body), and
// Untagged: Anthropic batches carry no metadata, so the dispatcher creates
// them one at a time for Find to adopt safely.
func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Untagged: true} }

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

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
	start := c.clock.Now()
	var adopted *messageBatch
	call := httpx.Call{
		Method: http.MethodPost, URL: c.url("/v1/messages/batches", nil),
		Header: http.Header{"Content-Type": {"application/json"}}, Body: body,
		Reconcile: func(ctx context.Context) (bool, error) {
			b, err := c.find(ctx, ref, start, c.clock.Now())
			adopted = b
			return b != nil, err
		},
	}
	var w messageBatch
	switch err := c.hc.JSON(ctx, call, &w); {
	case errors.Is(err, httpx.ErrReconciled):
		c.log.Info().Str("batch_id", adopted.ID).Int64("chunk", ref.Chunk).Msg("create answer lost; adopted the created batch")
		w = *adopted
	case err != nil:
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	case w.ID == "":
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: answer carries no batch id", ref.Chunk)
	}
	c.own.Store(w.ID, true)
	return w.toBatch(), nil
}

// Poll reads GET /v1/messages/batches/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	var w messageBatch
	if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.batchURL(batchID, "")}, &w); err != nil {
		return sluice.Batch{}, notFound("poll batch "+batchID, err)
	}
	return w.toBatch(), nil
}

// Cancel asks POST /v1/messages/batches/{id}/cancel. The batch goes to
// canceling; requests already running may still finish.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	var w messageBatch
	if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodPost, URL: c.batchURL(batchID, "/cancel")}, &w); err != nil {
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
	if u, err := url.Parse(b.OutputFileID); err == nil && b.OutputFileID != "" && u.Scheme == c.base.Scheme && u.Host == c.base.Host {
		src = b.OutputFileID
	}
	path := filepath.Join(dir, provider.SafeFileName(b.ID)+".results.jsonl")
	call := httpx.Call{Method: http.MethodGet, URL: src, Header: http.Header{"Accept": {"application/x-jsonl"}}}
	if _, err := c.hc.Download(ctx, call, path); err != nil {
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

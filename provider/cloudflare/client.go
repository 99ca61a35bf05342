// Package cloudflare is the client of Workers AI asynchronous batches
// (beta).
//
// A chunk file is the body {"requests":[...]} with each request's custom_id
// in external_reference. Create POSTs it to
// /accounts/{account}/ai/run/{model}?queueRequest=true and gets a
// request_id, the batch id. Poll POSTs {"request_id":...} to the same URL;
// the final answer carries every response, so Poll streams it to a file
// that the client remembers by batch id and Fetch moves into place. There is no listing, no
// cancel and no deletion: Find returns sluice.ErrNoListing, Cancel an
// error wrapping errors.ErrUnsupported.
package cloudflare

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
	"regexp"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Config configures a Client. The zero Preset means the "cloudflare"
// preset. AccountID is required.
type Config struct {
	Preset    provider.Preset
	BaseURL   string // ends in /client/v4, as the SDKs take it
	AccountID string
	APIToken  string // sent as "Authorization: Bearer"
	HTTP      *http.Client
	Retry     httpx.Retry
	// RateLimit defaults to the preset's; Limiter, when set, is shared.
	RateLimit httpx.RateLimit
	Limiter   *httpx.Limiter
	Limits    sluice.Limits // put over the preset's limits
	Logger    zerolog.Logger
	Clock     httpx.Clock
	// PollWithoutQueueRequest polls without ?queueRequest=true, as an older
	// version of the docs did; the current docs keep it (the default).
	PollWithoutQueueRequest bool
	// TempDir is where Poll leaves a final answer until Fetch moves it
	// (default os.TempDir(); best on the same file system as the job).
	TempDir string
}

// Client implements sluice.Provider for Workers AI async batches.
type Client struct {
	preset  provider.Preset
	base    *url.URL
	account string
	hc      *httpx.Client
	limits  sluice.Limits
	pollQ   bool
	tmp     string
	log     zerolog.Logger
	// answers holds, by batch id, the file where Poll left a batch's final
	// answer, until Fetch takes it.
	answers sync.Map
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	p, base, err := provider.Resolve(cfg.Preset, provider.FamilyCloudflare, cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.AccountID == "" {
		return nil, fmt.Errorf("provider %s needs an account id (%s)", p.Name, p.AccountEnv)
	}
	c := &Client{preset: p, base: base, account: cfg.AccountID, limits: p.Limits.Override(cfg.Limits),
		pollQ: !cfg.PollWithoutQueueRequest, tmp: cfg.TempDir, log: cfg.Logger}
	if c.tmp == "" {
		c.tmp = os.TempDir()
	} else if err := os.MkdirAll(c.tmp, 0o700); err != nil {
		// Poll writes each answer here before Fetch reads it: without the
		// directory no batch could ever be read.
		return nil, fmt.Errorf("provider %s: temp dir: %w", p.Name, err)
	}
	c.hc = httpx.New(httpx.Config{
		HTTP: cfg.HTTP, Retry: cfg.Retry, Limiter: cfg.Limiter,
		RateLimit:  cfg.RateLimit.Or(httpx.RateLimit{PerSecond: p.RequestsPerSecond, Burst: p.Burst}),
		AuthHeader: "Authorization", AuthScheme: "Bearer", APIKey: cfg.APIToken,
		Errors: httpx.CloudflareErrors, Clock: cfg.Clock, Logger: cfg.Logger,
	})
	return c, nil
}

func (c *Client) Name() string          { return c.preset.Name }
func (c *Client) Codec() sluice.Codec   { return c.preset.Codec() }
func (c *Client) Limits() sluice.Limits { return c.limits }

// runURL is the model's run URL; the model name keeps its slashes
// (@cf/meta/llama-...): the live API answers a percent-encoded one
// (@cf%2Fmeta%2F..., the official SDKs' default) 400 code 7000 "No route
// for that URI". u.String escapes Path itself and never writes a %2F.
func (c *Client) runURL(model string, queue bool) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + "/accounts/" + url.PathEscape(c.account) + "/ai/run/" + strings.TrimLeft(model, "/")
	u.RawPath = ""
	if queue {
		u.RawQuery = "queueRequest=true"
	}
	return u.String()
}

func model(ref sluice.BatchRef) (string, error) {
	if ref.Model != "" {
		return ref.Model, nil
	}
	if m := strings.TrimPrefix(ref.URL, "/ai/run/"); m != ref.URL && m != "" {
		return m, nil
	}
	return "", fmt.Errorf("chunk %d names no model", ref.Chunk)
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// Upload is not part of this API.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	return "", fmt.Errorf("cloudflare: upload: %w (batches are created from the chunk body)", errors.ErrUnsupported)
}

// Create streams the chunk file to the model's run URL with
// ?queueRequest=true and returns the request_id as the batch id. There is
// no listing to reconcile with, so a create whose answer is lost after the
// body was sent is repeated: the batch may then run twice (docs/crash-safety.md).
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, _ string) (sluice.Batch, error) {
	m, err := model(ref)
	if err != nil {
		return sluice.Batch{}, err
	}
	body, _, err := httpx.FileBody(ref.Path)
	if err != nil {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	}
	var w struct {
		Result *struct {
			Status    string `json:"status"`
			RequestID string `json:"request_id"`
		} `json:"result"`
		Success bool       `json:"success"`
		Errors  []apiError `json:"errors"`
	}
	call := httpx.Call{Method: http.MethodPost, URL: c.runURL(m, true), Header: jsonHeader, Body: body}
	salvaged := ""
	err = c.hc.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			// The batch exists (2xx) but the answer broke: if its
			// request_id came through whole, keep it rather than queue
			// the batch a second time.
			if m := requestIDRe.FindSubmatch(b); m != nil {
				salvaged = string(m[1])
				return nil
			}
			return err
		}
		return json.Unmarshal(b, &w)
	})
	if err != nil {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	}
	if salvaged != "" {
		c.log.Warn().Str("batch_id", salvaged).Int64("chunk", ref.Chunk).Msg("create answer cut short; kept its request_id")
		return sluice.Batch{ID: salvaged, Status: sluice.BatchValidating, ProviderStatus: "queued", Total: ref.Requests}, nil
	}
	if !w.Success || w.Result == nil || w.Result.RequestID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, envelopeError(w.Errors, "answer carries no request_id"))
	}
	return sluice.Batch{ID: w.Result.RequestID, Status: mapStatus(w.Result.Status), ProviderStatus: w.Result.Status,
		Total: ref.Requests}, nil
}

// requestIDRe finds a whole request_id in a cut answer.
var requestIDRe = regexp.MustCompile(`"request_id"\s*:\s*"([A-Za-z0-9_-]+)"`)

// mapStatus maps queued to validating and running to in_progress; an
// unknown word (there is no documented list) to in_progress.
func mapStatus(s string) sluice.BatchStatus {
	switch strings.ToLower(s) {
	case "queued":
		return sluice.BatchValidating
	case "failed", "error":
		return sluice.BatchFailed
	}
	return sluice.BatchInProgress
}

// envelopeError is the error of a 2xx answer with success false.
func envelopeError(errs []apiError, fallback string) error {
	e := &sluice.APIError{Status: http.StatusOK, Message: fallback}
	if len(errs) > 0 {
		e.Code, e.Message = errs[0].Code.String(), errs[0].Message
	}
	return e
}

// Poll POSTs {"request_id":…} to the run URL and streams the answer to a
// temp file. While pending, the batch is validating (queued) or in_progress
// (running) and the file is removed. The final answer (result.responses
// present) makes the batch completed, and the file is kept for Fetch.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	m, err := model(ref)
	if err != nil {
		return sluice.Batch{}, err
	}
	body, err := httpx.JSONBody(map[string]string{"request_id": batchID})
	if err != nil {
		return sluice.Batch{}, err
	}
	// The directory is made here, not only in New: a state directory is
	// fresh on a first run, and may be cleaned while a job waits.
	if err := os.MkdirAll(c.tmp, 0o700); err != nil {
		return sluice.Batch{}, err
	}
	f, err := os.CreateTemp(c.tmp, "sluice-cloudflare-"+provider.SafeFileName(batchID)+"-*.json")
	if err != nil {
		return sluice.Batch{}, err
	}
	path := f.Name()
	f.Close()
	keep := false
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()
	call := httpx.Call{Method: http.MethodPost, URL: c.runURL(m, c.pollQ), Header: jsonHeader, Body: body}
	if _, err := c.hc.Download(ctx, call, path); err != nil {
		return sluice.Batch{}, fmt.Errorf("poll batch %s: %w", batchID, err)
	}
	env, err := readEnvelope(path)
	if err != nil {
		return sluice.Batch{}, fmt.Errorf("poll batch %s: %w", batchID, err)
	}
	if env.Success != nil && !*env.Success {
		return sluice.Batch{}, fmt.Errorf("poll batch %s: %w", batchID, envelopeError(env.Errors, "success false"))
	}
	b := sluice.Batch{ID: batchID, ProviderStatus: env.Status, Total: ref.Requests}
	if env.Final {
		keep = true
		if old, ok := c.answers.Swap(batchID, path); ok {
			os.Remove(old.(string)) // an earlier final answer never fetched
		}
		b.Status = sluice.BatchCompleted
		if b.ProviderStatus == "" {
			b.ProviderStatus = "done"
		}
		return b, nil
	}
	b.Status = mapStatus(env.Status)
	return b, nil
}

func readEnvelope(path string) (envelope, error) {
	f, err := os.Open(path)
	if err != nil {
		return envelope{}, err
	}
	defer f.Close()
	return scanEnvelope(f, nil)
}

// Fetch moves the final answer Poll left for the batch into dir as
// <request_id>.responses.json. When there is none (this process did not
// poll it to its end, or the file is gone), it polls again.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	path, ok := c.answer(b.ID)
	if !ok {
		nb, err := c.Poll(ctx, ref, b.ID)
		if err != nil {
			return nil, err
		}
		if path, ok = c.answer(b.ID); !ok {
			return nil, fmt.Errorf("fetch batch %s: not finished (%s)", b.ID, nb.ProviderStatus)
		}
	}
	dst := filepath.Join(dir, provider.SafeFileName(b.ID)+".responses.json")
	if err := move(path, dst); err != nil {
		return nil, fmt.Errorf("fetch batch %s: %w", b.ID, err)
	}
	return []string{dst}, nil
}

// answer takes the file of a batch's final answer that Poll left, if it is
// still there.
func (c *Client) answer(batchID string) (string, bool) {
	v, ok := c.answers.LoadAndDelete(batchID)
	if !ok {
		return "", false
	}
	path := v.(string)
	if _, err := os.Stat(path); err != nil {
		return "", false
	}
	return path, true
}

// move renames src to dst, copying (temp file, sync, rename) across file
// systems.
func move(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := atomicfile.Create(dst)
	if err != nil {
		return err
	}
	defer out.Abort() // nothing once committed
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	if err := out.Commit(); err != nil {
		return err
	}
	return os.Remove(src)
}

// Cancel is not offered by the API.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	return sluice.Batch{}, fmt.Errorf("cloudflare: cancel batch %s: %w", batchID, errors.ErrUnsupported)
}

// Find cannot look: the API lists nothing.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (string, string, error) {
	return "", "", sluice.ErrNoListing
}

// Forget does nothing: the API keeps no files sluice could delete.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	return nil
}

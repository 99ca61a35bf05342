// Package xai is the client of xAI's batch API (docs/providers/xai.md has
// the wire facts and the choices taken where they are unconfirmed).
//
// A batch is created empty under a name, POST /batches {"name"}, and its
// requests are added by POST /batches/{id}/requests calls of at most
// 25 MB ({"batch_requests":[...]}), or, with Input "file", read from a
// JSONL file uploaded to the Files API (create's input_file_id). A chunk
// file is those request lines themselves (provider.XAICodec). The batch
// name is sluice-<job>-c<chunk>-a<attempt>-d<digest>: after a crash Find
// adopts the batch whose name carries the chunk's digest, and adds the
// requests a killed run had not added yet (GET /batches/{id}/requests says
// which are there), so no request is bought twice. A batch has no status:
// it is done when state.num_pending is 0. Results are read page by page
// (GET /batches/{id}/results, pagination_token) and mapped by
// batch_request_id.
package xai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Input flows.
const (
	InputRequests = "requests" // add-requests calls (the default)
	InputFile     = "file"     // a JSONL file uploaded, then create with input_file_id
)

// Cancel paths: the proto's custom method (POST /batches/{id}:cancel) or
// the REST path some clients use (POST /batches/{id}/cancel).
const (
	CancelColon = ":cancel"
	CancelSlash = "/cancel"
)

// Defaults.
const (
	// DefaultAddBytes bounds the body of one add-requests call: the docs'
	// 25 MB, read as decimal megabytes (the smaller reading).
	DefaultAddBytes = 25_000_000
	// DefaultPageSize is the limit asked of listings and result pages.
	DefaultPageSize = 100
	// DefaultCreateInterval paces creates: xAI takes one batch created
	// per second per team; the margin is for the time a call takes to
	// arrive, so two creates do not reach it less than a second apart.
	DefaultCreateInterval = 1100 * time.Millisecond
	// DefaultFindWindow is how far back Find looks at batches.
	DefaultFindWindow = 7 * 24 * time.Hour
)

// Config configures a Client. The zero Preset means the "xai" preset;
// BaseURL is with /v1 (https://api.x.ai/v1), as the SDKs take it; APIKey
// is sent as Authorization: Bearer.
type Config struct {
	provider.Config
	// Input is InputRequests (default) or InputFile.
	Input string
	// AddBytes bounds one add-requests call (default DefaultAddBytes).
	AddBytes int64
	// CancelPath is CancelColon (default) or CancelSlash.
	CancelPath string
	// PageSize is the limit of a listing or results page (default 100).
	PageSize int
	// CreateInterval is the least time between two batch creates (default
	// DefaultCreateInterval).
	CreateInterval time.Duration
}

// Client implements sluice.Provider for xAI.
type Client struct {
	provider.Base
	files    compat.Files // the JSONL input files of InputFile
	input    string
	addBytes int64
	cancel   string
	page     int
	creates  *httpx.Limiter
}

var _ sluice.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	base, err := provider.NewBase(cfg.Config, provider.FamilyXAI, provider.Wire{Errors: Errors, FindWindow: DefaultFindWindow})
	if err != nil {
		return nil, err
	}
	c := &Client{Base: base, input: cfg.Input, addBytes: cfg.AddBytes, cancel: cfg.CancelPath, page: cfg.PageSize}
	if c.input, err = c.Choice("input flow", c.input, InputRequests, InputFile); err != nil {
		return nil, err
	}
	if c.cancel, err = c.Choice("cancel path", c.cancel, CancelColon, CancelSlash); err != nil {
		return nil, err
	}
	if c.addBytes <= 0 {
		c.addBytes = DefaultAddBytes
	}
	if c.page <= 0 {
		c.page = DefaultPageSize
	}
	every := cfg.CreateInterval
	if every <= 0 {
		every = DefaultCreateInterval
	}
	c.creates = httpx.NewLimiter(httpx.RateLimit{PerSecond: float64(time.Second) / float64(every), Burst: 1}, c.Clock)
	c.files = compat.Files{Base: &c.Base, FileURL: func(id string) string { return c.url("/files/"+url.PathEscape(id), nil) }}
	return c, nil
}

// Capabilities: with InputFile the chunk is uploaded first (Files).
func (c *Client) Capabilities() sluice.Capabilities {
	return sluice.Capabilities{Files: c.input == InputFile}
}

func (c *Client) url(path string, q url.Values) string { return c.Join(path, q) }

func (c *Client) batchURL(id, suffix string) string {
	return c.url("/batches/"+url.PathEscape(id)+suffix, nil)
}

// Errors decodes xAI's error bodies, {"code":"…","error":"…"}, and the
// OpenAI envelope.
func Errors(body []byte) (code, message string) {
	if e := gjson.GetBytes(body, "error"); e.Type == gjson.String {
		return gjson.GetBytes(body, "code").String(), e.String()
	}
	return httpx.OpenAIErrors(body)
}

// batch is the Batch message, as far as sluice reads it.
type batch struct {
	ID          string    `json:"batch_id"`
	Name        string    `json:"name"`
	CreateTime  time.Time `json:"create_time"`
	CancelTime  *string   `json:"cancel_time"`
	InputFileID string    `json:"input_file_id"`
	State       struct {
		NumRequests  int `json:"num_requests"`
		NumPending   int `json:"num_pending"`
		NumSuccess   int `json:"num_success"`
		NumError     int `json:"num_error"`
		NumCancelled int `json:"num_cancelled"`
	} `json:"state"`
}

func (b *batch) cancelled() bool { return b.CancelTime != nil && *b.CancelTime != "" }

// status maps a batch onto sluice's statuses: xAI has none. A cancelled
// batch is cancelling while requests are pending, then cancelled; else it
// is done (completed) when it has requests and none is pending.
func (b *batch) status() (sluice.BatchStatus, string) {
	st := &b.State
	switch {
	case b.cancelled() && st.NumPending > 0:
		return sluice.BatchCancelling, "cancelling"
	case b.cancelled():
		return sluice.BatchCancelled, "cancelled"
	case st.NumRequests > 0 && st.NumPending == 0:
		return sluice.BatchCompleted, "done"
	}
	return sluice.BatchInProgress, "pending"
}

func (b *batch) toBatch() sluice.Batch {
	st, word := b.status()
	return sluice.Batch{ID: b.ID, Status: st, ProviderStatus: word, Total: b.State.NumRequests,
		Completed: b.State.NumSuccess, Failed: b.State.NumError}
}

// Upload (InputFile only) streams the chunk file to POST /files as
// multipart/form-data under the name sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl
// (purpose batch). A connection lost after the whole file was sent is
// settled by listing files before the upload is repeated.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	if c.input != InputFile {
		return "", fmt.Errorf("xai: upload: %w (requests are added to the batch)", errors.ErrUnsupported)
	}
	id, _, err := compat.UploadChunk(ctx, c.HC, c.url("/files", nil), []httpx.Field{{Name: "purpose", Value: "batch"}}, ref,
		func(ctx context.Context) (string, error) { return c.findFile(ctx, ref) }, c.Log)
	return id, err
}

// Create makes the batch named provider.BaseName(ref) (POST /batches, at
// most one a CreateInterval; from fileID with InputFile) and, with
// InputRequests, adds the chunk's requests (fill). A connection lost after the
// create was sent is settled by listing batches for that name before the
// create is repeated.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if c.input == InputFile && fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: no input file id", ref.Chunk)
	}
	req := map[string]string{"name": provider.BaseName(ref)}
	if fileID != "" {
		req["input_file_id"] = fileID
	}
	// The wait for the create slot and the create itself are not cut by a
	// cancelled ctx: a create cut while it waited would leave the chunk's
	// intent for the next run to wait out (the reconcile grace), and one
	// that was sent is found by its name. ctx is looked at after.
	sctx := context.WithoutCancel(ctx)
	if err := c.creates.Wait(sctx); err != nil {
		return sluice.Batch{}, err
	}
	adopted := false
	b, err := compat.CreateBatch(sctx, c.HC, c.url("/batches", nil), req, ref, func(ctx context.Context) (*batch, error) {
		b, err := c.findBatch(ctx, ref)
		adopted = b != nil
		return b, err
	}, (*batch).toBatch, c.Log)
	switch {
	case err != nil:
		return b, err
	case ctx.Err() != nil:
		return sluice.Batch{}, ctx.Err() // made: the next run adopts it by name
	case c.input == InputFile:
		return b, nil
	}
	if err := c.fill(ctx, ref, b.ID, adopted); err != nil {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: %w", ref.Chunk, err)
	}
	return b, nil
}

// Poll reads GET /batches/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	return compat.BatchCall(ctx, c.HC, http.MethodGet, c.batchURL(batchID, ""), "poll batch "+batchID, (*batch).toBatch)
}

// Cancel asks POST /batches/{id}:cancel (or /cancel, CancelPath). A
// refused cancel of a batch that has ended answers the batch.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	return compat.CancelBatch(ctx, c.HC, c.batchURL(batchID, c.cancel), c.batchURL(batchID, ""), batchID, (*batch).toBatch)
}

// Find looks for what a previous run made for ref: the batch named
// provider.BaseName(ref), which carries ref's digest, made from ref's file
// when the tracker knows it (GET /batches, newest first, paged with
// pagination_token; a live batch is preferred to a cancelled one). A live
// batch found is completed: the requests a killed run had not added yet
// are added. Else, with InputFile, the file uploaded under ref's name
// with ref's size. A chunk without a digest adopts nothing: no name
// proves a batch is its.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	b, err := c.findBatch(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, err)
	}
	if b != nil {
		// A batch takes requests until it is cancelled, done or not.
		if c.input == InputRequests && !b.cancelled() && b.State.NumRequests < ref.Requests {
			if err := c.fill(ctx, ref, b.ID, true); err != nil {
				return "", "", fmt.Errorf("complete batch %s of chunk %d: %w", b.ID, ref.Chunk, err)
			}
		}
		return b.InputFileID, b.ID, nil
	}
	if c.input != InputFile {
		return "", "", nil
	}
	id, err := c.findFile(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find file of chunk %d: %w", ref.Chunk, err)
	}
	return id, "", nil
}

// findBatch returns the batch made for ref, or nil.
func (c *Client) findBatch(ctx context.Context, ref sluice.BatchRef) (*batch, error) {
	if ref.Digest == "" {
		return nil, nil
	}
	want := provider.BaseName(ref)
	l := provider.Listing[batch]{
		Page: func(ctx context.Context, token string) (provider.Page[batch], error) {
			var w struct {
				Batches []batch `json:"batches"`
				Token   *string `json:"pagination_token"`
			}
			err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/batches", c.pageQuery(token))}, &w)
			return provider.Page[batch]{Items: w.Batches, Next: deref(w.Token)}, err
		},
		Created: func(b *batch) time.Time { return b.CreateTime },
		Cutoff:  c.Cutoff(),
	}
	return l.Adopt(ctx, func(b *batch) bool {
		return b.Name == want && (ref.FileID == "" || b.InputFileID == ref.FileID)
	}, func(b *batch) sluice.BatchStatus { st, _ := b.status(); return st })
}

// findFile returns the id of the newest file uploaded for ref, or "".
func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (string, error) {
	if ref.Digest == "" {
		return "", nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	var l struct {
		Data []struct {
			ID        string `json:"id"`
			Filename  string `json:"filename"`
			Bytes     int64  `json:"bytes"`
			CreatedAt int64  `json:"created_at"`
		} `json:"data"`
	}
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files", nil)}, &l); err != nil {
		return "", err
	}
	id, newest := "", int64(-1)
	for _, f := range l.Data {
		if provider.MatchesFile(f.Filename, f.Bytes, ref) && f.CreatedAt > newest {
			id, newest = f.ID, f.CreatedAt
		}
	}
	return id, nil
}

func (c *Client) pageQuery(token string) url.Values {
	q := url.Values{"limit": {strconv.Itoa(c.page)}}
	if token != "" {
		q.Set("pagination_token", token)
	}
	return q
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Fetch reads the batch's results, page by page (GET
// /batches/{id}/results), into dir as <batch>.results.jsonl, one result
// per line; only a page at a time is held.
func (c *Client) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	path := filepath.Join(dir, provider.SafeFileName(b.ID)+".results.jsonl")
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Abort()
	w := bufio.NewWriter(f)
	token := ""
	for range provider.MaxPages {
		var page struct {
			Results []json.RawMessage `json:"results"`
			Token   *string           `json:"pagination_token"`
		}
		u := c.batchURL(b.ID, "/results") + "?" + c.pageQuery(token).Encode()
		if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: u}, &page); err != nil {
			return nil, compat.NotFound("read results of batch "+b.ID, err)
		}
		for _, r := range page.Results {
			w.Write(r)
			w.WriteByte('\n')
		}
		next := deref(page.Token)
		if next == "" || next == token {
			break
		}
		token = next
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if err := f.Commit(); err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// Decode reads results lines (DecodeLine).
func (c *Client) Decode(ctx context.Context, ref sluice.BatchRef, files []string, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	return provider.DecodeJSONL(ctx, files, c.MaxLine, DecodeLine, fn)
}

// Forget deletes the batch's input files (InputFile); batches themselves
// cannot be deleted.
func (c *Client) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	return c.files.Forget(ctx, ref, fileIDs...)
}

// Package together is the client of Together AI's batch API
// (docs/providers/together.md). The base URL includes the version
// (https://api.together.xyz/v1), as the SDKs take it.
//
// Upload follows the official Python and JS SDKs by default: POST /files
// with purpose, file_name and file_type, not following the 302 it answers;
// PUT the bytes to the signed URL of its Location (without the API key:
// the URL carries its own signature); POST /files/{id}/preprocess. The Go
// SDK's single multipart POST /files/upload is the other flow
// (UploadMultipart). Create answers 201 {"job":…,"warning":…}; get and
// cancel answer the job bare; list answers a bare array. Jobs carry no
// metadata: a job is found again by its input file, whose name
// (sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl) names the chunk.
package together

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Upload flows.
const (
	UploadRedirect  = "redirect"  // POST /files -> 302, PUT signed URL, POST /files/{id}/preprocess (Python/JS SDKs)
	UploadMultipart = "multipart" // POST /files/upload multipart (Go SDK)
)

// Config configures a Client: the zero Preset means the "together"
// preset; BaseURL is with /v1; APIKey is sent as Authorization: Bearer.
type Config struct {
	provider.Config
	// Upload is UploadRedirect (default) or UploadMultipart.
	Upload string
	// CompletionWindow is sent on create (default the preset's, "24h").
	CompletionWindow string
}

// Client implements sluice.Provider for Together.
type Client struct {
	provider.Base
	compat.Files // Fetch, Decode, StreamResults, Forget
	base         string
	noRedir      *httpx.Client // the API, 302 answered (upload step 1)
	signed       *httpx.Client // signed upload URLs: no API key
	upload       string
	window       string
	// CallRealtime: the body to the batch's endpoint under the base URL
	// (which carries /v1).
	compat.Realtime
}

var (
	_ sluice.Provider       = (*Client)(nil)
	_ sluice.ResultStreamer = (*Client)(nil)
	_ sluice.RealtimeCaller = (*Client)(nil)
)

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	wire := provider.Wire{Errors: httpx.OpenAIErrors}
	base, err := provider.NewBase(cfg.Config, provider.FamilyTogether, wire)
	if err != nil {
		return nil, err
	}
	u := *base.URL
	u.RawQuery = ""
	c := &Client{Base: base, base: u.String(), upload: cfg.Upload, window: cfg.CompletionWindow}
	if c.upload, err = c.Choice("upload flow", c.upload, UploadRedirect, UploadMultipart); err != nil {
		return nil, err
	}
	if c.window == "" {
		c.window = c.Preset.CompletionWindow
	}
	hcCfg := c.HTTPConfig(cfg.Config, wire)
	if hcCfg.HTTP == nil {
		hcCfg.HTTP = httpx.DefaultHTTPClient()
	}
	base0 := hcCfg.HTTP
	nr := *base0
	nr.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hcCfg.HTTP = &nr
	c.noRedir = httpx.New(hcCfg)
	hcCfg.HTTP, hcCfg.APIKey = base0, ""
	c.signed = httpx.New(hcCfg)
	c.Files = compat.Files{Base: &c.Base, FileURL: c.fileURL}
	c.Realtime = compat.Realtime{Base: &c.Base, URL: func(endpoint string) string { return c.url(strings.TrimPrefix(endpoint, "/v1")) }}
	return c, nil
}

func (c *Client) Capabilities() sluice.Capabilities { return sluice.Capabilities{Files: true} }

func (c *Client) url(path string) string    { return c.base + path }
func (c *Client) fileURL(id string) string  { return c.url("/files/" + url.PathEscape(id)) }
func (c *Client) batchURL(id string) string { return c.url("/batches/" + url.PathEscape(id)) }

// fileObject is FileResponse, as far as sluice reads it (note the
// capitalised Processed of the wire).
type fileObject struct {
	ID               string `json:"id"`
	Bytes            int64  `json:"bytes"`
	CreatedAt        int64  `json:"created_at"`
	Filename         string `json:"filename"`
	Purpose          string `json:"purpose"`
	Processed        *bool  `json:"Processed"`
	ProcessingStatus string `json:"processing_status"`
}

// usable reports whether a batch can be created from the file.
func (f *fileObject) usable() bool {
	switch strings.ToUpper(f.ProcessingStatus) {
	case "FAILED", "INVALID_FORMAT":
		return false
	}
	return f.Processed == nil || *f.Processed
}

// job is BatchJob, as far as sluice reads it.
type job struct {
	ID            string     `json:"id"`
	InputFileID   string     `json:"input_file_id"`
	FileSizeBytes int64      `json:"file_size_bytes"`
	Status        string     `json:"status"`
	CreatedAt     *time.Time `json:"created_at"`
	Endpoint      string     `json:"endpoint"`
	Progress      float64    `json:"progress"`
	ModelID       string     `json:"model_id"`
	OutputFileID  string     `json:"output_file_id"`
	ErrorFileID   string     `json:"error_file_id"`
	Error         string     `json:"error"`
}

// toBatch maps a job onto sluice's Batch.
func (j *job) toBatch() sluice.Batch {
	b := sluice.Batch{ID: j.ID, Status: compat.MapStatus(j.Status), ProviderStatus: j.Status,
		OutputFileID: j.OutputFileID, ErrorFileID: j.ErrorFileID}
	if j.Error != "" {
		b.Errors = []sluice.BatchError{{Message: j.Error}}
	}
	return b
}

// Upload sends the chunk file by the configured flow under the name
// sluice-<job>-c<chunk>-a<attempt>-d<digest>.jsonl with purpose batch-api.
func (c *Client) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	if c.upload == UploadMultipart {
		return c.uploadMultipart(ctx, ref)
	}
	id, err := c.uploadRedirect(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("upload chunk %d: %w", ref.Chunk, err)
	}
	return id, nil
}

// uploadRedirect: POST /files (form purpose, file_name, file_type), whose
// 302 names the signed URL (Location) and the file id
// (X-Together-File-Id); PUT the bytes there; POST
// /files/{id}/preprocess. Each step is safe to repeat: a lost first answer
// leaves a file record without content, which is never used.
func (c *Client) uploadRedirect(ctx context.Context, ref sluice.BatchRef) (string, error) {
	name := provider.UploadName(ref)
	form := url.Values{"purpose": {"batch-api"}, "file_name": {name}, "file_type": {"jsonl"}}
	var loc, id string
	err := c.noRedir.Send(ctx, httpx.Call{
		Method: http.MethodPost, URL: c.url("/files"),
		Header:   http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
		Body:     httpx.BytesBody([]byte(form.Encode())),
		Statuses: []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusSeeOther},
	}, func(resp *http.Response) error {
		defer resp.Body.Close()
		loc, id = resp.Header.Get("Location"), resp.Header.Get("X-Together-File-Id")
		return nil
	})
	if err != nil {
		return "", err
	}
	if loc == "" || id == "" {
		return "", errors.New("POST /files answered without Location and X-Together-File-Id")
	}
	target, err := url.Parse(c.base)
	if err == nil {
		var u *url.URL
		if u, err = target.Parse(loc); err == nil {
			loc = u.String()
		}
	}
	if err != nil {
		return "", fmt.Errorf("bad Location %q: %w", loc, err)
	}
	body, _, err := httpx.FileBody(ref.Path)
	if err != nil {
		return "", err
	}
	if err := c.signed.JSON(ctx, httpx.Call{Method: http.MethodPut, URL: loc,
		Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: body}, nil); err != nil {
		return "", fmt.Errorf("PUT to the signed upload URL: %w", err)
	}
	var f fileObject
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodPost, URL: c.fileURL(id) + "/preprocess"}, &f); err != nil {
		return "", fmt.Errorf("preprocess file %s: %w", id, err)
	}
	if f.ID != "" && f.ID != id {
		return "", fmt.Errorf("preprocess file %s answered file %s", id, f.ID)
	}
	if !f.usable() {
		return "", fmt.Errorf("file %s was not accepted: processing_status %s", id, f.ProcessingStatus)
	}
	return id, nil
}

// uploadMultipart: POST /files/upload with file, file_name, purpose and
// file_type, as the Go SDK does. A connection lost after the whole file
// was sent is settled by listing files before the upload is repeated.
func (c *Client) uploadMultipart(ctx context.Context, ref sluice.BatchRef) (string, error) {
	name := provider.UploadName(ref)
	id, raw, err := compat.UploadChunk(ctx, c.HC, c.url("/files/upload"), []httpx.Field{{Name: "file_name", Value: name},
		{Name: "purpose", Value: "batch-api"}, {Name: "file_type", Value: "jsonl"}}, ref,
		provider.FileIDOf(ref, c.findFile, (*fileObject).id), c.Log)
	if err != nil || raw == nil {
		return id, err
	}
	var f fileObject
	if err := json.Unmarshal(raw, &f); err != nil {
		return "", err
	}
	if !f.usable() {
		return "", fmt.Errorf("file %s was not accepted: processing_status %s", f.ID, f.ProcessingStatus)
	}
	return id, nil
}

// createRequest is the create body.
type createRequest struct {
	Endpoint         string `json:"endpoint"`
	InputFileID      string `json:"input_file_id"`
	CompletionWindow string `json:"completion_window,omitempty"`
	ModelID          string `json:"model_id,omitempty"`
}

// Create starts a batch: POST /batches, answered 201 {"job":…,"warning":…}
// (the warning is logged). A connection lost after the request was sent is
// settled by listing batches for one made from fileID before the create is
// repeated.
func (c *Client) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if fileID == "" {
		return sluice.Batch{}, fmt.Errorf("create batch for chunk %d: no input file id", ref.Chunk)
	}
	req := createRequest{Endpoint: ref.URL, InputFileID: fileID, CompletionWindow: c.window, ModelID: ref.Model}
	return compat.CreateBatch(ctx, c.HC, c.url("/batches"), req, ref, func(ctx context.Context) (*created, error) {
		j, err := c.findJob(ctx, func(id string) bool { return id == fileID })
		if j == nil {
			return nil, err
		}
		return &created{Job: j}, err
	}, c.createdBatch, c.Log)
}

// created is the answer to create.
type created struct {
	Job     *job   `json:"job"`
	Warning string `json:"warning"`
}

// createdBatch maps create's answer, logging its warning.
func (c *Client) createdBatch(w *created) sluice.Batch {
	if w.Job == nil {
		return sluice.Batch{}
	}
	if w.Warning != "" {
		c.Log.Warn().Str("batch_id", w.Job.ID).Str("warning", w.Warning).Msg("together: warning on batch create")
	}
	return w.Job.toBatch()
}

// Poll reads GET /batches/{id}.
func (c *Client) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	return compat.BatchCall(ctx, c.HC, http.MethodGet, c.batchURL(batchID), "poll batch "+batchID, (*job).toBatch)
}

// Cancel asks POST /batches/{id}/cancel. A refused cancel of a batch that
// has ended answers the batch (compat.CancelBatch): the emulator, like the
// API as documented, cancels at once, so a cancel repeated after a lost
// answer is refused.
func (c *Client) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	return compat.CancelBatch(ctx, c.HC, c.batchURL(batchID)+"/cancel", c.batchURL(batchID), batchID, (*job).toBatch)
}

// Find looks for what a previous run made for ref: the usable files
// uploaded under ref's name, which carries its digest, with ref's size
// (provider.MatchesFile; GET /files), and a batch made from one of them, or
// from ref's file when the tracker knows it (GET /batches, a bare array; a
// live batch is preferred to a failed, expired or cancelled one), else the
// newest of the files. A chunk without a digest adopts no file, and a batch
// only when made from ref.FileID.
// Files under ref's name that are not usable are leftovers of uploads a
// crash cut short (announced, never completed): no batch can be made from
// them, and Find deletes them (best effort), as nothing else would.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	usable, leftovers, err := c.findFiles(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find file of chunk %d: %w", ref.Chunk, err)
	}
	if len(leftovers) > 0 {
		if err := c.Forget(ctx, ref, leftovers...); err != nil {
			c.Log.Debug().Err(err).Msg("deleting the leftovers of interrupted uploads failed")
		} else {
			c.Log.Info().Strs("file_ids", leftovers).Msg("deleted the leftovers of interrupted uploads")
		}
	}
	ids := map[string]bool{}
	for _, f := range usable {
		ids[f.ID] = true
	}
	if ref.FileID != "" {
		// The tracker knows the chunk's file: only a batch made from it.
		ids = map[string]bool{ref.FileID: true}
	}
	if len(ids) == 0 {
		return "", "", nil
	}
	j, err := c.findJob(ctx, func(id string) bool { return ids[id] })
	if err != nil {
		return "", "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, err)
	}
	if j != nil {
		return j.InputFileID, j.ID, nil
	}
	if len(usable) == 0 {
		return "", "", nil
	}
	return usable[0].ID, "", nil
}

// findFile returns the newest usable file uploaded for ref, or nil.
func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	usable, _, err := c.findFiles(ctx, ref)
	if len(usable) == 0 {
		return nil, err
	}
	return &usable[0], err
}

// id is the file's id.
func (f *fileObject) id() string { return f.ID }

// findFiles returns the usable files uploaded for ref, newest first, and
// the ids of the files under ref's name that are not usable.
func (c *Client) findFiles(ctx context.Context, ref sluice.BatchRef) ([]fileObject, []string, error) {
	if ref.Digest == "" {
		return nil, nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	name := provider.UploadName(ref)
	var l struct {
		Data []fileObject `json:"data"`
	}
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files")}, &l); err != nil {
		return nil, nil, err
	}
	var usable []fileObject
	var leftovers []string
	for _, f := range l.Data {
		switch {
		case f.Filename != name:
		case f.usable() && provider.MatchesFile(f.Filename, f.Bytes, ref):
			usable = append(usable, f)
		case !f.usable():
			leftovers = append(leftovers, f.ID)
		}
	}
	sort.SliceStable(usable, func(i, j int) bool { return usable[i].CreatedAt > usable[j].CreatedAt })
	return usable, leftovers, nil
}

// findJob returns the batch made from a file that made says is ref's, or
// nil.
func (c *Client) findJob(ctx context.Context, made func(fileID string) bool) (*job, error) {
	var raw json.RawMessage
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/batches")}, &raw); err != nil {
		return nil, err
	}
	var l []job
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("GET /batches: want a JSON array: %w", err)
	}
	var pick provider.Adopt[job]
	for i := range l {
		if made(l[i].InputFileID) && pick.Offer(&l[i], compat.MapStatus(l[i].Status)) {
			break
		}
	}
	return pick.Best(), nil
}

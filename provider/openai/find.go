package openai

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// listPage is the page size of listings: the spec allows up to 100 batches
// and 10,000 files per page; 100 is what every compatible provider takes.
const listPage = 100

// maxPages bounds a listing, whatever the server says about has_more.
const maxPages = 10_000

// Find looks for what a previous run made for ref: the batch whose
// metadata names ref's job, chunk, attempt and digest, made from ref's file
// when the tracker knows it (provider.MatchesMetadata; GET /batches, newest
// first, paged with after), and the file uploaded under ref's name, which
// carries its digest, with ref's size (provider.MatchesFile; GET
// /files?purpose=batch). Listings stop at has_more false, or at a
// page entirely older than the find window. When several batches match
// (a create repeated after a lost answer), a live one is preferred to a
// failed, expired or cancelled one, then the newest. When the batch is
// found, its input file is the file.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	b, err := c.findBatch(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, err)
	}
	if b != nil {
		return b.InputFileID, b.ID, nil
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

func (c *Client) cutoff() time.Time { return c.clock.Now().Add(-c.findBack) }

// findBatch returns the batch made for ref, or nil.
func (c *Client) findBatch(ctx context.Context, ref sluice.BatchRef) (*batchObject, error) {
	cutoff := c.cutoff()
	var pick provider.Adopt[batchObject]
	after := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"limit": {strconv.Itoa(listPage)}}
		if after != "" {
			q.Set("after", after)
		}
		var l batchList
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/batches", q)}, &l); err != nil {
			return nil, err
		}
		allOld := len(l.Data) > 0
		for i := range l.Data {
			b := &l.Data[i]
			if b.CreatedAt.IsZero() || !b.CreatedAt.Before(cutoff) {
				allOld = false
			}
			if provider.MatchesMetadata(b.Metadata, b.InputFileID, ref) && pick.Offer(b, MapStatus(b.Status)) {
				return b, nil
			}
		}
		next := l.LastID
		if next == "" && len(l.Data) > 0 {
			next = l.Data[len(l.Data)-1].ID
		}
		if !l.HasMore || allOld || next == "" || next == after {
			break
		}
		after = next
	}
	return pick.Best(), nil
}

// findFile returns the newest batch file uploaded for ref, or nil.
func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	if ref.Digest == "" {
		return nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	cutoff := c.cutoff()
	after := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"purpose": {"batch"}, "limit": {strconv.Itoa(listPage)}, "order": {"desc"}}
		if after != "" {
			q.Set("after", after)
		}
		var l fileList
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files", q)}, &l); err != nil {
			return nil, err
		}
		allOld := len(l.Data) > 0
		for i := range l.Data {
			f := &l.Data[i]
			if f.CreatedAt.IsZero() || !f.CreatedAt.Before(cutoff) {
				allOld = false
			}
			if provider.MatchesFile(f.Filename, f.Bytes, ref) && f.Status != "error" && f.Status != "deleted" {
				return f, nil
			}
		}
		next := l.LastID
		if next == "" && len(l.Data) > 0 {
			next = l.Data[len(l.Data)-1].ID
		}
		if !l.HasMore || allOld || next == "" || next == after {
			break
		}
		after = next
	}
	return nil, nil
}

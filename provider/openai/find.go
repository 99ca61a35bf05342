package openai

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// listPage is the page size of listings: the spec allows up to 100 batches
// and 10,000 files per page; 100 is what every compatible provider takes.
const listPage = 100

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
	return provider.FindBatchOrFile(ctx, ref, c.findBatch, func(b *batchObject) (string, string) { return b.InputFileID, b.ID },
		c.findFile, (*fileObject).id)
}

// findBatch returns the batch made for ref, or nil.
func (c *Client) findBatch(ctx context.Context, ref sluice.BatchRef) (*batchObject, error) {
	l := provider.Listing[batchObject]{
		Page: func(ctx context.Context, after string) (provider.Page[batchObject], error) {
			return page[batchList](ctx, c, "/batches", url.Values{}, after, func(l *batchList) ([]batchObject, bool, string) {
				return l.Data, l.HasMore, l.LastID
			}, func(b *batchObject) string { return b.ID })
		},
		Created: func(b *batchObject) time.Time { return b.CreatedAt.Time },
		Cutoff:  c.Cutoff(),
	}
	return l.Adopt(ctx, func(b *batchObject) bool { return provider.MatchesMetadata(b.Metadata, b.InputFileID, ref) },
		func(b *batchObject) sluice.BatchStatus { return compat.MapStatus(b.Status) })
}

// findFile returns the newest batch file uploaded for ref, or nil.
func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	if ref.Digest == "" {
		return nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	l := provider.Listing[fileObject]{
		Page: func(ctx context.Context, after string) (provider.Page[fileObject], error) {
			q := url.Values{"purpose": {"batch"}, "order": {"desc"}}
			return page[fileList](ctx, c, "/files", q, after, func(l *fileList) ([]fileObject, bool, string) {
				return l.Data, l.HasMore, l.LastID
			}, (*fileObject).id)
		},
		Created: func(f *fileObject) time.Time { return f.CreatedAt.Time },
		Cutoff:  c.Cutoff(),
	}
	return l.First(ctx, func(f *fileObject) bool {
		return provider.MatchesFile(f.Filename, f.Bytes, ref) && f.Status != "error" && f.Status != "deleted"
	})
}

// id is the file's id.
func (f *fileObject) id() string { return f.ID }

// page reads one page of the listing at path (GET path?limit=listPage&after=),
// an L, whose entries, has_more and last_id parts gives.
func page[L, T any](ctx context.Context, c *Client, path string, q url.Values, after string,
	parts func(*L) ([]T, bool, string), id func(*T) string) (provider.Page[T], error) {
	q.Set("limit", strconv.Itoa(listPage))
	if after != "" {
		q.Set("after", after)
	}
	var l L
	if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url(path, q)}, &l); err != nil {
		return provider.Page[T]{}, err
	}
	items, more, last := parts(&l)
	lastEntry := ""
	if len(items) > 0 {
		lastEntry = id(&items[len(items)-1])
	}
	return provider.Page[T]{Items: items, Next: provider.Cursor(more, last, lastEntry)}, nil
}

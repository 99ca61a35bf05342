package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// listPage is the page size asked of listings (the Files API serves at
// most 100 per page).
const listPage = 100

// Find looks for what a previous run made for ref: the batch whose
// displayName is DisplayName(ref), which carries ref's digest, made from
// ref's file when the tracker knows it (provider.MadeFrom; GET
// /{v}/batches, paged with pageToken), and else the ACTIVE file uploaded
// under ref's name with ref's size (provider.MatchesFile; GET /{v}/files).
// A chunk without a digest adopts no file, and a batch only when made from
// ref.FileID. Listings stop at the last page or at a page whose
// every entry is older than the find window. When several batches match
// (a create repeated after a lost answer), a live one is preferred to a
// failed, expired or cancelled one. When the batch is found, its input
// file is the file.
func (c *Client) Find(ctx context.Context, ref sluice.BatchRef) (fileID, batchID string, err error) {
	fileID, batchID, err = provider.FindBatchOrFile(ctx, ref, c.findBatch, func(op *operation) (string, string) {
		return op.Metadata.InputConfig.FileName, op.name()
	}, c.findFile, func(f *fileObject) string { return f.Name })
	return fileID, batchID, keyErr(err)
}

func (c *Client) findBatch(ctx context.Context, ref sluice.BatchRef) (*operation, error) {
	want := DisplayName(ref)
	l := provider.Listing[operation]{Page: pages[operation](c, "/batches", "operations"),
		Created: func(op *operation) time.Time { return op.Metadata.CreateTime }, Cutoff: c.Cutoff()}
	return l.Adopt(ctx, func(op *operation) bool {
		return op.Metadata.DisplayName == want && provider.MadeFrom(op.Metadata.InputConfig.FileName, ref)
	}, func(op *operation) sluice.BatchStatus { return op.toBatch().Status })
}

func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	if ref.Digest == "" {
		return nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	l := provider.Listing[fileObject]{Page: pages[fileObject](c, "/files", "files"),
		Created: func(f *fileObject) time.Time { return f.CreateTime }, Cutoff: c.Cutoff()}
	return l.First(ctx, func(f *fileObject) bool {
		return provider.MatchesFile(f.DisplayName, int64(f.SizeBytes), ref) && (f.State == "" || f.State == "ACTIVE")
	})
}

// pages reads the pages of a listing at path (GET /{v}{path}, pageSize
// listPage, paged with pageToken), the entries under key of each.
func pages[T any](c *Client, path, key string) func(context.Context, string) (provider.Page[T], error) {
	return func(ctx context.Context, token string) (provider.Page[T], error) {
		q := url.Values{"pageSize": {strconv.Itoa(listPage)}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var l map[string]json.RawMessage
		var p provider.Page[T]
		if err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url(path, q)}, &l); err != nil {
			return p, err
		}
		if raw, ok := l[key]; ok {
			if err := json.Unmarshal(raw, &p.Items); err != nil {
				return p, fmt.Errorf("list %s: %w", path, err)
			}
		}
		if raw, ok := l["nextPageToken"]; ok {
			if err := json.Unmarshal(raw, &p.Next); err != nil {
				return p, fmt.Errorf("list %s: %w", path, err)
			}
		}
		return p, nil
	}
}

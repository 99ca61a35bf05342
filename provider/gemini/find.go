package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// listPage is the page size asked of listings (the Files API serves at
// most 100 per page).
const listPage = 100

// maxPages bounds a listing, whatever the server says about more pages.
const maxPages = 10_000

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
	op, err := c.findBatch(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find batch of chunk %d: %w", ref.Chunk, keyErr(err))
	}
	if op != nil {
		return op.Metadata.InputConfig.FileName, op.name(), nil
	}
	f, err := c.findFile(ctx, ref)
	if err != nil {
		return "", "", fmt.Errorf("find file of chunk %d: %w", ref.Chunk, keyErr(err))
	}
	if f != nil {
		return f.Name, "", nil
	}
	return "", "", nil
}

func (c *Client) findBatch(ctx context.Context, ref sluice.BatchRef) (*operation, error) {
	want := DisplayName(ref)
	cutoff := c.clock.Now().Add(-c.findBack)
	var live, dead *operation
	err := listPages(ctx, c, "/batches", "operations", func(ops []operation) bool {
		allOld := len(ops) > 0
		for i := range ops {
			op := &ops[i]
			if t := op.Metadata.CreateTime; t.IsZero() || !t.Before(cutoff) {
				allOld = false
			}
			if op.Metadata.DisplayName != want || !provider.MadeFrom(op.Metadata.InputConfig.FileName, ref) {
				continue
			}
			switch op.toBatch().Status {
			case sluice.BatchFailed, sluice.BatchExpired, sluice.BatchCancelled, sluice.BatchCancelling:
				if dead == nil {
					dead = op
				}
			default:
				live = op
				return true
			}
		}
		return allOld
	})
	if err != nil {
		return nil, err
	}
	if live != nil {
		return live, nil
	}
	return dead, nil
}

func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	if ref.Digest == "" {
		return nil, nil // no name proves a file is this chunk's (provider.MatchesFile)
	}
	cutoff := c.clock.Now().Add(-c.findBack)
	var found *fileObject
	err := listPages(ctx, c, "/files", "files", func(files []fileObject) bool {
		allOld := len(files) > 0
		for i := range files {
			f := &files[i]
			if f.CreateTime.IsZero() || !f.CreateTime.Before(cutoff) {
				allOld = false
			}
			if provider.MatchesFile(f.DisplayName, int64(f.SizeBytes), ref) && (f.State == "" || f.State == "ACTIVE") {
				found = f
				return true
			}
		}
		return allOld
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// listPages walks a listing at path (GET /{v}{path}, pageSize listPage,
// paged with pageToken), handing visit the entries under key of each page,
// until visit says stop, the last page, a repeated page token, or maxPages.
func listPages[T any](ctx context.Context, c *Client, path, key string, visit func([]T) (stop bool)) error {
	token := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"pageSize": {strconv.Itoa(listPage)}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var l map[string]json.RawMessage
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url(path, q)}, &l); err != nil {
			return err
		}
		var items []T
		if raw, ok := l[key]; ok {
			if err := json.Unmarshal(raw, &items); err != nil {
				return fmt.Errorf("list %s: %w", path, err)
			}
		}
		var next string
		if raw, ok := l["nextPageToken"]; ok {
			if err := json.Unmarshal(raw, &next); err != nil {
				return fmt.Errorf("list %s: %w", path, err)
			}
		}
		if visit(items) || next == "" || next == token {
			return nil
		}
		token = next
	}
	return nil
}

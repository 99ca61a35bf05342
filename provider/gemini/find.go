package gemini

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// listPage is the page size asked of listings (the Files API serves at
// most 100 per page).
const listPage = 100

// maxPages bounds a listing, whatever the server says about more pages.
const maxPages = 10_000

// Find looks for what a previous run made for ref: the batch whose
// displayName is DisplayName(ref) (GET /{v}/batches, paged with
// pageToken), and else the ACTIVE file uploaded under ref's name with ref's
// size (GET /{v}/files). Listings stop at the last page or at a page whose
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
	var dead *operation
	token := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"pageSize": {strconv.Itoa(listPage)}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var l struct {
			Operations    []operation `json:"operations"`
			NextPageToken string      `json:"nextPageToken"`
		}
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/batches", q)}, &l); err != nil {
			return nil, err
		}
		allOld := len(l.Operations) > 0
		for i := range l.Operations {
			op := &l.Operations[i]
			if t := op.Metadata.CreateTime; t.IsZero() || !t.Before(cutoff) {
				allOld = false
			}
			if op.Metadata.DisplayName != want {
				continue
			}
			switch op.toBatch().Status {
			case sluice.BatchFailed, sluice.BatchExpired, sluice.BatchCancelled, sluice.BatchCancelling:
				if dead == nil {
					dead = op
				}
			default:
				return op, nil
			}
		}
		if l.NextPageToken == "" || l.NextPageToken == token || allOld {
			break
		}
		token = l.NextPageToken
	}
	return dead, nil
}

func (c *Client) findFile(ctx context.Context, ref sluice.BatchRef) (*fileObject, error) {
	name := DisplayName(ref) + ".jsonl"
	size := ref.Bytes
	if st, err := os.Stat(ref.Path); err == nil {
		size = st.Size() // what was uploaded
	}
	cutoff := c.clock.Now().Add(-c.findBack)
	token := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"pageSize": {strconv.Itoa(listPage)}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var l struct {
			Files         []fileObject `json:"files"`
			NextPageToken string       `json:"nextPageToken"`
		}
		if err := c.hc.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: c.url("/files", q)}, &l); err != nil {
			return nil, err
		}
		allOld := len(l.Files) > 0
		for i := range l.Files {
			f := &l.Files[i]
			if f.CreateTime.IsZero() || !f.CreateTime.Before(cutoff) {
				allOld = false
			}
			if f.DisplayName == name && (size <= 0 || int64(f.SizeBytes) == size) && (f.State == "" || f.State == "ACTIVE") {
				return f, nil
			}
		}
		if l.NextPageToken == "" || l.NextPageToken == token || allOld {
			break
		}
		token = l.NextPageToken
	}
	return nil, nil
}

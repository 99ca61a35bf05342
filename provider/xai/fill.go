package xai

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/iobuf"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// addHeader and addFooter wrap the request lines of an add-requests call.
var (
	addHeader = []byte(`{"batch_requests":[`)
	addFooter = []byte(`]}`)
)

// fill adds ref's requests to batch id, in add-requests calls of at most
// addBytes each (the chunk's lines are the items, as written). When the
// batch was adopted (a create answer lost, a killed run), the requests it
// already holds are listed first and not added again. A connection lost
// after a call's body was sent is settled by listing the batch's requests:
// when all of the call's are there, it took effect and is not repeated.
func (c *Client) fill(ctx context.Context, ref sluice.BatchRef, id string, adopted bool) error {
	var have map[string]bool
	if adopted {
		var err error
		if have, err = c.requestIDs(ctx, id); err != nil {
			return err
		}
		if len(have) > 0 {
			c.Log.Info().Str("batch_id", id).Int("present", len(have)).Int64("chunk", ref.Chunk).
				Msg("adopted batch holds requests already; adding the others")
		}
	}
	f, err := os.Open(ref.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, iobuf.Size(f, 1<<20))
	body := append([]byte(nil), addHeader...)
	var ids []string
	for {
		line, rerr := r.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return rerr
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			rid := gjson.GetBytes(line, "batch_request_id").String()
			if rid == "" {
				return fmt.Errorf("chunk %d: a line carries no batch_request_id", ref.Chunk)
			}
			if !have[rid] {
				if int64(len(addHeader)+len(line)+len(addFooter)) > c.addBytes {
					return fmt.Errorf("request %s is %d bytes: over the %d bytes of one add-requests call", rid, len(line), c.addBytes)
				}
				if int64(len(body)+1+len(line)+len(addFooter)) > c.addBytes {
					if err := c.add(ctx, id, body, ids); err != nil {
						return err
					}
					body, ids = append(body[:0], addHeader...), ids[:0]
				}
				if len(ids) > 0 {
					body = append(body, ',')
				}
				body, ids = append(body, line...), append(ids, rid)
			}
		}
		if rerr == io.EOF {
			break
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return c.add(ctx, id, body, ids)
}

// add sends one add-requests call of the requests ids; body lacks its
// footer.
func (c *Client) add(ctx context.Context, id string, body []byte, ids []string) error {
	payload := append(body, addFooter...)
	call := httpx.Call{Method: http.MethodPost, URL: c.batchURL(id, "/requests"),
		Header: http.Header{"Content-Type": {"application/json"}}, Body: httpx.BytesBody(payload),
		Reconcile: func(ctx context.Context) (bool, error) {
			have, err := c.requestIDs(ctx, id)
			if err != nil {
				return false, err
			}
			n := 0
			for _, rid := range ids {
				if have[rid] {
					n++
				}
			}
			if n != 0 && n != len(ids) {
				return false, fmt.Errorf("add requests to batch %s: %d of the call's %d requests are there", id, n, len(ids))
			}
			return n == len(ids), nil
		}}
	switch err := c.HC.JSON(ctx, call, nil); {
	case errors.Is(err, httpx.ErrReconciled):
		c.Log.Info().Str("batch_id", id).Int("requests", len(ids)).Msg("add-requests answer lost; the requests are there")
	case err != nil:
		return fmt.Errorf("add %d requests to batch %s: %w", len(ids), id, err)
	}
	return nil
}

// requestIDs lists the batch_request_ids batch id holds (GET
// /batches/{id}/requests, paged).
func (c *Client) requestIDs(ctx context.Context, id string) (map[string]bool, error) {
	have := map[string]bool{}
	l := provider.Listing[requestMeta]{Page: func(ctx context.Context, token string) (provider.Page[requestMeta], error) {
		var w struct {
			Requests []requestMeta `json:"batch_request_metadata"`
			Token    *string       `json:"pagination_token"`
		}
		u := c.batchURL(id, "/requests") + "?" + c.pageQuery(token).Encode()
		err := c.HC.JSON(ctx, httpx.Call{Method: http.MethodGet, URL: u}, &w)
		return provider.Page[requestMeta]{Items: w.Requests, Next: deref(w.Token)}, err
	}}
	err := l.Each(ctx, func(m *requestMeta) bool {
		have[m.ID] = true
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("list the requests of batch %s: %w", id, err)
	}
	return have, nil
}

// requestMeta is one entry of GET /batches/{id}/requests.
type requestMeta struct {
	ID    string `json:"batch_request_id"`
	State string `json:"state"`
}

package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/compat"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the batch line's body is
// POSTed, as written, to its url under the base URL (POST
// /v1/chat/completions, /v1/embeddings, /v1/responses, ...). A connection
// lost after the body was sent is not repeated (the provider may have
// answered and charged it): it ends with sluice.ErrUnsettled.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	var line struct {
		CustomID string          `json:"custom_id"`
		URL      string          `json:"url"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(item, &line); err != nil || line.CustomID == "" || line.URL == "" || len(line.Body) == 0 {
		return sluice.Result{}, fmt.Errorf("chunk %d: an item is not a batch request line (%v)", ref.Chunk, err)
	}
	path := line.URL
	if p := strings.TrimSuffix(c.URL.Path, "/"); strings.HasSuffix(p, "/v1") && strings.HasPrefix(path, "/v1/") {
		path = strings.TrimPrefix(path, "/v1") // the base URL already ends in /v1
	}
	return compat.SyncCall(ctx, c.HC, &c.rt, c.url(path, nil), ref.Job, line.CustomID, line.Body)
}

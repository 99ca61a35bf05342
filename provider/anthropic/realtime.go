package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the batch item's params
// are POSTed, as written, to /v1/messages. The answer takes the shape a
// batch result would have (Decode): a Message is a response with status
// 200, an error the status of its type. A connection lost after the body
// was sent is not repeated: it ends with sluice.ErrUnsettled. The
// X-Sluice-Job and X-Sluice-Custom-Id headers name the request to the
// emulator, which counts a request executed twice by them.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	var it struct {
		CustomID string          `json:"custom_id"`
		Params   json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(item, &it); err != nil || it.CustomID == "" || len(it.Params) == 0 {
		return sluice.Result{}, fmt.Errorf("chunk %d: an item is not a batch request (%v)", ref.Chunk, err)
	}
	return provider.CallSync(ctx, c.HC, provider.SyncCall{Job: ref.Job, CustomID: it.CustomID, URL: c.url("/v1/messages", nil),
		Body: it.Params, Limits: &c.rt, Headers: provider.AnthropicRateHeaders,
		Answer: func(resp *http.Response, b []byte, res *sluice.Result) error {
			var buf bytes.Buffer
			if json.Compact(&buf, b) != nil {
				return provider.NotAnAnswer(it.CustomID, "JSON")
			}
			res.Kind = sluice.ResultSucceeded
			res.Line.Response = &sluice.Response{StatusCode: 200, RequestID: resp.Header.Get("Request-Id"), Body: buf.Bytes()}
			u := gjson.GetBytes(buf.Bytes(), "usage")
			res.Usage = sluice.Usage{
				InputTokens: u.Get("input_tokens").Int() + u.Get("cache_creation_input_tokens").Int() +
					u.Get("cache_read_input_tokens").Int(),
				OutputTokens: u.Get("output_tokens").Int(),
			}
			return nil
		}})
}

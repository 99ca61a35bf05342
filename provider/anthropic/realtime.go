package anthropic

import (
	"context"

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
	id, params, err := provider.ParseItem(ref, item, "custom_id", "params")
	if err != nil {
		return sluice.Result{}, err
	}
	return provider.CallSync(ctx, c.HC, provider.SyncCall{Job: ref.Job, CustomID: id, URL: c.url("/v1/messages", nil),
		Body: params, Limits: &c.rt, Headers: provider.AnthropicRateHeaders,
		Answer: provider.SucceededJSON(id, "Request-Id", messageUsage)})
}

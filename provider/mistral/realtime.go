package mistral

import (
	"context"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/openai"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the chunk item's body is
// POSTed, as written, to the batch's endpoint (ref.URL) under the base URL
// (openai.SyncCall).
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	l, err := openai.ParseBodyLine(ref, item)
	if err != nil {
		return sluice.Result{}, err
	}
	return openai.SyncCall(ctx, c.hc, &c.rt, c.base+ref.URL, ref.Job, l.CustomID, l.Body)
}

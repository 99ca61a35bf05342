package mistral

import (
	"context"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/compat"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the chunk item's body is
// POSTed, as written, to the batch's endpoint (ref.URL) under the base URL
// (compat.SyncCall).
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	l, err := compat.ParseBodyLine(ref, item)
	if err != nil {
		return sluice.Result{}, err
	}
	return compat.SyncCall(ctx, c.HC, &c.rt, c.base+ref.URL, ref.Job, l.CustomID, l.Body)
}

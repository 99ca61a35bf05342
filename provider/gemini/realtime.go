package gemini

import (
	"context"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the chunk item's request
// is POSTed, as written, to /{version}/models/{model}:generateContent. The
// answer takes the shape a batch result would have (DecodeLine): a
// GenerateContentResponse is a response with status 200, an error the
// status of its code. A connection lost after the body was sent is not
// repeated: it ends with sluice.ErrUnsettled.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	key, request, err := provider.ParseItem(ref, item, "key", "request")
	if err == nil && ref.Model == "" {
		err = fmt.Errorf("chunk %d: an item is not a batch request (no model)", ref.Chunk)
	}
	if err != nil {
		return sluice.Result{}, err
	}
	res, err := provider.CallSync(ctx, c.HC, provider.SyncCall{Job: ref.Job, CustomID: key,
		URL: c.url("/"+modelName(ref.Model)+":generateContent", nil), Body: request,
		Answer: provider.SucceededJSON(key, "", func(b []byte) sluice.Usage {
			return usageOf(gjson.GetBytes(b, "usageMetadata"))
		})})
	if err != nil {
		return sluice.Result{}, keyErr(err)
	}
	return res, nil
}

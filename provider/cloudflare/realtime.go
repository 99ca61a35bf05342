package cloudflare

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// CallRealtime implements sluice.RealtimeCaller: the chunk item (one
// request of the batch body) is POSTed without its external_reference,
// which is the batch's key only, to the model's run URL without
// ?queueRequest. The answer {"result", "success", "errors"} takes the
// shape a batch item would have (decodeItem): success true is a response
// with status 200 and the result as its body. A connection lost after the
// body was sent is not repeated: it ends with sluice.ErrUnsettled.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, line []byte) (sluice.Result, error) {
	m, err := model(ref)
	if err != nil {
		return sluice.Result{}, err
	}
	ext := gjson.GetBytes(line, "external_reference")
	body, err := sjson.DeleteBytes(line, "external_reference")
	if ext.Type != gjson.String || ext.String() == "" || err != nil || !gjson.ValidBytes(body) {
		return sluice.Result{}, fmt.Errorf("chunk %d: an item is not a batch request with an external_reference (%v)", ref.Chunk, err)
	}
	id := ext.String()
	return provider.CallSync(ctx, c.hc, provider.SyncCall{Job: ref.Job, CustomID: id, URL: c.runURL(m, false), Body: body,
		Answer: func(_ *http.Response, b []byte, res *sluice.Result) error {
			var env struct {
				Result  json.RawMessage `json:"result"`
				Success *bool           `json:"success"`
				Errors  json.RawMessage `json:"errors"`
			}
			if json.Unmarshal(b, &env) != nil || env.Success == nil {
				return provider.NotAnAnswer(id, "a Workers AI envelope")
			}
			xref, _ := json.Marshal(id)
			r, err := decodeItem(&item{Result: provider.CompactJSON(env.Result), Success: env.Success, Errors: env.Errors, ExternalReference: xref}, 0, nil)
			r.Usage = provider.OpenAIUsage(gjson.GetBytes(env.Result, "usage"))
			*res = r
			return err
		}})
}

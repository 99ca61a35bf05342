package gemini

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

// CallRealtime implements sluice.RealtimeCaller: the chunk item's request
// is POSTed, as written, to /{version}/models/{model}:generateContent. The
// answer takes the shape a batch result would have (DecodeLine): a
// GenerateContentResponse is a response with status 200, an error the
// status of its code. A connection lost after the body was sent is not
// repeated: it ends with sluice.ErrUnsettled.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	var it struct {
		Key     string          `json:"key"`
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(item, &it); err != nil || it.Key == "" || len(it.Request) == 0 || ref.Model == "" {
		return sluice.Result{}, fmt.Errorf("chunk %d: an item is not a batch request (%v)", ref.Chunk, err)
	}
	res, err := provider.CallSync(ctx, c.HC, provider.SyncCall{Job: ref.Job, CustomID: it.Key,
		URL: c.url("/"+modelName(ref.Model)+":generateContent", nil), Body: it.Request,
		Answer: func(_ *http.Response, b []byte, res *sluice.Result) error {
			var buf bytes.Buffer
			if json.Compact(&buf, b) != nil {
				return provider.NotAnAnswer(it.Key, "JSON")
			}
			res.Kind = sluice.ResultSucceeded
			res.Line.Response = &sluice.Response{StatusCode: 200, Body: buf.Bytes()}
			u := gjson.GetBytes(buf.Bytes(), "usageMetadata")
			res.Usage = sluice.Usage{
				InputTokens:  u.Get("promptTokenCount").Int() + u.Get("toolUsePromptTokenCount").Int(),
				OutputTokens: u.Get("candidatesTokenCount").Int() + u.Get("thoughtsTokenCount").Int(),
			}
			return nil
		}})
	if err != nil {
		return sluice.Result{}, keyErr(err)
	}
	return res, nil
}

package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// maxRealtimeAnswer bounds one synchronous answer read into memory.
const maxRealtimeAnswer = 64 << 20

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
	hdr := http.Header{"Content-Type": {"application/json"}}
	hdr.Set("X-Sluice-Job", ref.Job)
	hdr.Set("X-Sluice-Custom-Id", url.PathEscape(it.CustomID))
	call := httpx.Call{Method: http.MethodPost, URL: c.url("/v1/messages", nil), Header: hdr, Body: httpx.BytesBody(it.Params),
		Reconcile: func(context.Context) (bool, error) { return false, errors.New("no listing of synchronous calls") }}
	res := sluice.Result{CustomID: it.CustomID, Line: sluice.OutputLine{CustomID: it.CustomID}}
	seq, err := c.rt.Start(ctx)
	if err != nil {
		return sluice.Result{}, err
	}
	defer c.rt.Done()
	err = c.hc.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		c.rt.Observe(resp.Header, seq, c.hc.Limiter(), provider.AnthropicRateHeaders)
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxRealtimeAnswer+1))
		if err != nil {
			return fmt.Errorf("%w: read answer: %v", sluice.ErrUnsettled, err)
		}
		var buf bytes.Buffer
		if len(b) > maxRealtimeAnswer || json.Compact(&buf, b) != nil {
			return fmt.Errorf("%w: the answer to %q is not JSON of at most %d bytes", sluice.ErrUnsettled, it.CustomID, maxRealtimeAnswer)
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
	})
	var ae *sluice.APIError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &ae) && ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden:
		code := sluice.ErrorCode(ae.Code)
		if code == "" {
			code = sluice.ErrorCode(fmt.Sprintf("http_%d", ae.Status))
		}
		res.Line.Error = &sluice.LineError{Code: code, Message: ae.Error()}
		res.Kind = provider.StatusKind(ae.Status)
		return res, nil
	}
	return sluice.Result{}, err
}

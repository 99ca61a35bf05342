package gemini

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
	hdr := http.Header{"Content-Type": {"application/json"}}
	hdr.Set("X-Sluice-Job", ref.Job)
	hdr.Set("X-Sluice-Custom-Id", url.PathEscape(it.Key))
	call := httpx.Call{Method: http.MethodPost, URL: c.url("/"+modelName(ref.Model)+":generateContent", nil), Header: hdr,
		Body:      httpx.BytesBody(it.Request),
		Reconcile: func(context.Context) (bool, error) { return false, errors.New("no listing of synchronous calls") }}
	res := sluice.Result{CustomID: it.Key, Line: sluice.OutputLine{CustomID: it.Key}}
	err := c.hc.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxRealtimeAnswer+1))
		if err != nil {
			return fmt.Errorf("%w: read answer: %v", sluice.ErrUnsettled, err)
		}
		var buf bytes.Buffer
		if len(b) > maxRealtimeAnswer || json.Compact(&buf, b) != nil {
			return fmt.Errorf("%w: the answer to %q is not JSON of at most %d bytes", sluice.ErrUnsettled, it.Key, maxRealtimeAnswer)
		}
		res.Kind = sluice.ResultSucceeded
		res.Line.Response = &sluice.Response{StatusCode: 200, Body: buf.Bytes()}
		u := gjson.GetBytes(buf.Bytes(), "usageMetadata")
		res.Usage = sluice.Usage{
			InputTokens:  u.Get("promptTokenCount").Int() + u.Get("toolUsePromptTokenCount").Int(),
			OutputTokens: u.Get("candidatesTokenCount").Int() + u.Get("thoughtsTokenCount").Int(),
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
	return sluice.Result{}, keyErr(err)
}

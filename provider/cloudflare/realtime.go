package cloudflare

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
	"github.com/tidwall/sjson"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// maxRealtimeAnswer bounds one synchronous answer read into memory.
const maxRealtimeAnswer = 64 << 20

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
	hdr := http.Header{"Content-Type": {"application/json"}}
	hdr.Set("X-Sluice-Job", ref.Job)
	hdr.Set("X-Sluice-Custom-Id", url.PathEscape(id))
	call := httpx.Call{Method: http.MethodPost, URL: c.runURL(m, false), Header: hdr, Body: httpx.BytesBody(body),
		Reconcile: func(context.Context) (bool, error) { return false, errors.New("no listing of synchronous calls") }}
	var res sluice.Result
	err = c.hc.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxRealtimeAnswer+1))
		if err != nil {
			return fmt.Errorf("%w: read answer: %v", sluice.ErrUnsettled, err)
		}
		var env struct {
			Result  json.RawMessage `json:"result"`
			Success *bool           `json:"success"`
			Errors  json.RawMessage `json:"errors"`
		}
		if len(b) > maxRealtimeAnswer || json.Unmarshal(b, &env) != nil || env.Success == nil {
			return fmt.Errorf("%w: the answer to %q is not a Workers AI envelope of at most %d bytes", sluice.ErrUnsettled, id, maxRealtimeAnswer)
		}
		xref, _ := json.Marshal(id)
		res, err = decodeItem(&item{Result: compact(env.Result), Success: env.Success, Errors: env.Errors, ExternalReference: xref}, 0, nil)
		res.Usage = usage(json.RawMessage(gjson.GetBytes(env.Result, "usage").Raw))
		return err
	})
	var ae *sluice.APIError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &ae) && ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden:
		// The endpoint's verdict, after the HTTP layer's retries.
		code := sluice.ErrorCode(ae.Code)
		if code == "" {
			code = sluice.ErrorCode(fmt.Sprintf("http_%d", ae.Status))
		}
		res = sluice.Result{CustomID: id, Kind: provider.StatusKind(ae.Status),
			Line: sluice.OutputLine{CustomID: id, Error: &sluice.LineError{Code: code, Message: ae.Error()}}}
		return res, nil
	}
	return sluice.Result{}, err
}

// compact removes the insignificant space of a result, as a batch
// answer's item carries it.
func compact(b json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

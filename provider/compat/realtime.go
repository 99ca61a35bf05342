package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// SyncCall POSTs body, as written, to the OpenAI-shaped synchronous
// endpoint url (OpenAI, Mistral, Together) for request customID of job,
// under rt's rate-limit budget, and returns its answer as a batch line
// would have given it (provider.CallSync).
func SyncCall(ctx context.Context, hc *httpx.Client, rt *provider.RealtimeLimits, url, job, customID string, body []byte) (sluice.Result, error) {
	return provider.CallSync(ctx, hc, provider.SyncCall{Job: job, CustomID: customID, URL: url, Body: body,
		Limits: rt, Headers: provider.OpenAIRateHeaders,
		Answer: func(resp *http.Response, b []byte, res *sluice.Result) error {
			if !json.Valid(b) {
				return provider.NotAnAnswer(customID, "JSON")
			}
			r := &sluice.Response{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Body: compactJSON(b)}
			res.Line.Response, res.Kind, res.Usage = r, provider.StatusKind(resp.StatusCode), usage(r.Body)
			return nil
		}})
}

// BodyLine is a Mistral or Together chunk item: the url is the batch's.
type BodyLine struct {
	CustomID string          `json:"custom_id"`
	Body     json.RawMessage `json:"body"`
}

// ParseBodyLine reads a {"custom_id","body"} chunk item.
func ParseBodyLine(ref sluice.BatchRef, item []byte) (BodyLine, error) {
	var l BodyLine
	if err := json.Unmarshal(item, &l); err != nil || l.CustomID == "" || len(l.Body) == 0 {
		return l, fmt.Errorf("chunk %d: an item is not a batch request line (%v)", ref.Chunk, err)
	}
	return l, nil
}

func compactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

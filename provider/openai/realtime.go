package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
)

var _ sluice.RealtimeCaller = (*Client)(nil)

// Headers a realtime call names its job and custom_id with (the emulator
// counts a request answered twice by them; a provider ignores them).
const (
	HeaderJob      = "X-Sluice-Job"
	HeaderCustomID = "X-Sluice-Custom-Id"
)

// maxRealtimeAnswer bounds one synchronous answer read into memory.
const maxRealtimeAnswer = 64 << 20

// CallRealtime implements sluice.RealtimeCaller: the batch line's body is
// POSTed, as written, to its url under the base URL (POST
// /v1/chat/completions, /v1/embeddings, /v1/responses, ...). A connection
// lost after the body was sent is not repeated (the provider may have
// answered and charged it): it ends with sluice.ErrUnsettled.
func (c *Client) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	var line struct {
		CustomID string          `json:"custom_id"`
		URL      string          `json:"url"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(item, &line); err != nil || line.CustomID == "" || line.URL == "" || len(line.Body) == 0 {
		return sluice.Result{}, fmt.Errorf("chunk %d: an item is not a batch request line (%v)", ref.Chunk, err)
	}
	path := line.URL
	if p := strings.TrimSuffix(c.base.Path, "/"); strings.HasSuffix(p, "/v1") && strings.HasPrefix(path, "/v1/") {
		path = strings.TrimPrefix(path, "/v1") // the base URL already ends in /v1
	}
	return SyncCall(ctx, c.hc, &c.rt, c.url(path, nil), ref.Job, line.CustomID, line.Body)
}

// SyncCall POSTs body, as written, to the OpenAI-shaped synchronous
// endpoint url (OpenAI, Mistral, Together) for request customID of job,
// under rt's rate-limit budget, and returns its answer as a batch line
// would have given it (see CallRealtime).
func SyncCall(ctx context.Context, hc *httpx.Client, rt *provider.RealtimeLimits, url, job, customID string, body []byte) (sluice.Result, error) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	hdr.Set(HeaderJob, job)
	hdr.Set(HeaderCustomID, neturl.PathEscape(customID))
	call := httpx.Call{Method: http.MethodPost, URL: url, Header: hdr, Body: httpx.BytesBody(body),
		// No listing tells whether a synchronous call was answered: never
		// repeat one that may have been (docs/crash-safety.md).
		Reconcile: func(context.Context) (bool, error) { return false, errors.New("no listing of synchronous calls") }}
	res := sluice.Result{CustomID: customID, Line: sluice.OutputLine{CustomID: customID}}
	seq, err := rt.Start(ctx)
	if err != nil {
		return sluice.Result{}, err
	}
	defer rt.Done()
	err = hc.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		rt.Observe(resp.Header, seq, hc.Limiter(), provider.OpenAIRateHeaders)
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxRealtimeAnswer+1))
		if err != nil {
			return fmt.Errorf("%w: read answer: %v", sluice.ErrUnsettled, err)
		}
		if len(b) > maxRealtimeAnswer || !json.Valid(b) {
			return fmt.Errorf("%w: the answer to %q is not JSON of at most %d bytes", sluice.ErrUnsettled, customID, maxRealtimeAnswer)
		}
		r := &sluice.Response{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Body: compactJSON(b)}
		res.Line.Response, res.Kind, res.Usage = r, provider.StatusKind(resp.StatusCode), usage(r.Body)
		return nil
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
		res.Line.Error = &sluice.LineError{Code: code, Message: ae.Error()}
		res.Kind = provider.StatusKind(ae.Status)
		return res, nil
	}
	return sluice.Result{}, err
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

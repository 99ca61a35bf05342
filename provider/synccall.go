package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// Headers a synchronous call of the realtime fallback names its job and
// custom_id with (the emulator counts a request answered twice by them; a
// provider ignores them).
const (
	HeaderJob      = "X-Sluice-Job"
	HeaderCustomID = "X-Sluice-Custom-Id"
)

// MaxSyncAnswer bounds one synchronous answer read into memory.
const MaxSyncAnswer = 64 << 20

// SyncCall is one synchronous call of the realtime fallback
// (sluice.RealtimeCaller), as each family makes it.
type SyncCall struct {
	Job, CustomID string
	URL           string
	Body          []byte
	// Limits, when set, paces the call by the provider's rate-limit
	// headers (Headers).
	Limits  *RealtimeLimits
	Headers RateHeaders
	// Answer fills res (its custom_id already set) from a 2xx answer of at
	// most MaxSyncAnswer bytes; an error it returns should wrap
	// sluice.ErrUnsettled (NotAnAnswer): the call may have been charged.
	Answer func(resp *http.Response, body []byte, res *sluice.Result) error
}

// NotAnAnswer is the error of an answer that is not what the endpoint
// returns (what: "JSON", "a Workers AI envelope"): the call's outcome is
// unknown.
func NotAnAnswer(customID, what string) error {
	return fmt.Errorf("%w: the answer to %q is not %s of at most %d bytes", sluice.ErrUnsettled, customID, what, MaxSyncAnswer)
}

// CallSync makes c through hc: its body POSTed, as written, to its URL,
// with the job and custom_id headers. A connection lost after the body was
// sent is not repeated (no listing tells whether the provider answered and
// charged it: docs/crash-safety.md): it ends with sluice.ErrUnsettled. An
// answer the endpoint refused (after the HTTP layer's retries), other than
// 401 and 403, is the request's error, as a batch line's would be.
func CallSync(ctx context.Context, hc *httpx.Client, c SyncCall) (sluice.Result, error) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	hdr.Set(HeaderJob, c.Job)
	hdr.Set(HeaderCustomID, url.PathEscape(c.CustomID))
	call := httpx.Call{Method: http.MethodPost, URL: c.URL, Header: hdr, Body: httpx.BytesBody(c.Body),
		Reconcile: func(context.Context) (bool, error) { return false, errors.New("no listing of synchronous calls") }}
	var seq int64
	if c.Limits != nil {
		var err error
		if seq, err = c.Limits.Start(ctx); err != nil {
			return sluice.Result{}, err
		}
		defer c.Limits.Done()
	}
	res := sluice.Result{CustomID: c.CustomID, Line: sluice.OutputLine{CustomID: c.CustomID}}
	err := hc.Send(ctx, call, func(resp *http.Response) error {
		defer resp.Body.Close()
		if c.Limits != nil {
			c.Limits.Observe(resp.Header, seq, hc.Limiter(), c.Headers)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxSyncAnswer+1))
		if err != nil {
			return fmt.Errorf("%w: read answer: %v", sluice.ErrUnsettled, err)
		}
		if len(b) > MaxSyncAnswer {
			return NotAnAnswer(c.CustomID, "JSON")
		}
		return c.Answer(resp, b, &res)
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
		return sluice.Result{CustomID: c.CustomID, Kind: StatusKind(ae.Status),
			Line: sluice.OutputLine{CustomID: c.CustomID, Error: &sluice.LineError{Code: code, Message: ae.Error()}}}, nil
	}
	return sluice.Result{}, err
}

package compat

import (
	"context"
	"encoding/json"
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
			r := &sluice.Response{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Body: provider.CompactJSON(b)}
			res.Line.Response, res.Kind, res.Usage = r, provider.StatusKind(resp.StatusCode), usage(r.Body)
			return nil
		}})
}

// Realtime is the realtime fallback (sluice.RealtimeCaller) of a family
// whose chunk items are {"custom_id","body"} lines of the batch's endpoint
// (Mistral, Together): the body is POSTed, as written, to URL(ref.URL)
// (SyncCall), paced by the answers' rate-limit headers.
type Realtime struct {
	Base *provider.Base
	URL  func(endpoint string) string
	rt   provider.RealtimeLimits
}

// CallRealtime implements sluice.RealtimeCaller.
func (r *Realtime) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	id, body, err := provider.ParseItem(ref, item, "custom_id", "body")
	if err != nil {
		return sluice.Result{}, err
	}
	return SyncCall(ctx, r.Base.HC, &r.rt, r.URL(ref.URL), ref.Job, id, body)
}

package emulator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func TestFault429RetryAfter(t *testing.T) {
	_, ts := start(t, Options{HTTPFaultRate: 1, FaultKinds: []string{"429"}, RetryAfter: 1500 * time.Millisecond})
	code, h, body := emutest.Do(t, "GET", ts.URL+"/v1/batches", nil, nil)
	var oe struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	emutest.MustUnmarshal(t, body, &oe)
	if code != 429 || h.Get("Retry-After") != "2" || h.Get("retry-after-ms") != "1500" || oe.Error.Code != "rate_limit_exceeded" || oe.Error.Message == "" {
		t.Fatalf("openai 429: %d %v %s", code, h, body)
	}
	code, h, body = emutest.Do(t, "GET", ts.URL+"/v1/messages/batches", nil, nil)
	var ae struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	emutest.MustUnmarshal(t, body, &ae)
	if code != 429 || h.Get("Retry-After") != "2" || ae.Type != "error" || ae.Error.Type != "rate_limit_error" || h.Get("request-id") == "" {
		t.Fatalf("anthropic 429: %d %s", code, body)
	}
	code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": "x"})
	if code != 429 || env.Success || env.Errors[0].Code != 3040 {
		t.Fatalf("cloudflare 429: %d %+v", code, env)
	}
	// The SDK surfaces it as an API error with the status.
	oc := oaClient(ts)
	_, err := oc.Batches.Get(context.Background(), "batch_x")
	var apiErr *openai.Error
	if !asErr(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("sdk: %v", err)
	}
	// The stats endpoint is never faulted.
	code, _, body = emutest.Do(t, "GET", ts.URL+"/_emulator/stats", nil, nil)
	var st map[string]any
	emutest.MustUnmarshal(t, body, &st)
	if code != 200 || st["faults_injected"].(float64) != 4 || st["faults_429"].(float64) != 4 {
		t.Fatalf("stats: %s", body)
	}
}

// A reset fault reaches the OpenAI SDK as an error too (no retries);
// emulator's TestFaultResetMidBody checks the call was processed.
func TestFaultResetMidBodySDK(t *testing.T) {
	_, ts := start(t, Options{HTTPFaultRate: 1, FaultKinds: []string{"reset"}})
	oc := oaClient(ts)
	if _, err := oc.Files.List(context.Background(), openai.FileListParams{}); err == nil {
		t.Fatal("sdk: expected an error")
	}
}

// With faults on, the SDK's own retries get a whole round trip through.
func TestSDKRetriesThroughFaults(t *testing.T) {
	s, ts := start(t, Options{HTTPFaultRate: 0.5, Seed: 11, RetryAfter: time.Millisecond, FaultKinds: []string{"429", "500", "502", "503"}})
	c := oaClient(ts, option.WithMaxRetries(20))
	f := upload(t, c, "a.jsonl", emutest.ChatLines(5, "m"))
	b := createBatch(t, c, f.ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
	for range 10 {
		b = getBatch(t, c, b.ID)
	}
	if b.Status != openai.BatchStatusCompleted || len(download(t, c, b.OutputFileID)) != 5 {
		t.Fatalf("batch %s", b.RawJSON())
	}
	if s.Stats().FaultsInjected == 0 {
		t.Fatal("no faults injected")
	}
}

func TestExpiredBatchPartialOutput(t *testing.T) {
	clk := emutest.NewClock()
	s, ts := start(t, Options{ExpireRate: 1, ExpireDoneFraction: 0.3, BatchTime: 10 * time.Second, Now: clk.Now})
	c := oaClient(ts)
	b := chatBatch(t, c, 10)
	clk.Advance(9 * time.Second)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusExpired || b.ExpiredAt != b.CreatedAt+9 || b.RequestCounts.Total != 10 ||
		b.RequestCounts.Completed != 3 || b.RequestCounts.Failed != 7 {
		t.Fatalf("expired: %s", b.RawJSON())
	}
	out := parseLines(t, download(t, c, b.OutputFileID))
	errs := parseLines(t, download(t, c, b.ErrorFileID))
	if len(out) != 3 || len(errs) != 7 {
		t.Fatalf("out %d err %d", len(out), len(errs))
	}
	for _, l := range errs {
		if l.Response != nil || l.Error == nil || l.Error.Code != "batch_expired" || l.Error.Message == "" {
			t.Fatalf("expired line %+v", l)
		}
	}
	if st := s.Stats(); st.RequestsProcessed != 3 || st.LinesExpired != 7 || st.BatchesExpired != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Anthropic: the rest come back "expired".
	ac := antClient(ts)
	ab, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(10, "x")})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	ab, _ = ac.Messages.Batches.Get(context.Background(), ab.ID, anthropic.MessageBatchGetParams{})
	if ab.RequestCounts.Expired != 7 || ab.RequestCounts.Succeeded != 3 || ab.ProcessingStatus != "ended" {
		t.Fatalf("anthropic expired: %s", ab.RawJSON())
	}
	kinds := map[string]int{}
	for _, r := range antResults(t, ac, ab.ID) {
		kinds[r.typ]++
	}
	if kinds["expired"] != 7 || kinds["succeeded"] != 3 {
		t.Fatalf("kinds %v", kinds)
	}
}

func TestValidationFailRate(t *testing.T) {
	_, ts := start(t, Options{ValidationFailRate: 1})
	c := oaClient(ts)
	b := chatBatch(t, c, 2)
	if b.Status != "validating" {
		t.Fatalf("create must return validating, got %s", b.Status)
	}
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusFailed || b.FailedAt == 0 || len(b.Errors.Data) != 1 || b.Errors.Object != "list" || b.OutputFileID != "" {
		t.Fatalf("failed: %s", b.RawJSON())
	}
}

func TestLineErrorsAndOmissions(t *testing.T) {
	s, ts := start(t, Options{LineErrorRate: 0.4, OmitRate: 0.2, Seed: 5})
	c := oaClient(ts)
	const n = 200
	b := chatBatch(t, c, n)
	b = getBatch(t, c, b.ID)
	out := parseLines(t, download(t, c, b.OutputFileID))
	errs := parseLines(t, download(t, c, b.ErrorFileID))
	codes := map[int]int{}
	for _, l := range errs {
		var body struct {
			Error *struct{ Message, Type string } `json:"error"`
		}
		emutest.MustUnmarshal(t, l.Response.Body, &body)
		if l.Error != nil || body.Error == nil || body.Error.Message == "" {
			t.Fatalf("error line %+v", l)
		}
		codes[l.Response.StatusCode]++
	}
	omitted := n - len(out) - len(errs)
	if codes[429] == 0 || codes[500] == 0 || codes[400] == 0 || codes[400] < codes[429] || omitted < 20 || omitted > 60 {
		t.Fatalf("codes %v omitted %d", codes, omitted)
	}
	if int(b.RequestCounts.Failed) != len(errs) || int(b.RequestCounts.Completed) != len(out)+omitted {
		t.Fatalf("counts %+v out %d errs %d", b.RequestCounts, len(out), len(errs))
	}
	// Omitted lines were executed: they count as processed.
	if st := s.Stats(); st.RequestsProcessed != n || st.LinesOmitted != int64(omitted) {
		t.Fatalf("stats %+v", st)
	}

	// Anthropic errored results and Cloudflare failed items.
	ac := antClient(ts)
	ab, _ := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(60, "e")})
	types := map[string]int{}
	for _, r := range antResults(t, ac, ab.ID) {
		if r.typ == "errored" {
			e := r.r.Result.AsErrored().Error
			if e.Type != "error" || !strings.HasPrefix(e.RequestID, "req_") {
				t.Fatalf("errored %s", r.r.RawJSON())
			}
			types[string(e.Error.Type)]++
		}
	}
	if types["rate_limit_error"] == 0 || types["invalid_request_error"] == 0 {
		t.Fatalf("anthropic error types %v", types)
	}
	var reqs []any
	for i := range 40 {
		reqs = append(reqs, map[string]any{"prompt": fmt.Sprint("p", i)})
	}
	_, _, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": reqs})
	_, _, p := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID})
	failed := 0
	for _, r := range p.Responses {
		if !r.Success {
			var e struct {
				Code    int
				Message string
			}
			emutest.MustUnmarshal(t, r.Error, &e)
			if e.Code == 0 || e.Message == "" {
				t.Fatalf("cf error %s", r.Error)
			}
			failed++
		}
	}
	if failed == 0 || len(p.Responses) == 40 {
		t.Fatalf("cloudflare: %d failed of %d", failed, len(p.Responses))
	}
}

func TestOpenAICancel(t *testing.T) {
	clk := emutest.NewClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	c := oaClient(ts)
	b := chatBatch(t, c, 10)
	clk.Advance(5 * time.Second) // in_progress since 1s: half of 8s done
	b, err := c.Batches.Cancel(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkSDK(t, b)
	if b.Status != openai.BatchStatusCancelling || b.CancellingAt != b.CreatedAt+5 {
		t.Fatalf("cancelling: %s", b.RawJSON())
	}
	if again, err := c.Batches.Cancel(context.Background(), b.ID); err != nil || again.Status != openai.BatchStatusCancelling {
		t.Fatalf("cancel while cancelling: %v", err)
	}
	clk.Advance(time.Second)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCancelled || b.CancelledAt != b.CreatedAt+6 || b.RequestCounts.Completed != 5 {
		t.Fatalf("cancelled: %s", b.RawJSON())
	}
	if out := download(t, c, b.OutputFileID); len(out) != 5 {
		t.Fatalf("partial output %d", len(out))
	}
	for _, l := range parseLines(t, download(t, c, b.ErrorFileID)) {
		if l.Error == nil || l.Error.Code != "batch_cancelled" {
			t.Fatalf("line %+v", l)
		}
	}
	if _, err := c.Batches.Cancel(context.Background(), b.ID); err == nil {
		t.Fatal("cancelling a cancelled batch must be refused")
	}
	if st := s.Stats(); st.RequestsProcessed != 5 || st.LinesCancelled != 5 {
		t.Fatalf("stats %+v", st)
	}
}

package emulator_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
)

func chatLine(id, url, model string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":%q,"body":{"model":%q,"messages":[{"role":"user","content":"hi"}]}}`, id, url, model)
}

func TestOpenAIValidationCodes(t *testing.T) {
	const cc = "/v1/chat/completions"
	ok := func(id string) string { return chatLine(id, cc, "m") }
	cases := []struct {
		name, input string
		code        string
		line        int64 // 0: null
	}{
		{"too_many_tasks", strings.Join([]string{ok("a"), ok("b"), ok("c"), ok("d")}, "\n"), "too_many_tasks", 0},
		{"model_mismatch", strings.Join([]string{ok("a"), chatLine("b", cc, "other")}, "\n"), "model_mismatch", 2},
		{"url_mismatch", strings.Join([]string{ok("a"), ok("b"), chatLine("c", "/v1/embeddings", "m")}, "\n"), "url_mismatch", 3},
		{"duplicate_custom_id", strings.Join([]string{ok("a"), ok("a")}, "\n"), "duplicate_custom_id", 2},
		{"invalid_json_line", strings.Join([]string{ok("a"), `{"custom_id":`, ok("c")}, "\n"), "invalid_json_line", 2},
		{"empty_file", "\n\n", "empty_file", 0},
		{"file_too_large", strings.Repeat(ok("a")+"\n", 1) + strings.Repeat(" ", 600), "file_too_large", 0},
	}
	_, ts := start(t, Options{MaxRequestsPerBatch: 3, MaxBatchBytes: 600})
	c := oaClient(ts)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := createBatch(t, c, upload(t, c, tc.name+".jsonl", []byte(tc.input)).ID, openai.BatchNewParamsEndpointV1ChatCompletions, nil)
			if b.Status != openai.BatchStatusValidating {
				t.Fatalf("create returned %s", b.Status)
			}
			b = getBatch(t, c, b.ID)
			if b.Status != openai.BatchStatusFailed || len(b.Errors.Data) == 0 || b.FailedAt == 0 || b.InProgressAt != 0 {
				t.Fatalf("batch %s", b.RawJSON())
			}
			e := b.Errors.Data[0]
			if e.Code != tc.code || e.Message == "" || e.Line != tc.line || (tc.line == 0 && e.JSON.Line.Raw() != "null") {
				t.Fatalf("error %s, want code %s line %d", e.RawJSON(), tc.code, tc.line)
			}
		})
	}
}

func TestOpenAIRequestErrors(t *testing.T) {
	_, ts := start(t, Options{MaxFileBytes: 200})
	c := oaClient(ts)
	ctx := context.Background()
	var apiErr *openai.Error
	_, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(make([]byte, 201)), "a.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	if !asErr(err, &apiErr) || apiErr.StatusCode != 413 {
		t.Fatalf("oversized upload: %v", err)
	}
	_, err = c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("{}"), "a.txt", "text/plain"),
		Purpose: openai.FilePurposeBatch})
	if !asErr(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("non-jsonl upload: %v", err)
	}
	f := upload(t, c, "a.jsonl", []byte(chatLine("a", "/v1/chat/completions", "m")))
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: "file-nope", Endpoint: "/v1/chat/completions", CompletionWindow: "24h"})
	if !asErr(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type != "invalid_request_error" {
		t.Fatalf("unknown file: %v", err)
	}
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: "/v1/chat/completions", CompletionWindow: "48h"})
	if !asErr(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "completion_window" {
		t.Fatalf("48h: %v", err)
	}
	_, err = c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: "/v1/nope", CompletionWindow: "24h"})
	if !asErr(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "endpoint" {
		t.Fatalf("endpoint: %v", err)
	}
	_, err = c.Batches.Get(ctx, "batch_nope")
	if !asErr(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("unknown batch: %v", err)
	}
	code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/nothing", nil, nil)
	var env struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	emutest.MustUnmarshal(t, body, &env)
	if code != 404 || env.Error == nil || env.Error.Message == "" || !strings.Contains(string(body), `"param":null`) {
		t.Fatalf("unknown route: %d %s", code, body)
	}
}

// token_limit_exceeded while an earlier batch is in progress, success after.
func TestEnqueuedTokenLimit(t *testing.T) {
	clk := emutest.NewClock()
	_, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now, EnqueuedTokenLimit: 1200})
	c := oaClient(ts)
	in := emutest.ChatLines(20, "gpt-4o-mini") // 760 estimated tokens
	a := submit(t, c, "a.jsonl", in, openai.BatchNewParamsEndpointV1ChatCompletions)
	clk.Advance(2 * time.Second)
	if a = getBatch(t, c, a.ID); a.Status != openai.BatchStatusInProgress {
		t.Fatalf("a: %s", a.Status)
	}
	b := submit(t, c, "b.jsonl", in, openai.BatchNewParamsEndpointV1ChatCompletions)
	other := submit(t, c, "o.jsonl", emutest.ChatLines(20, "other-model"), openai.BatchNewParamsEndpointV1ChatCompletions)
	if b.Status != "validating" {
		t.Fatalf("create must succeed first: %s", b.Status)
	}
	clk.Advance(2 * time.Second)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusFailed || b.Errors.Data[0].Code != "token_limit_exceeded" || !strings.Contains(b.Errors.Data[0].Message, "gpt-4o-mini") {
		t.Fatalf("b: %s", b.RawJSON())
	}
	if other = getBatch(t, c, other.ID); other.Status != openai.BatchStatusInProgress {
		t.Fatalf("limit is per model: %s", other.RawJSON())
	}
	clk.Advance(7 * time.Second)
	if a = getBatch(t, c, a.ID); a.Status != openai.BatchStatusCompleted {
		t.Fatalf("a: %s", a.Status)
	}
	d := submit(t, c, "d.jsonl", in, openai.BatchNewParamsEndpointV1ChatCompletions)
	clk.Advance(10 * time.Second)
	if d = getBatch(t, c, d.ID); d.Status != openai.BatchStatusCompleted {
		t.Fatalf("d after a drained: %s", d.RawJSON())
	}

	// Anthropic: over the limit, create is refused with 429.
	ac := antClient(ts)
	ab, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(20, "a")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(20, "b")})
	var ae *anthropic.Error
	if !asErr(err, &ae) || ae.StatusCode != 429 || ae.Type() != "rate_limit_error" {
		t.Fatalf("anthropic over limit: %v", err)
	}
	clk.Advance(10 * time.Second)
	if _, err := ac.Messages.Batches.New(context.Background(), anthropic.MessageBatchNewParams{Requests: antRequests(20, "c")}); err != nil {
		t.Fatalf("after %s ended: %v", ab.ID, err)
	}
}

// The default OpenAI limit: 50,000 requests pass, 50,001 fail too_many_tasks.
func TestDefaultRequestLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("large input")
	}
	_, ts := start(t, Options{Logf: func(string, ...any) {}})
	c := oaClient(ts)
	in := emutest.ChatLines(50001, "m")
	b := submit(t, c, "big.jsonl", in, openai.BatchNewParamsEndpointV1ChatCompletions)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusFailed || b.Errors.Data[0].Code != "too_many_tasks" || !strings.Contains(b.Errors.Data[0].Message, "50001") {
		t.Fatalf("50,001: %s", b.RawJSON())
	}
	cut := bytes.LastIndexByte(in[:len(in)-1], '\n') + 1
	b = submit(t, c, "ok.jsonl", in[:cut], openai.BatchNewParamsEndpointV1ChatCompletions)
	if b = getBatch(t, c, b.ID); b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 50000 {
		t.Fatalf("50,000: %s", b.RawJSON())
	}
}

func TestCancelWhileValidating(t *testing.T) {
	clk := emutest.NewClock()
	_, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	c := oaClient(ts)
	b := chatBatch(t, c, 3)
	if _, err := c.Batches.Cancel(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCancelled || b.OutputFileID != "" || b.ErrorFileID != "" || b.RequestCounts.Total != 0 || b.InProgressAt != 0 {
		t.Fatalf("%s", b.RawJSON())
	}
}

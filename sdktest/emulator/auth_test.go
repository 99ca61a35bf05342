package emulator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/emutest"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func TestAuthEachFamily(t *testing.T) {
	_, ts := start(t, Options{APIKey: "secret-key"})
	ctx := context.Background()

	// OpenAI: Bearer.
	bad := oaClient(ts, option.WithAPIKey("wrong-key-123456"))
	_, err := bad.Batches.List(ctx, openai.BatchListParams{})
	var oe *openai.Error
	if !asErr(err, &oe) || oe.StatusCode != 401 || oe.Code != "invalid_api_key" || oe.Type != "invalid_request_error" {
		t.Fatalf("openai wrong key: %v", err)
	}
	good := oaClient(ts, option.WithAPIKey("secret-key"))
	if _, err := good.Batches.List(ctx, openai.BatchListParams{}); err != nil {
		t.Fatalf("openai good key: %v", err)
	}
	code, _, body := emutest.Do(t, "GET", ts.URL+"/v1/files", nil, nil)
	if code != 401 || !strings.Contains(string(body), `"code":"invalid_api_key"`) {
		t.Fatalf("openai no key: %d %s", code, body)
	}
	// Azure v1 paths accept the api-key header.
	code, _, body = emutest.Do(t, "GET", ts.URL+"/openai/v1/batches", nil, map[string]string{"api-key": "secret-key"})
	if code != 200 || !strings.Contains(string(body), `"object":"list"`) {
		t.Fatalf("azure api-key: %d %s", code, body)
	}

	// Anthropic: x-api-key and anthropic-version.
	ac := antClient(ts, aoption.WithAPIKey("nope"))
	_, err = ac.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{})
	var ae *anthropic.Error
	if !asErr(err, &ae) || ae.StatusCode != 401 || ae.Type() != "authentication_error" {
		t.Fatalf("anthropic wrong key: %v", err)
	}
	code, _, body = emutest.Do(t, "GET", ts.URL+"/v1/messages/batches", nil, map[string]string{"x-api-key": "nope"})
	var env emutest.AnthropicError
	emutest.MustUnmarshal(t, body, &env)
	if code != 401 || env.Type != "error" || env.Error.Type != "authentication_error" || env.RequestID == "" {
		t.Fatalf("anthropic envelope: %s", body)
	}
	code, _, body = emutest.Do(t, "GET", ts.URL+"/v1/messages/batches", nil, map[string]string{"x-api-key": "secret-key"})
	if code != 400 || !strings.Contains(string(body), "anthropic-version") {
		t.Fatalf("anthropic without version: %d %s", code, body)
	}
	ac = antClient(ts, aoption.WithAPIKey("secret-key"))
	if _, err := ac.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{}); err != nil {
		t.Fatalf("anthropic good key: %v", err)
	}

	// Cloudflare: Bearer, v4 envelope.
	code, _, body = emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), []byte(`{"request_id":"x"}`), map[string]string{"Authorization": "Bearer nope"})
	var cf emutest.CFEnvelope
	emutest.MustUnmarshal(t, body, &cf)
	if code != 401 || cf.Success || len(cf.Errors) != 1 || cf.Errors[0].Code != 10000 || string(cf.Result) != "null" {
		t.Fatalf("cloudflare: %d %s", code, body)
	}
	code, _, _ = emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, false), []byte(`{"prompt":"x"}`), map[string]string{"Authorization": "Bearer secret-key"})
	if code != 200 {
		t.Fatalf("cloudflare good key: %d", code)
	}
	// The stats endpoint needs no key.
	code, _, body = emutest.Do(t, "GET", ts.URL+"/_emulator/stats", nil, nil)
	var st map[string]json.RawMessage
	emutest.MustUnmarshal(t, body, &st)
	for _, k := range []string{"files_uploaded", "batches_created", "requests_processed", "requests_processed_more_than_once", "faults_injected", "by_family"} {
		if _, ok := st[k]; !ok || code != 200 {
			t.Fatalf("stats lacks %s: %s", k, body)
		}
	}
}

func TestAzurePaths(t *testing.T) {
	_, ts := start(t, Options{})
	c := openai.NewClient(option.WithBaseURL(ts.URL+"/openai/v1/"), option.WithHeader("api-key", "k"), option.WithMaxRetries(0))
	f := upload(t, c, "x.jsonl", []byte(chatLine("a", "/chat/completions", "deployment-1")+"\n"))
	// Azure docs use endpoint "/chat/completions" without /v1.
	b := createBatch(t, c, f.ID, "/chat/completions", nil)
	b = getBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCompleted || b.Endpoint != "/chat/completions" || len(download(t, c, b.OutputFileID)) != 1 {
		t.Fatalf("azure batch: %s", b.RawJSON())
	}
}

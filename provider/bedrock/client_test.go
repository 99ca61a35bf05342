package bedrock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// TestDecodeMapsOnlyTheChunksRecords: output records map back by
// recordId; a success keeps modelOutput as the response body with the
// model's usage, an error record is retryable for 429 and 5xx and final
// otherwise; a record whose recordId is not one of the chunk's is not
// mapped (skipped as malformed), nor is a line that does not parse.
func TestDecodeMapsOnlyTheChunksRecords(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "c.jsonl.out")
	lines := []string{
		`{"recordId":"b","modelInput":{},"modelOutput":{"content":[{"type":"text","text":"x"}],"usage":{"input_tokens":7,"output_tokens":2}}}`,
		`{"recordId":"a","modelInput":{},"error":{"errorCode":429,"errorMessage":"slow down"}}`,
		`{"recordId":"c","modelInput":{},"error":{"errorCode":400,"errorMessage":"bad"}}`,
		`{"recordId":"someone-else","modelInput":{},"modelOutput":{"generation":"stolen"}}`,
		`{"recordId":`,
	}
	if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c"}
	lookup := func(i int) (string, bool) {
		if i < len(ids) {
			return ids[i], true
		}
		return "", false
	}
	got := map[string]sluice.Result{}
	c := &Client{}
	err := c.Decode(context.Background(), sluice.BatchRef{Requests: 3}, []string{out}, lookup, func(r sluice.Result) error {
		got[r.CustomID] = r.Owned()
		return nil
	})
	var bad *sluice.MalformedLines
	if !errors.As(err, &bad) || bad.Count != 2 {
		t.Fatalf("Decode: %v, want 2 lines skipped (the unknown recordId, the broken line)", err)
	}
	if len(got) != 3 {
		t.Fatalf("results %v, want a, b, c only", got)
	}
	if r := got["b"]; r.Kind != sluice.ResultSucceeded || r.Line.Response.StatusCode != 200 || r.Usage.InputTokens != 7 || r.Usage.OutputTokens != 2 ||
		!strings.Contains(string(r.Line.Response.Body), `"text":"x"`) {
		t.Errorf("b: %+v", r)
	}
	if r := got["a"]; r.Kind != sluice.ResultRetryable || r.Line.Error.Code != "bedrock_429" {
		t.Errorf("a: %+v", r)
	}
	if r := got["c"]; r.Kind != sluice.ResultFailed || r.Line.Error.Message != "bad" {
		t.Errorf("c: %+v", r)
	}
}

// TestNamesBedrockTakes: the clientRequestToken and jobName are in the
// forms Bedrock accepts, differ by attempt and by digest, and are the same
// for the same chunk attempt (what makes a repeated create idempotent).
func TestNamesBedrockTakes(t *testing.T) {
	token := regexp.MustCompile(`^[a-zA-Z0-9](-*[a-zA-Z0-9])*$`)
	name := regexp.MustCompile(`^[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}$`)
	ref := sluice.BatchRef{Job: "my_job.2026-11-27", Chunk: 12, Attempt: 1, Digest: "0123456789abcdef0123456789abcdef"}
	uri := "s3://b/one/x.jsonl"
	other, digest := ref, ref
	other.Attempt, digest.Digest = 2, "ffff456789abcdef0123456789abcdef"
	for _, r := range []sluice.BatchRef{ref, other, digest} {
		if tk, n := ClientToken(r, uri), JobName(r); !token.MatchString(tk) || len(tk) > 256 || !name.MatchString(n) || len(n) > 63 {
			t.Errorf("%+v: token %q, name %q", r, tk, n)
		}
	}
	same := ref
	if ClientToken(ref, uri) != ClientToken(same, uri) || JobName(ref) != JobName(same) || ClientToken(ref, uri) == ClientToken(other, uri) || ClientToken(ref, uri) == ClientToken(digest, uri) {
		t.Error("tokens do not name the chunk attempt and its content")
	}
	if ClientToken(ref, uri) == ClientToken(ref, "s3://b/two/x.jsonl") {
		t.Error("the token does not name the input file: the same job elsewhere would be handed this one's")
	}
}

// TestBedrockCodec: lines are {"recordId","modelInput"}; the url names
// the model; a Claude body without anthropic_version, or with a model, is
// refused at plan time, as is a url that is not Bedrock's.
func TestBedrockCodec(t *testing.T) {
	codec := provider.Presets["bedrock"].Codec()
	it := &sluice.Item{CustomID: "r1", URL: "/model/anthropic.claude-3-haiku-20240307-v1:0/invoke",
		Body: []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":9,"messages":[]}`)}
	if err := codec.Validate(it); err != nil || it.Model != "anthropic.claude-3-haiku-20240307-v1:0" {
		t.Fatalf("validate: %v, model %q", err, it.Model)
	}
	line, err := codec.AppendItem(nil, it)
	if err != nil || string(line) != `{"recordId":"r1","modelInput":{"anthropic_version":"bedrock-2023-05-31","max_tokens":9,"messages":[]}}`+"\n" {
		t.Fatalf("line %s, %v", line, err)
	}
	for _, bad := range []sluice.Item{
		{CustomID: "r", URL: "/model/anthropic.claude-3-haiku-20240307-v1:0/invoke", Body: []byte(`{"max_tokens":9,"messages":[]}`)},
		{CustomID: "r", URL: "/model/anthropic.claude-3-haiku-20240307-v1:0/invoke", Body: []byte(`{"anthropic_version":"bedrock-2023-05-31","model":"m","messages":[]}`)},
		{CustomID: "r", URL: "/model/amazon.nova-lite-v1:0/converse", Body: []byte(`{"prompt":"x"}`)},
		{CustomID: "r", URL: "/v1/messages", Body: []byte(`{}`)},
	} {
		if err := codec.Validate(&bad); err == nil {
			t.Errorf("%s %s: accepted", bad.URL, bad.Body)
		}
	}
}

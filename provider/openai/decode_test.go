package openai_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/compat"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/openai"
)

func TestDecodeLineKinds(t *testing.T) {
	for _, tc := range []struct {
		line string
		kind sluice.ResultKind
		in   int64
		out  int64
	}{
		{`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":5,"completion_tokens":2}}},"error":null}`, sluice.ResultSucceeded, 5, 2},
		{`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"input_tokens":4,"output_tokens":9}}}}`, sluice.ResultSucceeded, 4, 9},
		{`{"custom_id":"a","response":{"status_code":200,"body":{"object":"list","usage":{"prompt_tokens":8,"total_tokens":8}}}}`, sluice.ResultSucceeded, 8, 0},
		{`{"custom_id":"a","response":{"status_code":400,"body":{"error":{"message":"m"}}},"error":null}`, sluice.ResultFailed, 0, 0},
		{`{"custom_id":"a","response":{"status_code":404,"body":{}},"error":null}`, sluice.ResultFailed, 0, 0},
		{`{"custom_id":"a","response":{"status_code":429,"body":{}},"error":null}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":{"status_code":500,"body":{}},"error":null}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":{"status_code":503,"body":{}},"error":null}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":null,"error":{"code":"batch_expired","message":"m"}}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":null,"error":{"code":"batch_cancelled","message":"m"}}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":null,"error":{"code":"cancelled","message":"m"}}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":null,"error":{"code":"rate_limit_exceeded","message":"m"}}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":null,"error":{"code":"server_error","message":"m"}}`, sluice.ResultRetryable, 0, 0},
		{`{"custom_id":"a","response":null,"error":{"code":"invalid_request","message":"m"}}`, sluice.ResultFailed, 0, 0},
	} {
		r, err := compat.DecodeLine([]byte(tc.line))
		if err != nil || r.Kind != tc.kind || r.CustomID != "a" || r.Usage.InputTokens != tc.in || r.Usage.OutputTokens != tc.out {
			t.Errorf("%s: %+v %v", tc.line, r, err)
		}
	}
	for _, bad := range []string{`{"response":{"status_code":200}}`, `{"custom_id":"a"}`, `{"custom_id":"a","response":null,"error":null}`, `[1]`, `{`} {
		if _, err := compat.DecodeLine([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestDecodeMalformedNamesFileAndLine(t *testing.T) {
	c := newClient(t, "openai", "http://127.0.0.1:1/v1")
	path := ptest.WriteFile(t, "out.jsonl", `{"custom_id":"a","response":{"status_code":200,"body":{}}}`+"\n\n"+`{"custom_id":"b","resp`+"\n")
	got, err := ptest.Decode(c, nil, path)
	var me *provider.MalformedError
	if !errors.As(err, &me) || me.File != path || me.Line != 3 || !errors.Is(err, provider.ErrMalformed) || len(got) != 1 {
		t.Fatalf("err %v, %d results", err, len(got))
	}
}

// TestDecodeLongLines: a 24 MB line (an image, a long embedding) decodes,
// one line at a time.
func TestDecodeLongLines(t *testing.T) {
	c := newClient(t, "openai", "http://127.0.0.1:1/v1")
	big := strings.Repeat("x", 24<<20)
	path := ptest.WriteFile(t, "out.jsonl", `{"custom_id":"a","response":{"status_code":200,"body":{"data":"`+big+`"}}}`+"\n"+
		`{"custom_id":"b","response":{"status_code":200,"body":{}}}`)
	got, err := ptest.Decode(c, nil, path)
	if err != nil || ptest.CustomIDs(got) != "a,b" {
		t.Fatalf("err %v ids %v", err, ptest.CustomIDs(got))
	}
	if n := len(got[0].Line.Response.Body); n < 24<<20 {
		t.Errorf("body cut: %d", n)
	}
	small := newClient(t, "openai", "http://127.0.0.1:1/v1", func(cfg *openai.Config) { cfg.MaxLine = 1 << 20 })
	_, err = ptest.Decode(small, nil, path)
	if !errors.Is(err, provider.ErrMalformed) {
		t.Fatalf("over the line bound: %v", err)
	}
}

func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","response":{"status_code":200,"body":{"usage":{"prompt_tokens":5}}},"error":null}`))
	f.Add([]byte(`{"custom_id":"a","response":null,"error":{"code":"batch_expired","message":"m"}}`))
	f.Add([]byte(`{"custom_id":"","response":{"status_code":"x"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := compat.DecodeLine(line)
		if err == nil && (r.CustomID == "" || (r.Line.Response == nil && r.Line.Error == nil)) {
			t.Fatalf("accepted %q as %+v", line, r)
		}
	})
}

// TestDecodeLineOwnsItsBytes: DecodeLine's Result is the caller's to keep;
// the line's buffer may be reused at once (the decoding loops lend theirs
// instead: sluice.Result).
func TestDecodeLineOwnsItsBytes(t *testing.T) {
	line := []byte(`{"id":"r1","custom_id":"a","response":{"status_code":200,"request_id":"q","body":{"x":1}},"error":null}`)
	r, err := compat.DecodeLine(line)
	if err != nil {
		t.Fatal(err)
	}
	for i := range line {
		line[i] = ' '
	}
	if string(r.Line.Response.Body) != `{"x":1}` {
		t.Fatalf("body %q changed with the line's buffer", r.Line.Response.Body)
	}
}

package emulator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/emutest"
)

func TestAnthropicCreateLimits(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{AnthropicMaxRequests: 3, AnthropicMaxBytes: 4000})
	url := ts.URL + "/v1/messages/batches"
	post := func(body string) (int, string, string) {
		code, _, raw := emutest.Do(t, "POST", url, []byte(body), map[string]string{"anthropic-version": "2023-06-01"})
		var env emutest.AnthropicError
		emutest.MustUnmarshal(t, raw, &env)
		if code != 200 && (env.Type != "error" || !strings.HasPrefix(env.RequestID, "req_")) {
			t.Fatalf("envelope %s", raw)
		}
		return code, env.Error.Type, env.Error.Message
	}
	item := func(id string, params string) string {
		return fmt.Sprintf(`{"custom_id":%q,"params":%s}`, id, params)
	}
	good := `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	reqs := func(items ...string) string { return `{"requests":[` + strings.Join(items, ",") + `]}` }

	if code, typ, _ := post(reqs(item("a", good), item("b", good), item("c", good), item("d", good))); code != 413 || typ != "request_too_large" {
		t.Fatalf("too many: %d %s", code, typ)
	}
	big := `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", 4000) + `"}]}`
	if code, typ, _ := post(reqs(item("a", big))); code != 413 || typ != "request_too_large" {
		t.Fatalf("too big: %d %s", code, typ)
	}
	for name, body := range map[string]string{
		"custom_id pattern": reqs(item("bad id!", good)),
		"custom_id length":  reqs(item(strings.Repeat("a", 65), good)),
		"duplicate":         reqs(item("a", good), item("a", good)),
		"max_tokens":        reqs(item("a", `{"model":"m","max_tokens":0,"messages":[]}`)),
		"no max_tokens":     reqs(item("a", `{"model":"m","messages":[]}`)),
		"no model":          reqs(item("a", `{"max_tokens":5,"messages":[]}`)),
		"no messages":       reqs(item("a", `{"model":"m","max_tokens":5}`)),
		"empty":             reqs(),
		"not json":          `{"requests":[`,
	} {
		if code, typ, msg := post(body); code != 400 || typ != "invalid_request_error" || msg == "" {
			t.Errorf("%s: %d %s %s", name, code, typ, msg)
		}
	}
	code, _, _ := post(reqs(item("ok_1", good), item("ok-2", good)))
	if code != 200 {
		t.Fatalf("valid create: %d", code)
	}
}

func TestAnthropicStreamedCreateIsCompact(t *testing.T) {
	t.Parallel()
	// Pretty-printed params must become single JSONL spool lines.
	s, ts := start(t, Options{})
	body := "{\n \"requests\": [\n  {\"custom_id\": \"a\", \"params\": {\n \"model\": \"m\",\n \"max_tokens\": 5,\n \"messages\": [{\"role\":\"user\",\"content\":\"xy\"}]}}\n ],\n \"extra\": {\"x\": 1}\n}"
	code, _, raw := emutest.Do(t, "POST", ts.URL+"/v1/messages/batches", []byte(body), nil)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	var b struct{ ID string }
	json.Unmarshal(raw, &b)
	code, _, res := emutest.Do(t, "GET", ts.URL+"/v1/messages/batches/"+b.ID+"/results", nil, nil)
	if code != 200 || !strings.Contains(string(res), `"text":"echo: yx"`) || s.Stats().RequestsProcessed != 1 {
		t.Fatalf("results %d %s", code, res)
	}
}

package splitter_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

// TestMaxOutputTokensPerChunk: the splitter sums each chunk's max output
// tokens (whichever of the three names, the largest when several) and
// counts the requests that set none.
func TestMaxOutputTokensPerChunk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.write("in.jsonl", []byte(strings.Join([]string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_completion_tokens":250,"messages":[]}}`,
		`{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[],"max_tokens":5,"max_completion_tokens":7}}`,
		`{"custom_id":"d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"max_tokens: 9"}],"metadata":{"max_tokens":1000}}}`,
		`{"custom_id":"e","method":"POST","url":"/v1/responses","body":{"model":"m","input":"hi","max_output_tokens":1e3}}`,
		`{"custom_id":"f","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":null,"messages":[]}}`,
	}, "\n")+"\n"))
	r := e.mustSplit(in, "openai", sluice.Limits{}, nil)
	got := map[string][2]int64{}
	for _, c := range r.chunks {
		got[c.URL] = [2]int64{c.MaxOutputTokens, int64(c.NoMaxRequests)}
	}
	// chat: 100 + 250 + 7; d (max_tokens only nested) and f (null) set none.
	if g := got["/v1/chat/completions"]; g != [2]int64{357, 2} {
		t.Errorf("chat chunk: max output %d, without %d; want 357, 2", g[0], g[1])
	}
	if g := got["/v1/responses"]; g != [2]int64{1000, 0} {
		t.Errorf("responses chunk: max output %d, without %d; want 1000, 0", g[0], g[1])
	}
}

// TestBodyKeys: a request's ledger key ignores whitespace between JSON
// tokens and custom_id, and changes with the body's text, the model, the
// url, the scope, and the copy (the n-th repeat of a body in a file).
func TestBodyKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.write("in.jsonl", []byte(strings.Join([]string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi there"}]}}`,
		`{"custom_id":"b", "method": "POST", "url": "/v1/chat/completions", "body": { "model" : "m", "messages": [ {"role": "user", "content": "hi there"} ] }}`,
		`{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi  there"}]}}`,
		`{"custom_id":"d","method":"POST","url":"/v1/chat/completions","body":{"model":"n","messages":[{"role":"user","content":"hi there"}]}}`,
		`{"custom_id":"e","method":"POST","url":"/v1/responses","body":{"model":"m","messages":[{"role":"user","content":"hi there"}]}}`,
	}, "\n")+"\n"))
	spaced := e.write("spaced.jsonl", []byte(`{"custom_id":"b", "method": "POST", "url": "/v1/chat/completions", "body": { "model" : "m", "messages": [ {"role": "user", "content": "hi there"} ] }}`+"\n"))
	keysOf := func(in, scope string) map[string]string {
		e.mustSplit(in, "openai", sluice.Limits{}, func(c *splitter.Config) { c.KeyScope = scope })
		m := map[string]string{}
		if err := e.db.Requests(e.ctx, fmt.Sprintf("j%d", e.n), func(r *sluice.Request) error {
			m[r.CustomID] = strings.ToUpper(hex.EncodeToString(r.BodyKey))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	keys := func(scope string) map[string]string { return keysOf(in, scope) }
	k1 := keys("openai\x00https://api.openai.com/v1")
	if len(k1) != 5 || k1["a"] == "" {
		t.Fatalf("keys %v", k1)
	}
	// b is a second copy of a's body in the same file: a key of its own
	// (copies are never collapsed); alone in a file, the first copy, it
	// has a's key whatever its whitespace.
	if k1["a"] == k1["b"] {
		t.Error("the second copy of a body has the first one's key")
	}
	if ks := keysOf(spaced, "openai\x00https://api.openai.com/v1"); ks["b"] != k1["a"] {
		t.Error("whitespace between tokens changed the key")
	}
	for _, id := range []string{"c", "d", "e"} {
		if k1[id] == k1["a"] {
			t.Errorf("request %s has the key of a", id)
		}
	}
	k2 := keys("openai\x00http://127.0.0.1:1/v1")
	if k2["a"] == k1["a"] {
		t.Error("another base URL gave the same key")
	}
	k3 := keys("")
	if k3["a"] != "" {
		t.Error("a key without a scope")
	}
}

package dispatcher

import "testing"

// TestItemMaxOutput: the bound of a retried request's output is read from
// its wire item, whatever the codec's shape.
func TestItemMaxOutput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		item string
		n    int64
		ok   bool
	}{
		{`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens": 64,"messages":[]}}`, 64, true},
		{`{"custom_id":"a","params":{"model":"claude","max_tokens":1024,"messages":[{"role":"user","content":"say \"max_tokens\": 99999"}]}}`, 1024, true},
		{`{"body":{"max_tokens":5,"max_completion_tokens":700}}`, 700, true},
		{`{"body":{"max_output_tokens":1e3}}`, 1000, true},
		{`{"body":{"messages":[{"role":"user","content":"no bound \"max_tokens\":5"}]}}`, 0, false},
		{`{"body":{"max_tokens":null}}`, 0, false},
		{`{"key":"g","request":{"contents":[],"generationConfig":{"temperature":0.2,"maxOutputTokens":64}}}`, 64, true},
		{`{"key":"g","request":{"contents":[],"generationConfig":{"candidateCount":3,"maxOutputTokens":64}}}`, 192, true},
		{`{"custom_id":"a","body":{"model":"m","n":2,"max_tokens":10,"messages":[{"role":"user","content":"say \"n\": 9"}]}}`, 20, true},
		{`{"body":{"n":4,"messages":[]}}`, 0, false},
	} {
		n, ok := itemMaxOutput([]byte(c.item))
		if n != c.n || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.item, n, ok, c.n, c.ok)
		}
	}
}

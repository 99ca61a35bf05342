package splitter

import "testing"

// BenchmarkBodyKey: a request's ledger key, for a compact body as the
// scanner reports it (hashed as it is) and by the walk that drops the
// whitespace between tokens (the path of a body with such whitespace).
func BenchmarkBodyKey(b *testing.B) {
	body := []byte(`{"model":"gpt-4.1-mini","messages":[{"role":"system","content":"You are a careful assistant. Answer in one short paragraph."},{"role":"user","content":"Explain which clause in the data explains the exception, and why the retry policy did not apply to it in the first place."}],"max_tokens":200,"temperature":0.2}`)
	h := newBodyHasher("openai\x00https://api.openai.com/v1")
	for _, compact := range []bool{false, true} {
		name := "walk"
		if compact {
			name = "compact"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				h.key("gpt-4.1-mini", "/v1/chat/completions", body, compact)
			}
		})
	}
}

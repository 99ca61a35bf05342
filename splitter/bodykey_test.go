package splitter

import "testing"

// BenchmarkBodyKey: a request's ledger key as a worker makes it (the
// scanner's pass included): a body in canonical form (hashed as it is),
// one whose members are out of order (written from the scanner's
// records), and one as Python's json.dumps writes it (whitespace and
// escapes too).
func BenchmarkBodyKey(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"canonical", `{"max_tokens":200,"messages":[{"content":"You are a careful assistant. Answer in one short paragraph.","role":"system"},{"content":"Explain which clause in the data explains the exception, and why the retry policy did not apply to it in the first place.","role":"user"}],"model":"gpt-4.1-mini","temperature":0.2}`},
		{"unordered", `{"model":"gpt-4.1-mini","messages":[{"role":"system","content":"You are a careful assistant. Answer in one short paragraph."},{"role":"user","content":"Explain which clause in the data explains the exception, and why the retry policy did not apply to it in the first place."}],"max_tokens":200,"temperature":0.2}`},
		{"python", `{"model": "gpt-4.1-mini", "messages": [{"role": "system", "content": "You are a careful assistant. Answer in one short paragraph."}, {"role": "user", "content": "Explain which clause in the d\u00e4ta explains the exception, and why the retry policy did not apply to it in the first place."}], "max_tokens": 200, "temperature": 0.2}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				keyOf(b, c.body, false)
			}
		})
	}
}

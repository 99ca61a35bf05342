package splitter

import (
	"fmt"
	"testing"

	"github.com/sluice-batch/sluice/provider"
)

// BenchmarkBodyKey: a worker's whole work on one line, without and with
// its ledger key (keys=false/true), for a body in canonical form (hashed as it is),
// one whose members are out of order (written from the scanner's
// records), and one as Python's json.dumps writes it (whitespace and
// escapes too).
func BenchmarkBodyKey(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"canonical", `{"max_tokens":200,"messages":[{"content":"You are a careful assistant. Answer in one short paragraph.","role":"system"},{"content":"Explain which clause in the data explains the exception, and why the retry policy did not apply to it in the first place.","role":"user"}],"model":"gpt-4.1-mini","temperature":0.2}`},
		{"unordered", `{"model":"gpt-4.1-mini","messages":[{"role":"system","content":"You are a careful assistant. Answer in one short paragraph."},{"role":"user","content":"Explain which clause in the data explains the exception, and why the retry policy did not apply to it in the first place."}],"max_tokens":200,"temperature":0.2}`},
		{"python", `{"model": "gpt-4.1-mini", "messages": [{"role": "system", "content": "You are a careful assistant. Answer in one short paragraph."}, {"role": "user", "content": "Explain which clause in the d\u00e4ta explains the exception, and why the retry policy did not apply to it in the first place."}], "max_tokens": 200, "temperature": 0.2}`},
	} {
		line := []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":` + c.body + `}`)
		for _, keys := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/keys=%v", c.name, keys), func(b *testing.B) {
				cfg := &Config{Codec: provider.Presets["openai"].Codec()}
				if keys {
					cfg.KeyScope = "openai\x00https://api.openai.com/v1"
				}
				p, blk := newParser(cfg), &block{data: line, first: 1}
				b.SetBytes(int64(len(line)))
				b.ReportAllocs()
				for b.Loop() {
					p.block(blk)
				}
			})
		}

	}
}

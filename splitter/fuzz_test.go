package splitter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-batch/sluice/provider"
)

// FuzzValidateLine: the line validator never panics, its JSON grammar is
// exactly encoding/json's plus UTF-8, and it accepts only lines that
// encoding/json reads as an object with the required fields. Seeds are in
// testdata/fuzz/FuzzValidateLine.
func FuzzValidateLine(f *testing.F) {
	for _, c := range syntaxCases {
		f.Add([]byte(c))
	}
	f.Add(benchLine)
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`))
	openai := Config{Codec: provider.Presets["openai"].Codec(), Limits: provider.Presets["openai"].Limits}
	anth := Config{Codec: provider.Presets["anthropic"].Codec(), Limits: provider.Presets["anthropic"].Limits}
	cf := Config{Codec: provider.Presets["cloudflare"].Codec(), Limits: provider.Presets["cloudflare"].Limits}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return
		}
		// The grammar: same verdict as encoding/json + UTF-8.
		got, why := syntaxOK(line)
		if want := json.Valid(line) && utf8.Valid(line); got != want && why != "blank" {
			t.Fatalf("%q: scanner %v (%s), encoding/json %v", line, got, why, want)
		}
		for _, cfg := range []Config{openai, anth, cf} {
			item, blank, reason := ValidateLine(cfg, line)
			if blank {
				if len(bytes.Trim(bytes.TrimPrefix(line, bom), " \t\r")) != 0 {
					t.Fatalf("%q: called blank", line)
				}
				continue
			}
			if reason == "" {
				checkAccepted(t, cfg, line, item)
			}
		}
	})
}

func checkAccepted(t *testing.T, cfg Config, line, item []byte) {
	t.Helper()
	line = bytes.TrimPrefix(line, bom) // the first line of a file may start with a BOM
	if !json.Valid(line) || !utf8.Valid(line) {
		t.Fatalf("%q: accepted, but not valid JSON/UTF-8", line)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%q: accepted, but not an object: %v", line, err)
	}
	var id, method, url string
	if json.Unmarshal(m["custom_id"], &id) != nil || id == "" {
		t.Fatalf("%q: accepted without a custom_id", line)
	}
	if json.Unmarshal(m["method"], &method) != nil || method != "POST" {
		t.Fatalf("%q: accepted without method POST", line)
	}
	if json.Unmarshal(m["url"], &url) != nil {
		t.Fatalf("%q: accepted without a url", line)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(m["body"], &body); err != nil || body == nil {
		t.Fatalf("%q: accepted without an object body", line)
	}
	var model string
	if json.Unmarshal(body["model"], &model) != nil || model == "" {
		if !strings.HasPrefix(url, "/ai/run/") {
			t.Fatalf("%q: accepted without a model", line)
		}
	}
	if !json.Valid(item) && len(cfg.Codec.Envelope().Header) > 0 {
		t.Fatalf("%q: item %q is not JSON", line, item)
	}
	if len(cfg.Codec.Envelope().Header) == 0 && string(item) != string(bytes.Trim(bytes.TrimPrefix(line, bom), " \t\r"))+"\n" {
		t.Fatalf("%q: JSONL item %q is not the line", line, item)
	}
}

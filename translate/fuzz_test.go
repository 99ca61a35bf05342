package translate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// fuzzResult: whatever the answer, Result never panics, and what it
// returns without error is a valid chat.completion (validCompletion:
// every field, the OpenAI SDK parses it); Error always returns a valid
// OpenAI error object.
func fuzzResult(f *testing.F, targets ...string) {
	for _, tn := range targets {
		files, _ := filepath.Glob(filepath.Join("testdata", "results", tn, "*.json"))
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"content":[{"type":"tool_use","name":"sluice_response_format","input":{"a":"\u0000"}}]}`))
	f.Add([]byte(`{"choices":[{"message":{"content":[{"type":"text","text":1}],"tool_calls":[{"function":{"name":"f","arguments":[]}}]}}]}`))
	f.Add([]byte(`{"candidates":[{"content":{"parts":null}}],"usageMetadata":{"promptTokenCount":-5}}`))
	f.Add([]byte(`{"response":{"a":1},"tool_calls":null,"usage":{"prompt_tokens":"x"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tn := range targets {
			tg := Lookup(tn)
			out, err := tg.Result(nil, body, Meta{ID: "chatcmpl-f", Model: "m", Created: 1})
			if err == nil {
				if verr := validCompletion(out); verr != nil {
					t.Fatalf("%s: %v\nin:  %s\nout: %s", tn, verr, body, out)
				}
			} else if len(out) != 0 {
				t.Fatalf("%s: error %v with output %s", tn, err, out)
			}
			e := tg.Error(nil, body, 500)
			if verr := validError(e); verr != nil {
				t.Fatalf("%s: error body: %v\nin:  %s\nout: %s", tn, verr, body, e)
			}
		}
	})
}

func FuzzTranslateResultAnthropic(f *testing.F)  { fuzzResult(f, "anthropic") }
func FuzzTranslateResultCloudflare(f *testing.F) { fuzzResult(f, "cloudflare") }
func FuzzTranslateResultGemini(f *testing.F)     { fuzzResult(f, "gemini") }
func FuzzTranslateResultOpenAI(f *testing.F)     { fuzzResult(f, "mistral", "together") }

// FuzzTranslateRequest: whatever the body, Request never panics, and what
// it returns without error is one valid JSON object for every target.
func FuzzTranslateRequest(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"x","content":[]}],"max_tokens":1}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":" "}}]}],"max_tokens":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tn := range targetNames {
			out, err := Lookup(tn).Request(nil, body, "model", nil)
			if err != nil {
				continue
			}
			var v map[string]any
			if jerr := json.Unmarshal(out, &v); jerr != nil {
				t.Fatalf("%s: translated body is not a JSON object: %v\nin:  %s\nout: %s", tn, jerr, body, out)
			}
		}
	})
}

// FuzzUnquote: the string decoder of the request iterators agrees with
// encoding/json on every valid JSON string.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"a\"b\\c\/d\n\t\r\b\f"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00 x"`, `"\ud800 lone"`, `"\udc00\ud800"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		var want string
		// Request checks UTF-8 no more than gjson does; the splitter checks it.
		// unquote takes one string literal as skipString delimits it:
		// encoding/json also accepts whitespace around it, which is not part
		// of the literal.
		if !utf8.ValidString(lit) || json.Unmarshal([]byte(lit), &want) != nil || len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
			return
		}
		if got := unquote(lit); got != want {
			t.Fatalf("unquote(%q) = %q, want %q", lit, got, want)
		}
		if end := skipString(lit, 0); end != len(lit) {
			t.Fatalf("skipString(%q) = %d, want %d", lit, end, len(lit))
		}
	})
}

package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

var targetNames = []string{"anthropic", "cloudflare", "gemini", "mistral", "together"}

// outcome is what a golden file holds for one request and one target: the
// native body and the warnings, or the error.
type outcome struct {
	Body     json.RawMessage `json:"body,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// TestGoldenRequests translates every request of testdata/requests for
// every target and compares the outcome with testdata/golden/TARGET/NAME.json
// field by field. Run with -update to rewrite the goldens (then read the
// diff: each golden is a claim about the provider's API).
func TestGoldenRequests(t *testing.T) {
	reqs, _ := filepath.Glob("testdata/requests/*.json")
	if len(reqs) < 10 {
		t.Fatalf("only %d requests in the corpus", len(reqs))
	}
	for _, tn := range targetNames {
		tg := Lookup(tn)
		for _, rp := range reqs {
			name := strings.TrimSuffix(filepath.Base(rp), ".json")
			t.Run(tn+"/"+name, func(t *testing.T) {
				in, err := os.ReadFile(rp)
				if err != nil {
					t.Fatal(err)
				}
				var o outcome
				body, err := tg.Request(nil, in, "target-model", func(w Warning) {
					o.Warnings = append(o.Warnings, w.Param+": "+w.Reason)
				})
				if err != nil {
					var te *Error
					if !errors.As(err, &te) {
						t.Fatalf("error %v is not a *translate.Error", err)
					}
					o.Error = err.Error()
				} else {
					if !json.Valid(body) {
						t.Fatalf("translated body is not valid JSON: %s", body)
					}
					o.Body = body
				}
				compareGolden(t, filepath.Join("testdata", "golden", tn, name+".json"), o)
			})
		}
	}
}

// TestGoldenResults translates every native answer of
// testdata/results/TARGET back to a chat.completion (files named error_NNN
// are error bodies answered with status NNN) and compares it with
// testdata/golden/TARGET/NAME.result.json field by field; every success
// must also parse as the OpenAI SDK's ChatCompletion (the nested module's
// sdktest/translate, TestGoldenResultsParseInOpenAISDK, on the goldens).
func TestGoldenResults(t *testing.T) {
	meta := Meta{ID: "chatcmpl-fallback", Model: "fallback-model", Created: 1700000000}
	for _, tn := range targetNames {
		tg := Lookup(tn)
		files, _ := filepath.Glob(filepath.Join("testdata", "results", tn, "*.json"))
		if len(files) < 3 {
			t.Fatalf("%s: only %d answers in the corpus", tn, len(files))
		}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".json")
			t.Run(tn+"/"+name, func(t *testing.T) {
				in, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				var out []byte
				if s, ok := strings.CutPrefix(name, "error_"); ok {
					status, _ := strconv.Atoi(s)
					out = tg.Error(nil, in, status)
					if err := validError(out); err != nil {
						t.Fatalf("%v: %s", err, out)
					}
				} else {
					out, err = tg.Result(nil, in, meta)
					if err != nil {
						t.Fatal(err)
					}
					if err := validCompletion(out); err != nil {
						t.Fatalf("%v: %s", err, out)
					}
				}
				compareGolden(t, filepath.Join("testdata", "golden", tn, name+".result.json"), outcome{Body: out})
			})
		}
	}
}

func compareGolden(t *testing.T, path string, got outcome) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./translate -run Golden -update to create it)", err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var diffs []string
	diffJSON("", w, g, &diffs)
	if len(diffs) > 0 {
		t.Errorf("%s differs field by field:\n  %s", path, strings.Join(diffs, "\n  "))
	}
}

// diffJSON lists the paths where got differs from want.
func diffJSON(path string, want, got any, out *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: want an object, got %v", path, got))
			return
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !wok:
				*out = append(*out, fmt.Sprintf("%s.%s: unexpected %v", path, k, gv))
			case !gok:
				*out = append(*out, fmt.Sprintf("%s.%s: missing (want %v)", path, k, wv))
			default:
				diffJSON(path+"."+k, wv, gv, out)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			*out = append(*out, fmt.Sprintf("%s: want %v, got %v", path, want, got))
			return
		}
		for i := range w {
			diffJSON(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], out)
		}
	default:
		if !reflect.DeepEqual(want, got) {
			*out = append(*out, fmt.Sprintf("%s: want %v, got %v", path, want, got))
		}
	}
}

// validCompletion checks that b is a chat.completion as docs/translation.md
// promises: every field present with its type, at least one choice, each
// with an index, an assistant message whose content is a string or null,
// well-formed tool calls and a known finish_reason, and usage whose total
// is the sum (that the OpenAI SDK parses it: sdktest/translate).
func validCompletion(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var c struct {
		ID      *string            `json:"id"`
		Object  *string            `json:"object"`
		Created *int64             `json:"created"`
		Model   *string            `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   *struct {
			Prompt     *int64 `json:"prompt_tokens"`
			Completion *int64 `json:"completion_tokens"`
			Total      *int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("not a chat.completion: %v", err)
	}
	switch {
	case c.ID == nil || *c.ID == "":
		return errors.New("no id")
	case c.Object == nil || *c.Object != "chat.completion":
		return errors.New(`object is not "chat.completion"`)
	case c.Created == nil:
		return errors.New("no created")
	case c.Model == nil:
		return errors.New("no model")
	case len(c.Choices) == 0:
		return errors.New("no choices")
	case c.Usage == nil || c.Usage.Prompt == nil || c.Usage.Completion == nil || c.Usage.Total == nil:
		return errors.New("usage incomplete")
	case *c.Usage.Prompt < 0 || *c.Usage.Completion < 0 || *c.Usage.Total < *c.Usage.Prompt+*c.Usage.Completion:
		return errors.New("usage does not add up")
	}
	for i, ch := range c.Choices {
		if err := ch.valid(i); err != nil {
			return fmt.Errorf("choice %d: %w", i, err)
		}
	}
	return nil // the OpenAI SDK parses the goldens: sdktest/translate
}

// completionChoice is one of a chat.completion's choices, as validCompletion reads it.
type completionChoice struct {
	Index   *int `json:"index"`
	Message *struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string  `json:"name"`
				Arguments *string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	FinishReason *string `json:"finish_reason"`
}

// valid checks the choice at index i: its index, an assistant message
// whose content is a string or null, well-formed tool calls and a known
// finish_reason.
func (ch completionChoice) valid(i int) error {
	if ch.Index == nil || *ch.Index != i {
		return errors.New("index")
	}
	if ch.Message == nil || ch.Message.Role != "assistant" {
		return errors.New("message is not an assistant message")
	}
	if s := string(ch.Message.Content); s != "null" && (len(s) == 0 || s[0] != '"') {
		return errors.New("content is neither a string nor null")
	}
	for j, tc := range ch.Message.ToolCalls {
		if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments == nil {
			return fmt.Errorf("tool call %d is incomplete", j)
		}
		// arguments is the model's text: OpenAI's own may be invalid JSON.
	}
	switch f := ch.FinishReason; {
	case f == nil:
		return errors.New("no finish_reason")
	case *f != "stop" && *f != "length" && *f != "tool_calls" && *f != "content_filter":
		return fmt.Errorf("finish_reason %q", *f)
	}
	return nil
}

// validError checks an OpenAI error object.
func validError(b []byte) error {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return err
	}
	if e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		return errors.New("not an OpenAI error object")
	}
	return nil
}

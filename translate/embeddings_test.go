package translate

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestTitanEmbeddings: an OpenAI embeddings body becomes Titan's
// {"inputText"} (dimensions kept for V2), what Titan cannot do is refused
// with the parameter named, and Titan's answer reads back as an OpenAI
// embeddings response with its usage.
func TestTitanEmbeddings(t *testing.T) {
	const v2, v1 = "amazon.titan-embed-text-v2:0", "amazon.titan-embed-text-v1"
	var warned []Warning
	out, err := TitanEmbeddings.Request(nil, []byte(`{"model":"text-embedding-3-small","input":"a \"quoted\" note","dimensions":512,"encoding_format":"float","user":"u1"}`), v2,
		func(w Warning) { warned = append(warned, w) })
	if err != nil || string(out) != `{"inputText":"a \"quoted\" note","dimensions":512}` {
		t.Fatalf("request: %s (%v)", out, err)
	}
	if len(warned) != 1 || warned[0].Param != "user" {
		t.Errorf("warnings %v, want user left out", warned)
	}
	if out, err := TitanEmbeddings.Request(nil, []byte(`{"input":["one text"]}`), v1, nil); err != nil || string(out) != `{"inputText":"one text"}` {
		t.Errorf("an array of one text: %s (%v)", out, err)
	}
	for body, param := range map[string]string{
		`{"input":["a","b"]}`:                      "input",
		`{"input":[1,2,3]}`:                        "input",
		`{"model":"m"}`:                            "input",
		`{"input":"a","encoding_format":"base64"}`: "encoding_format",
		`{"input":"a","dimensions":300}`:           "dimensions",
		`{"input":"a","truncate":"END"}`:           "truncate",
	} {
		_, err := TitanEmbeddings.Request(nil, []byte(body), v2, nil)
		if e, ok := err.(*Error); !ok || e.Param != param {
			t.Errorf("%s: %v, want an error naming %s", body, err, param)
		}
	}
	if _, err := TitanEmbeddings.Request(nil, []byte(`{"input":"a","dimensions":256}`), v1, nil); err == nil || !strings.Contains(err.Error(), "dimensions") {
		t.Errorf("dimensions on Titan V1: %v, want refused", err)
	}
	res, err := TitanEmbeddings.Result(nil, []byte(`{"embedding":[0.1, -0.2,
 0.3],"inputTextTokenCount":7}`), Meta{Model: v2})
	if err != nil {
		t.Fatal(err)
	}
	r := gjson.ParseBytes(res)
	if r.Get("object").Str != "list" || r.Get("data.0.object").Str != "embedding" || r.Get("data.0.index").Raw != "0" ||
		r.Get("data.0.embedding").Raw != "[0.1,-0.2,0.3]" || r.Get("model").Str != v2 ||
		r.Get("usage.prompt_tokens").Int() != 7 || r.Get("usage.total_tokens").Int() != 7 || strings.Contains(string(res), "\n") {
		t.Errorf("result %s", res)
	}
	if _, err := TitanEmbeddings.Result(nil, []byte(`{"generation":"x"}`), Meta{Model: v2}); err == nil {
		t.Error("an answer without embedding was read")
	}
}

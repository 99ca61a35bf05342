package emulator

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/emutest"
)

// Tests of the places where the emulator once let a client pass that the
// live Workers AI API refuses (issue 21, item 8).

var cfAuth = map[string]string{"Authorization": "Bearer tok"}

// cfBatch queues items on model and polls the batch to its end (BatchTime
// 0: a batch is done at once). It returns the raw response items.
func cfBatch(t *testing.T, ts *httptest.Server, model string, items ...any) []map[string]json.RawMessage {
	t.Helper()
	code, env, q := emutest.CFCall(t, emutest.CFURL(ts, model, true), map[string]any{"requests": items})
	if code != 200 || !env.Success || q.RequestID == "" {
		t.Fatalf("submit to %s: %d %+v", model, code, env)
	}
	b, _ := json.Marshal(map[string]any{"request_id": q.RequestID})
	code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, model, true), b, map[string]string{"Authorization": "Bearer tok"})
	var fin struct {
		Result struct {
			Responses []map[string]json.RawMessage `json:"responses"`
		} `json:"result"`
	}
	emutest.MustUnmarshal(t, raw, &fin)
	if code != 200 || len(fin.Result.Responses) != len(items) {
		t.Fatalf("poll %s: %d, %d responses of %d", model, code, len(fin.Result.Responses), len(items))
	}
	return fin.Result.Responses
}

// TestCloudflareEncodedSlashNoRoute: the official SDKs percent-encode the
// model's slashes by default (@cf%2Fmeta%2F...); the live API answers that
// path 400 {"success":false,"errors":[{"code":7000,"message":"No route for
// that URI"}]} (cloudflare-typescript PR 2796, cloudflare-python issue
// 2718), and so must the emulator, before it looks at the token. The
// literal form is served.
func TestCloudflareEncodedSlashNoRoute(t *testing.T) {
	t.Parallel()
	s, ts := start(t, Options{APIKey: "tok"})
	body := []byte(`{"requests":[{"prompt":"hi","external_reference":"r0"}]}`)
	for _, model := range []string{"@cf%2Fmeta%2Fllama-3.3-70b-instruct-fp8-fast", "@cf%2fmeta%2fllama-3.3-70b-instruct-fp8-fast",
		"@cf/meta%2Fllama-3.3-70b-instruct-fp8-fast"} {
		for _, tok := range []string{"tok", "wrong"} {
			u := ts.URL + "/client/v4/accounts/acc123/ai/run/" + model + "?queueRequest=true"
			code, _, raw := emutest.Do(t, "POST", u, body, map[string]string{"Authorization": "Bearer " + tok})
			var env emutest.CFEnvelope
			emutest.MustUnmarshal(t, raw, &env)
			if code != 400 || env.Success || len(env.Errors) != 1 || env.Errors[0].Code != 7000 ||
				env.Errors[0].Message != "No route for that URI" || string(env.Result) != "null" || env.Messages == nil {
				t.Errorf("%s (token %s): %d %s", model, tok, code, raw)
			}
		}
	}
	// A poll on an encoded path is refused the same way.
	u := ts.URL + "/client/v4/accounts/acc123/ai/run/@cf%2Fmeta%2Fllama-3.3-70b-instruct-fp8-fast"
	if code, _, raw := emutest.Do(t, "POST", u, []byte(`{"request_id":"x"}`), map[string]string{"Authorization": "Bearer tok"}); code != 400 || !strings.Contains(string(raw), "7000") {
		t.Errorf("poll: %d %s", code, raw)
	}
	if st := s.Stats(); st.BatchesCreated != 0 {
		t.Fatalf("an encoded path created %d batches", st.BatchesCreated)
	}
	// The same call with literal slashes is served.
	code, env, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": "hi"}}})
	if code != 200 || !env.Success || q.Status != "queued" {
		t.Fatalf("literal path: %d %+v", code, env)
	}
}

// TestCloudflareNullReference: an item sent without external_reference
// answers "external_reference": null, as the docs show, not without the key.
func TestCloudflareNullReference(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{})
	for _, model := range []string{emutest.CFLlama, "@cf/baai/bge-m3"} {
		item := map[string]any{"prompt": "no reference"}
		if model != emutest.CFLlama {
			item = map[string]any{"query": "q", "contexts": []any{map[string]any{"text": "x"}}}
		}
		withRef := map[string]any{"prompt": "with", "external_reference": "r1"}
		if model != emutest.CFLlama {
			withRef = map[string]any{"text": "t", "external_reference": "r1"}
		}
		for _, r := range cfBatch(t, ts, model, item, withRef) {
			ref, ok := r["external_reference"]
			switch {
			case !ok:
				t.Errorf("%s: item %s has no external_reference key", model, r["id"])
			case string(r["id"]) == "0" && string(ref) != "null":
				t.Errorf("%s: item 0 reference %s, want null", model, ref)
			case string(r["id"]) == "1" && string(ref) != `"r1"`:
				t.Errorf("%s: item 1 reference %s", model, ref)
			}
		}
	}
}

// TestCloudflareEmbeddingDims: each bge model answers vectors of its real
// size (bge-small 384, bge-base 768, bge-large and bge-m3 1024), unit
// length, the same for the same text, batch or not.
func TestCloudflareEmbeddingDims(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{})
	type emb struct {
		Shape    []int       `json:"shape"`
		Data     [][]float64 `json:"data"`
		Response [][]float64 `json:"response"`
	}
	check := func(what string, e emb, n, dim int) [][]float64 {
		t.Helper()
		vecs := e.Data
		if vecs == nil {
			vecs = e.Response
		}
		if len(e.Shape) != 2 || e.Shape[0] != n || e.Shape[1] != dim || len(vecs) != n {
			t.Fatalf("%s: shape %v, %d vectors; want [%d %d]", what, e.Shape, len(vecs), n, dim)
		}
		for i, v := range vecs {
			var norm float64
			for _, x := range v {
				norm += x * x
			}
			if len(v) != dim || math.Abs(math.Sqrt(norm)-1) > 1e-3 {
				t.Fatalf("%s: vector %d has %d values, norm %f", what, i, len(v), math.Sqrt(norm))
			}
		}
		return vecs
	}
	for model, dim := range map[string]int{"@cf/baai/bge-small-en-v1.5": 384, "@cf/baai/bge-base-en-v1.5": 768,
		"@cf/baai/bge-large-en-v1.5": 1024, "@cf/baai/bge-m3": 1024} {
		rs := cfBatch(t, ts, model, map[string]any{"text": []string{"a", "b"}}, map[string]any{"text": "a", "pooling": "cls"})
		byID := map[string]emb{}
		for _, r := range rs {
			var e emb
			emutest.MustUnmarshal(t, r["result"], &e)
			byID[string(r["id"])] = e
		}
		two := check(model+" item 0", byID["0"], 2, dim)
		one := check(model+" item 1", byID["1"], 1, dim)
		if fmt.Sprint(two[0]) != fmt.Sprint(one[0]) || fmt.Sprint(two[0]) == fmt.Sprint(two[1]) {
			t.Errorf("%s: vectors are not a function of the text", model)
		}
		code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, model, false), map[string]any{"text": "a"})
		var e emb
		emutest.MustUnmarshal(t, env.Result, &e)
		if sync := check(model+" sync", e, 1, dim); code != 200 || fmt.Sprint(sync[0]) != fmt.Sprint(one[0]) {
			t.Errorf("%s: the synchronous vector differs from the batch one", model)
		}
	}
	// bge-m3 with contexts and no query embeds the contexts.
	rs := cfBatch(t, ts, "@cf/baai/bge-m3", map[string]any{"contexts": []any{map[string]any{"text": "x"}, map[string]any{"text": "y"}}})
	var e emb
	emutest.MustUnmarshal(t, rs[0]["result"], &e)
	check("bge-m3 contexts", e, 2, 1024)
}

// TestCloudflareItemSchema: batch items the model schemas refuse are
// refused at submit with 400 / 5004, naming the item; items they allow
// are queued.
func TestCloudflareItemSchema(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{})
	m3, base, m2m := "@cf/baai/bge-m3", "@cf/baai/bge-base-en-v1.5", "@cf/meta/m2m100-1.2b"
	texts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprint("t", i)
		}
		return out
	}
	bad := []struct {
		model string
		item  string
		want  string
	}{
		{emutest.CFLlama, `{"prompt":"p","external_reference":7}`, "/external_reference"},
		{emutest.CFLlama, `{"prompt":"p","external_reference":null}`, "/external_reference"},
		{base, `{"text":"t","external_reference":{"id":1}}`, "/external_reference"},
		{emutest.CFLlama, `{"prompt":7}`, "/prompt"},
		{emutest.CFLlama, `{"prompt":"p","max_tokens":null}`, "/max_tokens"},
		{emutest.CFLlama, `{"prompt":"p","temperature":"hot"}`, "/temperature"},
		{emutest.CFLlama, `{"prompt":"p","temperature":9}`, "/temperature"},
		{emutest.CFLlama, `{"prompt":"p","top_p":3}`, "/top_p"},
		{emutest.CFLlama, `{"prompt":"p","top_k":2.5}`, "/top_k"},
		{emutest.CFLlama, `{"prompt":"p","seed":0}`, "/seed"},
		{emutest.CFLlama, `{"prompt":"p","frequency_penalty":-3}`, "/frequency_penalty"},
		{emutest.CFLlama, `{"prompt":"p","stream":"yes"}`, "/stream"},
		{emutest.CFLlama, `{"prompt":"p","response_format":{"type":"xml"}}`, "/response_format/type"},
		{base, `{"text":""}`, "/text"},
		{base, `{"text":["a",""]}`, "/text/1"},
		{base, `{"text":["a",3]}`, "/text"},
		{base, `{"text":` + string(mustJSON(texts(101))) + `}`, "more than 100"},
		{base, `{"text":"t","pooling":"max"}`, "/pooling"},
		{m3, `{"query":5,"contexts":[{"text":"x"}]}`, "/query"},
		{m3, `{"contexts":"x"}`, "/contexts"},
		{m2m, `{"text":"t","target_lang":"fr","source_lang":5}`, "/source_lang"},
	}
	for _, c := range bad {
		body := `{"requests":[{"prompt":"fine"},` + c.item + `]}`
		if c.model != emutest.CFLlama {
			body = `{"requests":[` + c.item + `]}`
		}
		code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, c.model, true), []byte(body), cfAuth)
		var env emutest.CFEnvelope
		emutest.MustUnmarshal(t, raw, &env)
		if code != 400 || env.Success || len(env.Errors) == 0 || env.Errors[0].Code != 5004 || !strings.Contains(env.Errors[0].Message, c.want) {
			t.Errorf("%s %s: %d %s", c.model, c.item, code, raw)
		}
	}
	good := []struct{ model, item string }{
		{emutest.CFLlama, `{"prompt":"p","temperature":0.7,"top_p":1.5,"top_k":40,"seed":42,"frequency_penalty":-1,"presence_penalty":1,"repetition_penalty":1.1,"stream":false,"raw":false,"response_format":{"type":"json_object"}}`},
		{base, `{"text":` + string(mustJSON(texts(100))) + `,"pooling":"mean"}`},
		{m3, `{"query":"q","contexts":[{"text":"x"},{}],"truncate_inputs":true}`},
		{m2m, `{"text":"t","target_lang":"fr","source_lang":"en"}`},
	}
	for _, c := range good {
		code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, c.model, true), []byte(`{"requests":[`+c.item+`]}`), cfAuth)
		if code != 200 {
			t.Errorf("%s %s: %d %s", c.model, c.item, code, raw)
		}
	}
}

// TestCloudflareNeedsCredentials: a call without an Authorization header
// (or X-Auth-Key with X-Auth-Email) is refused 400 code 9106 as the live
// API refuses it, even when the emulator takes any key; with a key set, a
// missing header is still 9106 and a wrong one 401 code 10000.
func TestCloudflareNeedsCredentials(t *testing.T) {
	t.Parallel()
	body := []byte(`{"requests":[{"prompt":"hi"}]}`)
	for _, key := range []string{"", "tok"} {
		s, ts := start(t, Options{APIKey: key})
		for _, hdr := range []map[string]string{nil, {"X-Auth-Key": "k"}, {"X-Auth-Email": "a@b.c"}} {
			code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), body, hdr)
			var env emutest.CFEnvelope
			emutest.MustUnmarshal(t, raw, &env)
			if code != 400 || env.Success || len(env.Errors) != 1 || env.Errors[0].Code != 9106 ||
				env.Errors[0].Message != "Missing X-Auth-Key, X-Auth-Email or Authorization headers" {
				t.Errorf("key %q, headers %v: %d %s", key, hdr, code, raw)
			}
		}
		if st := s.Stats(); st.BatchesCreated != 0 {
			t.Fatalf("key %q: a call without credentials created %d batches", key, st.BatchesCreated)
		}
		code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), body, cfAuth)
		if code != 200 {
			t.Errorf("key %q, with a token: %d %s", key, code, raw)
		}
		if key == "" {
			hdr := map[string]string{"X-Auth-Key": "k", "X-Auth-Email": "a@b.c"}
			if code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), body, hdr); code != 200 {
				t.Errorf("global API key: %d %s", code, raw)
			}
			continue
		}
		if code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), body, map[string]string{"Authorization": "Bearer nope"}); code != 401 || !strings.Contains(string(raw), "10000") {
			t.Errorf("wrong token: %d %s", code, raw)
		}
	}
}

// TestCloudflareAsyncModelsOnly: by default a batch is queued only for the
// async-capable models (the live API refuses the others 400 code 5007),
// while a synchronous run takes any model; CloudflareAnyModel lifts it.
func TestCloudflareAsyncModelsOnly(t *testing.T) {
	t.Parallel()
	batch := map[string]any{"requests": []any{map[string]any{"prompt": "x"}}}
	s, ts := start(t, Options{})
	for _, model := range DefaultCloudflareModels {
		item := map[string]any{"prompt": "x"}
		switch cfKind(model) {
		case "embed", "m3":
			item = map[string]any{"text": "x"}
		case "translate":
			item = map[string]any{"text": "x", "target_lang": "fr"}
		}
		if code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, model, true), map[string]any{"requests": []any{item}}); code != 200 || !env.Success {
			t.Errorf("%s: %d %+v", model, code, env)
		}
	}
	created := s.Stats().BatchesCreated
	for _, model := range []string{"@cf/meta/llama-2-7b-chat-int8", "@cf/microsoft/phi-2", "gpt-4o"} {
		code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, model, true), batch)
		if code != 400 || env.Success || env.Errors[0].Code != 5007 || !strings.Contains(env.Errors[0].Message, model) {
			t.Errorf("%s queued: %d %+v", model, code, env)
		}
		if code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, model, false), map[string]any{"prompt": "x"}); code != 200 || !env.Success {
			t.Errorf("%s run synchronously: %d %+v", model, code, env)
		}
	}
	if st := s.Stats(); st.BatchesCreated != created {
		t.Fatalf("%d batches created for models that cannot queue", st.BatchesCreated-created)
	}
	_, ts = start(t, Options{CloudflareAnyModel: true})
	if code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, "@cf/meta/llama-2-7b-chat-int8", true), batch); code != 200 || !env.Success {
		t.Errorf("CloudflareAnyModel: %d %+v", code, env)
	}
}

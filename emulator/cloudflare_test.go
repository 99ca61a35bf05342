package emulator

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

const cfLlama = "@cf/meta/llama-3.3-70b-instruct-fp8-fast"

func cfURL(ts *httptest.Server, model string, queue bool) string {
	u := ts.URL + "/client/v4/accounts/acc123/ai/run/" + model
	if queue {
		u += "?queueRequest=true"
	}
	return u
}

type cfEnvelope struct {
	Result  json.RawMessage `json:"result"`
	Success bool            `json:"success"`
	Errors  []struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errors"`
	Messages []any `json:"messages"`
}

type cfFinal struct {
	Status    string `json:"status"`
	RequestID string `json:"request_id"`
	Model     string `json:"model"`
	Responses []struct {
		ID        int             `json:"id"`
		Result    json.RawMessage `json:"result"`
		Success   bool            `json:"success"`
		Error     json.RawMessage `json:"error"`
		Reference *string         `json:"external_reference"`
	} `json:"responses"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

func cfCall(t *testing.T, url string, body any) (int, cfEnvelope, cfFinal) {
	t.Helper()
	b, _ := json.Marshal(body)
	code, _, raw := rawDo(t, "POST", url, b, map[string]string{"Authorization": "Bearer tok"})
	var env cfEnvelope
	mustUnmarshal(t, raw, &env)
	if env.Errors == nil || env.Messages == nil {
		t.Fatalf("envelope lacks errors/messages arrays: %s", raw)
	}
	var fin cfFinal
	if len(env.Result) > 0 && string(env.Result) != "null" {
		mustUnmarshal(t, env.Result, &fin)
	}
	return code, env, fin
}

func TestCloudflareAsyncBatch(t *testing.T) {
	clk := newClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	var reqs []any
	for i := range 12 {
		reqs = append(reqs, map[string]any{"prompt": fmt.Sprintf("Tell me joke %d", i), "external_reference": fmt.Sprintf("ref%d", i)})
	}
	reqs = append(reqs, map[string]any{"prompt": "no reference", "max_tokens": 2})
	code, env, q := cfCall(t, cfURL(ts, cfLlama, true), map[string]any{"requests": reqs})
	if code != 200 || !env.Success || q.Status != "queued" || q.Model != cfLlama || len(q.RequestID) != 36 {
		t.Fatalf("submit: %d %+v %+v", code, env, q)
	}
	_, _, p := cfCall(t, cfURL(ts, cfLlama, true), map[string]any{"request_id": q.RequestID})
	if p.Status != "queued" || p.RequestID != q.RequestID {
		t.Fatalf("poll: %+v", p)
	}
	clk.Advance(2 * time.Second)
	// Polling without ?queueRequest=true is accepted too.
	if _, _, p = cfCall(t, cfURL(ts, cfLlama, false), map[string]any{"request_id": q.RequestID}); p.Status != "running" {
		t.Fatalf("poll: %+v", p)
	}
	clk.Advance(8 * time.Second)
	code, env, p = cfCall(t, cfURL(ts, cfLlama, true), map[string]any{"request_id": q.RequestID})
	if code != 200 || !env.Success || len(p.Responses) != 13 || p.Usage == nil || p.Usage.TotalTokens != p.Usage.PromptTokens+p.Usage.CompletionTokens {
		t.Fatalf("final: %d %+v", code, p)
	}
	var order []int
	for _, r := range p.Responses {
		order = append(order, r.ID)
		var res struct {
			Response string `json:"response"`
		}
		mustUnmarshal(t, r.Result, &res)
		if r.ID == 12 {
			if r.Reference != nil || res.Response != "echo: ec" {
				t.Fatalf("item 12: %+v %s", r, r.Result)
			}
			continue
		}
		if !r.Success || r.Reference == nil || *r.Reference != fmt.Sprintf("ref%d", r.ID) ||
			res.Response != expectedAnswer(fmt.Sprintf("Tell me joke %d", r.ID)) {
			t.Fatalf("item %+v %s", r, r.Result)
		}
	}
	if slices.IsSorted(order) {
		t.Fatalf("responses should be unordered: %v", order)
	}
	if st := s.Stats(); st.ByFamily["cloudflare"].RequestsProcessed != 13 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCloudflareModels(t *testing.T) {
	_, ts := start(t, Options{})
	// Text embeddings.
	_, _, q := cfCall(t, cfURL(ts, "@cf/baai/bge-base-en-v1.5", true), map[string]any{"requests": []any{
		map[string]any{"text": []string{"a", "b"}}, map[string]any{"text": "c"}}})
	_, _, p := cfCall(t, cfURL(ts, "@cf/baai/bge-base-en-v1.5", true), map[string]any{"request_id": q.RequestID})
	for _, r := range p.Responses {
		var e struct {
			Shape []int       `json:"shape"`
			Data  [][]float64 `json:"data"`
		}
		mustUnmarshal(t, r.Result, &e)
		want := map[int]int{0: 2, 1: 1}[r.ID]
		if len(e.Shape) != 2 || e.Shape[0] != want || e.Shape[1] != 768 || len(e.Data) != want || len(e.Data[0]) != 768 {
			t.Fatalf("embedding shape %v, %d vectors", e.Shape, len(e.Data))
		}
	}
	// bge-m3 reranking: one score per context.
	_, _, q = cfCall(t, cfURL(ts, "@cf/baai/bge-m3", true), map[string]any{"requests": []any{
		map[string]any{"query": "q", "contexts": []any{map[string]any{"text": "x"}, map[string]any{"text": "y"}, map[string]any{"text": "z"}}}}})
	_, _, p = cfCall(t, cfURL(ts, "@cf/baai/bge-m3", true), map[string]any{"request_id": q.RequestID})
	var m3 struct {
		Response []struct {
			ID    int     `json:"id"`
			Score float64 `json:"score"`
		} `json:"response"`
	}
	mustUnmarshal(t, p.Responses[0].Result, &m3)
	if len(m3.Response) != 3 || m3.Response[2].ID != 2 || m3.Response[0].Score <= 0 || m3.Response[0].Score >= 1 {
		t.Fatalf("bge-m3: %s", p.Responses[0].Result)
	}
	// Synchronous run.
	code, env, _ := cfCall(t, cfURL(ts, cfLlama, false), map[string]any{"prompt": "hello"})
	if code != 200 || string(env.Result) != `{"response":"echo: olleh"}` {
		t.Fatalf("sync: %d %s", code, env.Result)
	}
	// Schema violations are refused at submit with 5004.
	code, env, _ = cfCall(t, cfURL(ts, cfLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": ""}}})
	if code != 400 || env.Success || env.Errors[0].Code != 5004 || env.Result != nil && string(env.Result) != "null" {
		t.Fatalf("bad item: %d %+v", code, env)
	}
	// Unknown request ids.
	if code, env, _ = cfCall(t, cfURL(ts, cfLlama, true), map[string]any{"request_id": "nope"}); code != 400 || env.Success {
		t.Fatalf("unknown id: %d %+v", code, env)
	}
}

func TestCloudflareLimitsAndStrictModels(t *testing.T) {
	_, ts := start(t, Options{CloudflareMaxBytes: 1000})
	big := map[string]any{"requests": []any{map[string]any{"prompt": strings.Repeat("x", 1000)}}}
	code, env, _ := cfCall(t, cfURL(ts, cfLlama, true), big)
	if code != 413 || env.Success || env.Errors[0].Code != 3006 {
		t.Fatalf("too large: %d %+v", code, env)
	}
	code, env, _ = cfCall(t, cfURL(ts, "@cf/meta/llama-2-7b-chat-int8", true), map[string]any{"requests": []any{map[string]any{"prompt": "x"}}})
	if code != 400 || env.Errors[0].Code != 5007 {
		t.Fatalf("non-async model: %d %+v", code, env)
	}
	// Exactly at the limit is refused too ("under 10 MB").
	body := `{"requests":[{"prompt":"` + strings.Repeat("y", 1000-len(`{"requests":[{"prompt":""}]}`)) + `"}]}`
	code, _, raw := rawDo(t, "POST", cfURL(ts, cfLlama, true), []byte(body), map[string]string{"Authorization": "Bearer tok"})
	if len(body) != 1000 || code != 413 || !strings.Contains(string(raw), "3006") {
		t.Fatalf("at limit: %d %s", code, raw)
	}
}

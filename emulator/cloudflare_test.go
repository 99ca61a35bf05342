package emulator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/emutest"
)

func TestCloudflareAsyncBatch(t *testing.T) {
	t.Parallel()
	clk := emutest.NewClock()
	s, ts := start(t, Options{BatchTime: 10 * time.Second, Now: clk.Now})
	var reqs []any
	for i := range 12 {
		reqs = append(reqs, map[string]any{"prompt": fmt.Sprintf("Tell me joke %d", i), "external_reference": fmt.Sprintf("ref%d", i)})
	}
	reqs = append(reqs, map[string]any{"prompt": "no reference", "max_tokens": 2})
	code, env, q := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": reqs})
	if code != 200 || !env.Success || q.Status != "queued" || q.Model != emutest.CFLlama || len(q.RequestID) != 36 {
		t.Fatalf("submit: %d %+v %+v", code, env, q)
	}
	_, _, p := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID})
	if p.Status != "queued" || p.RequestID != q.RequestID {
		t.Fatalf("poll: %+v", p)
	}
	clk.Advance(2 * time.Second)
	// Polling without ?queueRequest=true is accepted too.
	if _, _, p = emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, false), map[string]any{"request_id": q.RequestID}); p.Status != "running" {
		t.Fatalf("poll: %+v", p)
	}
	clk.Advance(8 * time.Second)
	code, env, p = emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": q.RequestID})
	if code != 200 || !env.Success || len(p.Responses) != 13 || p.Usage == nil || p.Usage.TotalTokens != p.Usage.PromptTokens+p.Usage.CompletionTokens {
		t.Fatalf("final: %d %+v", code, p)
	}
	var order []int
	for _, r := range p.Responses {
		order = append(order, r.ID)
		var res struct {
			Response string `json:"response"`
		}
		emutest.MustUnmarshal(t, r.Result, &res)
		if r.ID == 12 {
			if r.Reference != nil || res.Response != "echo: ec" {
				t.Fatalf("item 12: %+v %s", r, r.Result)
			}
			continue
		}
		if !r.Success || r.Reference == nil || *r.Reference != fmt.Sprintf("ref%d", r.ID) ||
			res.Response != emutest.ExpectedAnswer(fmt.Sprintf("Tell me joke %d", r.ID)) {
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
	t.Parallel()
	_, ts := start(t, Options{})
	// Text embeddings.
	_, _, q := emutest.CFCall(t, emutest.CFURL(ts, "@cf/baai/bge-base-en-v1.5", true), map[string]any{"requests": []any{
		map[string]any{"text": []string{"a", "b"}}, map[string]any{"text": "c"}}})
	_, _, p := emutest.CFCall(t, emutest.CFURL(ts, "@cf/baai/bge-base-en-v1.5", true), map[string]any{"request_id": q.RequestID})
	for _, r := range p.Responses {
		var e struct {
			Shape []int       `json:"shape"`
			Data  [][]float64 `json:"data"`
		}
		emutest.MustUnmarshal(t, r.Result, &e)
		want := map[int]int{0: 2, 1: 1}[r.ID]
		if len(e.Shape) != 2 || e.Shape[0] != want || e.Shape[1] != 768 || len(e.Data) != want || len(e.Data[0]) != 768 {
			t.Fatalf("embedding shape %v, %d vectors", e.Shape, len(e.Data))
		}
	}
	// bge-m3 reranking: one score per context.
	_, _, q = emutest.CFCall(t, emutest.CFURL(ts, "@cf/baai/bge-m3", true), map[string]any{"requests": []any{
		map[string]any{"query": "q", "contexts": []any{map[string]any{"text": "x"}, map[string]any{"text": "y"}, map[string]any{"text": "z"}}}}})
	_, _, p = emutest.CFCall(t, emutest.CFURL(ts, "@cf/baai/bge-m3", true), map[string]any{"request_id": q.RequestID})
	var m3 struct {
		Response []struct {
			ID    int     `json:"id"`
			Score float64 `json:"score"`
		} `json:"response"`
	}
	emutest.MustUnmarshal(t, p.Responses[0].Result, &m3)
	if len(m3.Response) != 3 || m3.Response[2].ID != 2 || m3.Response[0].Score <= 0 || m3.Response[0].Score >= 1 {
		t.Fatalf("bge-m3: %s", p.Responses[0].Result)
	}
	// Synchronous run.
	code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, false), map[string]any{"prompt": "hello"})
	if code != 200 || string(env.Result) != `{"response":"echo: olleh"}` {
		t.Fatalf("sync: %d %s", code, env.Result)
	}
	// Schema violations are refused at submit with 5004.
	code, env, _ = emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"requests": []any{map[string]any{"prompt": ""}}})
	if code != 400 || env.Success || env.Errors[0].Code != 5004 || env.Result != nil && string(env.Result) != "null" {
		t.Fatalf("bad item: %d %+v", code, env)
	}
	// Unknown request ids.
	if code, env, _ = emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), map[string]any{"request_id": "nope"}); code != 400 || env.Success {
		t.Fatalf("unknown id: %d %+v", code, env)
	}
}

func TestCloudflareLimitsAndStrictModels(t *testing.T) {
	t.Parallel()
	_, ts := start(t, Options{CloudflareMaxBytes: 1000})
	big := map[string]any{"requests": []any{map[string]any{"prompt": strings.Repeat("x", 1000)}}}
	code, env, _ := emutest.CFCall(t, emutest.CFURL(ts, emutest.CFLlama, true), big)
	if code != 413 || env.Success || env.Errors[0].Code != 3006 {
		t.Fatalf("too large: %d %+v", code, env)
	}
	code, env, _ = emutest.CFCall(t, emutest.CFURL(ts, "@cf/meta/llama-2-7b-chat-int8", true), map[string]any{"requests": []any{map[string]any{"prompt": "x"}}})
	if code != 400 || env.Errors[0].Code != 5007 {
		t.Fatalf("non-async model: %d %+v", code, env)
	}
	// Exactly at the limit is refused too ("under 10 MB").
	body := `{"requests":[{"prompt":"` + strings.Repeat("y", 1000-len(`{"requests":[{"prompt":""}]}`)) + `"}]}`
	code, _, raw := emutest.Do(t, "POST", emutest.CFURL(ts, emutest.CFLlama, true), []byte(body), map[string]string{"Authorization": "Bearer tok"})
	if len(body) != 1000 || code != 413 || !strings.Contains(string(raw), "3006") {
		t.Fatalf("at limit: %d %s", code, raw)
	}
}

package splitter_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
)

// boundText is the prompt of every request of TestEstimateNativeMatchesChat.
const boundText = "Summarise the following in two sentences: the river rose through the night, " +
	"and by morning the lower town was under a metre of water. The council opened the school " +
	"as a shelter, and volunteers carried the old and the sick up the hill to the church."

// TestEstimateNativeMatchesChat: the same request, written in its
// family's native format and as an OpenAI chat completions line (which
// the plan translates), is estimated within 10% both in expected and in
// upper-bound cost, for every family; and each family's own output bound
// (Gemini's generationConfig.maxOutputTokens, Anthropic's max_tokens,
// Workers AI's default of 256, the Responses API's max_output_tokens,
// embeddings' none), times the answers asked for (n, candidateCount),
// bounds the cost without a ceiling from the price table.
func TestEstimateNativeMatchesChat(t *testing.T) {
	t.Parallel()
	msgs := fmt.Sprintf(`[{"role":"user","content":%q}]`, boundText)
	chat := func(model, extra string) string {
		return fmt.Sprintf(`{"custom_id":"c%%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":%s%s}}`, model, msgs, extra)
	}
	native := func(url, body string) string {
		return fmt.Sprintf(`{"custom_id":"n%%d","method":"POST","url":%q,"body":%s}`, url, body)
	}
	oaEmbed := fmt.Sprintf(`{"custom_id":"c%%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":%q}}`, boundText)
	gemContents := fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":%q}]}]`, boundText)
	cases := []struct {
		name, provider   string
		native, chat     string
		defaultMaxTokens int64
		wantMax          int64  // the max output tokens of one request
		chatProvider     string // where the OpenAI-format line is planned; "": provider
	}{
		{"openai chat", "openai", native("/v1/chat/completions", fmt.Sprintf(`{"model":"gpt-4o-mini","messages":%s,"max_completion_tokens":64}`, msgs)),
			chat("gpt-4o-mini", `,"max_tokens":64`), 0, 64, ""},
		{"openai chat n", "openai", native("/v1/chat/completions", fmt.Sprintf(`{"model":"gpt-4o-mini","n":3,"messages":%s,"max_completion_tokens":64}`, msgs)),
			chat("gpt-4o-mini", `,"max_tokens":192`), 0, 192, ""},
		{"openai responses", "openai", native("/v1/responses", fmt.Sprintf(`{"model":"gpt-4o-mini","input":%s,"max_output_tokens":64}`, msgs)),
			chat("gpt-4o-mini", `,"max_tokens":64`), 0, 64, ""},
		{"openai embeddings", "openai", native("/v1/embeddings", fmt.Sprintf(`{"model":"text-embedding-3-small","input":%q}`, boundText)),
			chat("text-embedding-3-small", `,"max_tokens":0`), 0, 0, ""},
		{"anthropic", "anthropic", native("/v1/messages", fmt.Sprintf(`{"model":"claude-haiku-4-5","max_tokens":64,"messages":%s}`, msgs)),
			chat("claude-haiku-4-5", `,"max_tokens":64`), 0, 64, ""},
		{"anthropic --default-max-tokens", "anthropic", native("/v1/messages", fmt.Sprintf(`{"model":"claude-haiku-4-5","max_tokens":64,"messages":%s}`, msgs)),
			chat("claude-haiku-4-5", ""), 64, 64, ""},
		{"gemini", "gemini", native("/v1beta/models/gemini-2.5-flash:generateContent", gemContents+`,"generationConfig":{"temperature":0.2,"maxOutputTokens":64}}`),
			chat("gemini-2.5-flash", `,"max_tokens":64`), 0, 64, ""},
		{"gemini candidateCount", "gemini", native("/v1beta/models/gemini-2.5-flash:generateContent", gemContents+`,"generationConfig":{"candidateCount":3,"maxOutputTokens":64}}`),
			chat("gemini-2.5-flash", `,"n":3,"max_tokens":64`), 0, 192, ""},
		{"gemini snake_case", "gemini", native("/v1beta/models/gemini-2.5-flash:generateContent", gemContents+`,"generation_config":{"max_output_tokens":64}}`),
			chat("gemini-2.5-flash", `,"max_completion_tokens":64`), 0, 64, ""},
		{"gemini --default-max-tokens", "gemini", native("/v1beta/models/gemini-2.5-flash:generateContent", gemContents+`,"generationConfig":{"maxOutputTokens":64}}`),
			chat("gemini-2.5-flash", ""), 64, 64, ""},
		{"cloudflare default", "cloudflare", native("/ai/run/@cf/meta/llama-3.1-8b-instruct", fmt.Sprintf(`{"messages":%s}`, msgs)),
			chat("@cf/meta/llama-3.1-8b-instruct", ""), 0, 256, ""},
		{"cloudflare prompt", "cloudflare", native("/ai/run/@cf/meta/llama-3.1-8b-instruct", fmt.Sprintf(`{"prompt":%q,"max_tokens":64}`, boundText)),
			chat("@cf/meta/llama-3.1-8b-instruct", `,"max_tokens":64`), 0, 64, ""},
		// Embeddings have no chat form: the OpenAI-format line is OpenAI's.
		{"cloudflare embeddings", "cloudflare", native("/ai/run/@cf/baai/bge-base-en-v1.5", fmt.Sprintf(`{"text":[%q]}`, boundText)),
			oaEmbed, 0, 0, "openai"},
		{"mistral", "mistral", native("/v1/chat/completions", fmt.Sprintf(`{"model":"mistral-small-latest","messages":%s,"max_tokens":64}`, msgs)),
			chat("mistral-small-latest", ""), 64, 64, ""},
		{"mistral embeddings", "mistral", native("/v1/embeddings", fmt.Sprintf(`{"model":"mistral-embed","input":[%q]}`, boundText)),
			oaEmbed, 0, 0, "openai"},
		{"together n", "together", native("/v1/chat/completions", fmt.Sprintf(`{"model":"meta-llama/Llama-3.3-70B-Instruct-Turbo","messages":%s,"max_tokens":128}`, msgs)),
			chat("meta-llama/Llama-3.3-70B-Instruct-Turbo", `,"n":2,"max_tokens":64`), 0, 128, ""},
		{"together", "together", native("/v1/chat/completions", fmt.Sprintf(`{"model":"meta-llama/Llama-3.3-70B-Instruct-Turbo","messages":%s,"max_tokens":64}`, msgs)),
			chat("meta-llama/Llama-3.3-70B-Instruct-Turbo", `,"max_completion_tokens":64`), 0, 64, ""},
	}
	// A price without a ceiling of its own: the requests' bounds decide.
	price := pricing.Price{Input: 1, Output: 4}
	const n = 20
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a state directory of its own
			e := newEnv(t)
			est := func(kind, prov, tmpl string) pricing.Estimate {
				var b strings.Builder
				for i := range n {
					fmt.Fprintf(&b, tmpl+"\n", i)
				}
				in := e.write(kind+".jsonl", []byte(b.String()))
				r := e.mustSplit(in, prov, sluice.Limits{}, func(c *splitter.Config) {
					c.Codec = provider.Presets[prov].PlanCodec(provider.ChatOptions{DefaultMaxTokens: tc.defaultMaxTokens})
				})
				if r.res.Requests != n || len(r.chunks) != 1 {
					t.Fatalf("%s: %d requests (%d rejected) in %d chunks", kind, r.res.Requests, r.res.Rejected, len(r.chunks))
				}
				c := r.chunks[0]
				if c.NoMaxRequests != 0 || c.MaxOutputTokens != n*tc.wantMax {
					t.Errorf("%s: max output tokens %d with %d requests unbounded; want %d, 0", kind, c.MaxOutputTokens, c.NoMaxRequests, n*tc.wantMax)
				}
				e := pricing.Of(price, true, sluice.Learned{}, pricing.WorkOf(&c))
				if !e.Bounded() {
					t.Fatalf("%s: no finite upper bound (%+v)", kind, e)
				}
				return e
			}
			cp := tc.chatProvider
			if cp == "" {
				cp = tc.provider
			}
			en, ec := est("native", tc.provider, tc.native), est("chat", cp, tc.chat)
			for _, p := range [][3]any{{"cost", en.Cost, ec.Cost}, {"max cost", en.MaxCost, ec.MaxCost}} {
				a, b := p[1].(float64), p[2].(float64)
				if math.Abs(a-b) > 0.1*math.Max(a, b) {
					t.Errorf("%s: native $%.6f, chat $%.6f: more than 10%% apart", p[0], a, b)
				}
			}
		})
	}
}

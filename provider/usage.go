package provider

import (
	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice"
)

// OpenAIUsage reads an OpenAI-shaped usage object (Chat Completions'
// prompt_tokens and completion_tokens, else the Responses API's
// input_tokens and output_tokens), as OpenAI-compatible APIs and Workers
// AI return it; anything else is no usage.
func OpenAIUsage(u gjson.Result) sluice.Usage {
	in := u.Get("prompt_tokens")
	if !in.Exists() {
		in = u.Get("input_tokens")
	}
	out := u.Get("completion_tokens")
	if !out.Exists() {
		out = u.Get("output_tokens")
	}
	return sluice.Usage{InputTokens: in.Int(), OutputTokens: out.Int()}
}

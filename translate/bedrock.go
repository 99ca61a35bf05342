package translate

import (
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Bedrock translates chat completions requests into the bodies an Amazon
// Bedrock batch job (a model invocation job) takes as each record's
// modelInput, chosen by the model id (BedrockKindOf):
//
//   - Anthropic Claude (anthropic.claude-…, and inference profiles such as
//     us.anthropic.claude-…): the Anthropic Messages body of the Anthropic
//     translation, without "model" and with "anthropic_version":
//     "bedrock-2023-05-31", as InvokeModel takes it;
//   - Meta Llama 3 and later (meta.llama…): {"prompt", "max_gen_len",
//     "temperature", "top_p"}, the prompt in Llama 3's chat template;
//   - Amazon Nova (amazon.nova-…): the messages-v1 schema
//     {"schemaVersion", "system", "messages", "inferenceConfig"};
//   - any other model: a Converse request {"messages", "system",
//     "inferenceConfig"}, for a job created with modelInvocationType
//     Converse, which Bedrock runs on every model it serves.
//
// Llama, Nova and Converse bodies are translated from text messages only:
// tools, images, response_format and seed are refused (write the native
// body, /model/{id}/invoke or /converse, to use them).
var Bedrock = register(&Target{Name: "bedrock", request: bedrockRequest, result: bedrockResult, errBody: bedrockError})

// BedrockAnthropicVersion is the anthropic_version Bedrock's InvokeModel
// takes in a Claude body.
const BedrockAnthropicVersion = "bedrock-2023-05-31"

// BedrockKind is the InvokeModel body shape of a Bedrock model.
type BedrockKind string

const (
	BedrockClaude     BedrockKind = "claude"
	BedrockLlama      BedrockKind = "llama"
	BedrockNova       BedrockKind = "nova"
	BedrockTitanEmbed BedrockKind = "titan-embed"
	// BedrockConverse: no InvokeModel shape sluice knows; chat lines are
	// sent as Converse requests.
	BedrockConverse BedrockKind = "converse"
)

// BedrockKindOf tells the body shape of a model id, with or without an
// inference profile's region prefix (us., eu., apac., global.) or an ARN.
func BedrockKindOf(model string) BedrockKind {
	m := model
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	switch {
	case strings.Contains(m, "anthropic.claude"):
		return BedrockClaude
	case strings.Contains(m, "meta.llama"):
		return BedrockLlama
	case strings.Contains(m, "amazon.nova"):
		return BedrockNova
	case strings.Contains(m, "amazon.titan-embed"):
		return BedrockTitanEmbed
	}
	return BedrockConverse
}

func bedrockRequest(dst []byte, c *chat, model string, warn func(Warning)) ([]byte, error) {
	switch BedrockKindOf(model) {
	case BedrockClaude:
		body, err := Anthropic.request(nil, c, model, warn)
		if err != nil {
			return dst, err
		}
		if body, err = sjson.DeleteBytes(body, "model"); err != nil {
			return dst, errf("", "%v", err)
		}
		dst = append(dst, `{"anthropic_version":"`+BedrockAnthropicVersion+`"`...)
		if inner := strings.TrimSpace(string(body[1:])); inner != "}" {
			dst = append(dst, ',')
		}
		return append(dst, body[1:]...), nil
	case BedrockLlama:
		return llamaRequest(dst, c, warn)
	case BedrockNova:
		return converseRequest(dst, c, true, warn)
	case BedrockTitanEmbed:
		return dst, errf("", "%s is an embeddings model: map /v1/embeddings lines to it, or write its lines as /model/%s/invoke with {\"inputText\": ...}", model, model)
	}
	return converseRequest(dst, c, false, warn)
}

// bedrockCommon refuses what the text-only bodies cannot say.
func bedrockCommon(c *chat, target string, warn func(Warning)) error {
	// check judges the parameters no common field holds (others), then
	// the rules.
	sp := spec{name: target, rules: rules(noPenalties(target), noLogprobs(target), one(oneChoice(target)))}
	if _, err := sp.check(c, warn); err != nil {
		return err
	}
	switch {
	case len(c.tools) > 0 || present(c.toolChoice):
		return errf("tools", "tools are not translated for %s; write the Converse body (/model/{id}/converse)", target)
	case present(c.format) && c.format.Get("type").String() != "text":
		return errf("response_format", "%s has no structured output through sluice", target)
	case present(c.seed):
		return errf("seed", "%s takes no seed", target)
	case present(c.reasoning):
		return errf("reasoning_effort", "has no equivalent on %s", target)
	}
	if present(c.user) {
		warn(Warning{Param: "user", Reason: "an end-user id for abuse monitoring; Bedrock has no field for it"})
	}
	return nil
}

// bedrockText is the text of a message made of text parts only.
func bedrockText(m *msg, target string) (string, error) {
	if len(m.toolCalls) > 0 || m.role == "tool" {
		return "", errf(m.path(), "tool messages are not translated for %s", target)
	}
	var b strings.Builder
	for _, p := range m.parts {
		if p.kind != "text" {
			return "", errf(p.path(), "only text is translated for %s (a %s part is not)", target, p.kind)
		}
		b.WriteString(p.text.String())
	}
	return b.String(), nil
}

// llamaRequest writes {"prompt","max_gen_len","temperature","top_p"}, the
// prompt in Llama 3's chat template, ending with the assistant's header.
func llamaRequest(dst []byte, c *chat, warn func(Warning)) ([]byte, error) {
	const target = "Bedrock Llama"
	if err := bedrockCommon(c, target, warn); err != nil {
		return dst, err
	}
	if len(c.stop) > 0 {
		return dst, errf("stop", "%s takes no stop sequences", target)
	}
	var p strings.Builder
	p.WriteString("<|begin_of_text|>")
	for i := range c.messages {
		m := &c.messages[i]
		text, err := bedrockText(m, target)
		if err != nil {
			return dst, err
		}
		role := m.role
		if role == "developer" {
			role = "system"
		}
		p.WriteString("<|start_header_id|>" + role + "<|end_header_id|>\n\n" + text + "<|eot_id|>")
	}
	p.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	first := true
	dst = append(dst, '{')
	dst = appendKey(dst, &first, "prompt")
	dst = appendString(dst, p.String())
	dst = appendPresent(dst, &first, []rawParam{{"max_gen_len", c.maxTokens}, {"temperature", c.temperature}, {"top_p", c.topP}})
	return append(dst, '}'), nil
}

// rawParam is a key and the body's value to write under it as it is.
type rawParam struct {
	key string
	v   gjson.Result
}

// appendPresent appends each param whose value is present.
func appendPresent(dst []byte, first *bool, ps []rawParam) []byte {
	for _, p := range ps {
		if present(p.v) {
			dst = appendKey(dst, first, p.key)
			dst = append(dst, p.v.Raw...)
		}
	}
	return dst
}

// converseRequest writes a Converse request (Nova's messages-v1 when
// nova): system and developer messages into "system", the others into
// "messages" as text blocks, the sampling parameters into
// "inferenceConfig".
func converseRequest(dst []byte, c *chat, nova bool, warn func(Warning)) ([]byte, error) {
	target := "Bedrock Converse"
	if nova {
		target = "Bedrock Nova"
	}
	if err := bedrockCommon(c, target, warn); err != nil {
		return dst, err
	}
	var system, messages []byte
	for i := range c.messages {
		m := &c.messages[i]
		text, err := bedrockText(m, target)
		if err != nil {
			return dst, err
		}
		block := appendString([]byte(`{"text":`), text)
		block = append(block, '}')
		if m.role == "system" || m.role == "developer" {
			if len(system) > 0 {
				system = append(system, ',')
			}
			system = append(system, block...)
			continue
		}
		if len(messages) > 0 {
			messages = append(messages, ',')
		}
		messages = append(messages, `{"role":`...)
		messages = appendString(messages, m.role)
		messages = append(messages, `,"content":[`...)
		messages = append(messages, block...)
		messages = append(messages, "]}"...)
	}
	if len(messages) == 0 {
		return dst, errf("messages", "%s needs a user message", target)
	}
	first := true
	dst = append(dst, '{')
	if nova {
		dst = appendKey(dst, &first, "schemaVersion")
		dst = append(dst, `"messages-v1"`...)
	}
	if len(system) > 0 {
		dst = appendKey(dst, &first, "system")
		dst = append(append(append(dst, '['), system...), ']')
	}
	dst = appendKey(dst, &first, "messages")
	dst = append(append(append(dst, '['), messages...), ']')
	cfg := []byte{'{'}
	cf := true
	cfg = appendPresent(cfg, &cf, []rawParam{{"maxTokens", c.maxTokens}, {"temperature", c.temperature}, {"topP", c.topP}})
	if len(c.stop) > 0 {
		cfg = appendKey(cfg, &cf, "stopSequences")
		cfg = append(cfg, '[')
		for i, s := range c.stop {
			if i > 0 {
				cfg = append(cfg, ',')
			}
			cfg = appendStr(cfg, s)
		}
		cfg = append(cfg, ']')
	}
	if !cf {
		dst = appendKey(dst, &first, "inferenceConfig")
		dst = append(append(dst, cfg...), '}')
	}
	return append(dst, '}'), nil
}

// bedrockResult reads the answer of each body shape back into a
// chat.completion: Claude's is Anthropic's Messages response; Llama's
// {"generation", "prompt_token_count", "generation_token_count",
// "stop_reason"}; Nova's and Converse's {"output": {"message": {"content":
// [{"text"}]}}, "stopReason", "usage": {"inputTokens", "outputTokens"}}.
func bedrockResult(dst []byte, r gjson.Result, m Meta) ([]byte, error) {
	switch BedrockKindOf(m.Model) {
	case BedrockClaude:
		return Anthropic.result(dst, r, m)
	case BedrockLlama:
		gen := r.Get("generation")
		if gen.Type != gjson.String {
			return dst, errf("", "a Llama answer needs a generation string")
		}
		finish := "stop"
		if r.Get("stop_reason").String() == "length" {
			finish = "length"
		}
		text := gen.Str
		in, out := r.Get("prompt_token_count").Int(), r.Get("generation_token_count").Int()
		return appendCompletion(dst, completion{id: m.ID, model: m.Model, created: m.Created,
			choices: []choice{{text: &text, finish: finish}}, in: in, out: out, total: in + out}), nil
	}
	content := r.Get("output.message.content")
	if !content.IsArray() {
		return dst, errf("", "a Converse answer needs output.message.content")
	}
	var text strings.Builder
	content.ForEach(func(_, b gjson.Result) bool {
		text.WriteString(b.Get("text").String())
		return true
	})
	finish := "stop"
	switch r.Get("stopReason").String() {
	case "max_tokens":
		finish = "length"
	case "content_filtered", "guardrail_intervened":
		finish = "content_filter"
	}
	s := text.String()
	u := r.Get("usage")
	in, out := u.Get("inputTokens").Int(), u.Get("outputTokens").Int()
	return appendCompletion(dst, completion{id: m.ID, model: m.Model, created: m.Created,
		choices: []choice{{text: &s, finish: finish}}, in: in, out: out, total: u.Get("totalTokens").Int()}), nil
}

// bedrockError translates an error body: Bedrock's {"message"} (the
// header x-amzn-ErrorType names its type), an Anthropic error, or a batch
// record's {"errorCode","errorMessage"}.
func bedrockError(dst []byte, r gjson.Result, status int) []byte {
	if e := r.Get("error"); e.IsObject() {
		return anthropicError(dst, r, status)
	}
	msg := r.Get("message").String()
	if msg == "" {
		msg = r.Get("errorMessage").String()
	}
	return appendError(dst, msg, r.Get("__type").String(), "", r.Raw, status)
}

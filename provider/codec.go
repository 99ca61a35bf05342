package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-batch/sluice"
)

// OpenAICodec writes chunk files as OpenAI batch input JSONL: the input line
// itself, one per line, so the chunk file is exactly the uploaded file.
type OpenAICodec struct {
	endpoints map[string]bool
	list      string
	provider  string // named in errors ("" reads "this provider")
}

// Named returns c naming provider in its errors.
func (c OpenAICodec) Named(provider string) OpenAICodec {
	c.provider = provider
	return c
}

// NewOpenAICodec returns a codec accepting the given endpoints.
func NewOpenAICodec(endpoints []string) OpenAICodec {
	m := make(map[string]bool, len(endpoints))
	for _, e := range endpoints {
		m[e] = true
	}
	return OpenAICodec{endpoints: m, list: strings.Join(endpoints, ", ")}
}

func (c OpenAICodec) Validate(it *sluice.Item) error {
	if !c.endpoints[it.URL] {
		name := "this provider"
		if c.provider != "" {
			name = "provider " + c.provider
		}
		return fmt.Errorf("url %q is not a batch endpoint of %s (accepted: %s)%s", it.URL, name, c.list, otherFamily(it.URL, FamilyOpenAI))
	}
	return nil
}

// otherFamily says which provider takes a url of another family's API than
// self's, or "" when url is no other family's.
func otherFamily(url string, self Family) string {
	var fam Family
	var name string
	switch {
	case FamilyOf(url) == FamilyAnthropic:
		fam, name = FamilyAnthropic, "an Anthropic"
	case FamilyOf(url) == FamilyCloudflare:
		fam, name = FamilyCloudflare, "a Cloudflare Workers AI"
	case FamilyOf(url) == FamilyGemini:
		fam, name = FamilyGemini, "a Gemini"
	case strings.HasPrefix(url, "/v1/"):
		fam, name = FamilyOpenAI, "an OpenAI"
	default:
		return ""
	}
	if fam == self {
		return ""
	}
	return fmt.Sprintf("; it is %s url: use --provider %s (or local, which takes every family)", name, fam)
}

func (OpenAICodec) Envelope() sluice.Envelope { return sluice.Envelope{} }

func (OpenAICodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	if !it.ModelFromJob {
		dst = append(dst, it.Raw...)
		return append(dst, '\n'), nil
	}
	body, err := withModel(it.Body, it.Model)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `{"custom_id":`...)
	dst = appendJSONString(dst, it.CustomID)
	dst = append(dst, `,"method":"POST","url":`...)
	dst = appendJSONString(dst, it.URL)
	dst = append(dst, `,"body":`...)
	dst = append(dst, body...)
	return append(dst, "}\n"...), nil
}

// AnthropicCustomID is the form Anthropic requires of a custom_id.
var AnthropicCustomID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// AnthropicCodec writes chunk files as the body of a Message Batches create
// call: {"requests":[{"custom_id":...,"params":{...}}, ...]}.
type AnthropicCodec struct{}

func (AnthropicCodec) Validate(it *sluice.Item) error {
	if it.URL != "/v1/messages" {
		return fmt.Errorf("url %q is not a batch endpoint of Anthropic (accepted: /v1/messages, and /v1/chat/completions translated)%s", it.URL, otherFamily(it.URL, FamilyAnthropic))
	}
	if !AnthropicCustomID.MatchString(it.CustomID) {
		return fmt.Errorf("custom_id %q does not match Anthropic's ^[a-zA-Z0-9_-]{1,64}$", it.CustomID)
	}
	mt := gjson.GetBytes(it.Body, "max_tokens")
	if mt.Type != gjson.Number || mt.Int() < 1 {
		return errors.New("body.max_tokens must be a number >= 1 for Anthropic")
	}
	if m := gjson.GetBytes(it.Body, "messages"); !m.IsArray() {
		return errors.New("body.messages must be an array for Anthropic")
	}
	return nil
}

func (AnthropicCodec) Envelope() sluice.Envelope {
	return sluice.Envelope{Header: []byte(`{"requests":[`), Sep: []byte(","), Footer: []byte("]}")}
}

func (AnthropicCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	body := it.Body
	if it.ModelFromJob {
		var err error
		if body, err = withModel(body, it.Model); err != nil {
			return dst, err
		}
	}
	dst = append(dst, `{"custom_id":`...)
	dst = appendJSONString(dst, it.CustomID)
	dst = append(dst, `,"params":`...)
	dst = append(dst, body...)
	return append(dst, '}'), nil
}

// CloudflareCodec writes chunk files as the body of a Workers AI async batch
// call: {"requests":[{...model input..., "external_reference": custom_id}]}.
// The url names the model (/ai/run/@cf/...), or /ai/run takes it from
// body.model (or the job's model), which is then left out of the item.
type CloudflareCodec struct{}

func (CloudflareCodec) Validate(it *sluice.Item) error {
	switch {
	case strings.HasPrefix(it.URL, "/ai/run/") && len(it.URL) > len("/ai/run/"):
		it.Model = strings.TrimPrefix(it.URL, "/ai/run/")
		it.ModelFromJob = false
	case it.URL == "/ai/run":
		if it.Model == "" {
			return errors.New("url /ai/run needs body.model or --model")
		}
	default:
		return fmt.Errorf("url %q is not a Workers AI endpoint (accepted: /ai/run/{model}, /ai/run, and /v1/chat/completions translated)%s", it.URL, otherFamily(it.URL, FamilyCloudflare))
	}
	if gjson.GetBytes(it.Body, "external_reference").Exists() {
		return errors.New("body.external_reference is set, but sluice sends custom_id there")
	}
	return nil
}

func (CloudflareCodec) Envelope() sluice.Envelope {
	return sluice.Envelope{Header: []byte(`{"requests":[`), Sep: []byte(","), Footer: []byte("]}")}
}

func (CloudflareCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	body := it.Body
	if it.URL == "/ai/run" && !it.ModelFromJob {
		var err error
		if body, err = sjson.DeleteBytes(body, "model"); err != nil {
			return dst, err
		}
	}
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[len(body)-1] != '}' {
		return dst, errors.New("body is not a JSON object")
	}
	inner := bytes.TrimSpace(body[1 : len(body)-1])
	dst = append(dst, '{')
	if len(inner) > 0 {
		dst = append(dst, inner...)
		dst = append(dst, ',')
	}
	dst = append(dst, `"external_reference":`...)
	dst = appendJSONString(dst, it.CustomID)
	return append(dst, '}'), nil
}

// geminiURL is a Gemini generateContent endpoint: the API version, then
// the model resource (models/… or tunedModels/…).
var geminiURL = regexp.MustCompile(`^/(v1beta|v1)/((?:models|tunedModels)/[^/:]+):generateContent$`)

// GeminiCodec writes chunk files as Gemini batch input JSONL, one
// {"key": custom_id, "request": GenerateContentRequest} per line. The url
// (/v1beta/models/{model}:generateContent) names the model, which the
// batch is created for; the body is sent as written.
type GeminiCodec struct{}

// GeminiModel returns the model of a Gemini line's url: "gemini-2.5-flash"
// for models/gemini-2.5-flash, "tunedModels/x" for a tuned model.
func GeminiModel(url string) (string, bool) {
	m := geminiURL.FindStringSubmatch(url)
	if m == nil {
		return "", false
	}
	return strings.TrimPrefix(m[2], "models/"), true
}

func (GeminiCodec) Validate(it *sluice.Item) error {
	model, ok := GeminiModel(it.URL)
	if !ok {
		return fmt.Errorf("url %q is not a Gemini endpoint (accepted: /v1beta/models/{model}:generateContent, /v1/models/{model}:generateContent, and /v1/chat/completions translated)%s", it.URL, otherFamily(it.URL, FamilyGemini))
	}
	if it.Model != "" && !it.ModelFromJob && strings.TrimPrefix(it.Model, "models/") != model {
		return fmt.Errorf("body.model %q is not the model of the url (%s)", it.Model, model)
	}
	it.Model, it.ModelFromJob = model, false
	if c := gjson.GetBytes(it.Body, "contents"); !c.IsArray() || !c.Get("0").Exists() {
		return errors.New("body.contents must be a non-empty array for Gemini (a GenerateContentRequest)")
	}
	return nil
}

func (GeminiCodec) Envelope() sluice.Envelope { return sluice.Envelope{} }

func (GeminiCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	dst = append(dst, `{"key":`...)
	dst = appendJSONString(dst, it.CustomID)
	dst = append(dst, `,"request":`...)
	dst = append(dst, bytes.TrimSpace(it.Body)...)
	return append(dst, "}\n"...), nil
}

// withModel returns body with "model" set to model.
func withModel(body []byte, model string) ([]byte, error) {
	return sjson.SetBytes(bytes.Clone(body), "model", model)
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// BodyLineCodec writes chunk files as {"custom_id":…,"body":…} lines, the
// input line shape of Mistral and Together (docs/providers/mistral.md,
// docs/providers/together.md): method and url are left out, the url is
// the batch's endpoint, sent on create.
type BodyLineCodec struct {
	name        string
	endpoints   map[string]bool
	list        string
	maxCustomID int
}

// NewBodyLineCodec returns a codec for provider name accepting the given
// endpoints and custom_ids of at most maxCustomID characters (0: any).
func NewBodyLineCodec(name string, endpoints []string, maxCustomID int) BodyLineCodec {
	m := make(map[string]bool, len(endpoints))
	for _, e := range endpoints {
		m[e] = true
	}
	return BodyLineCodec{name: name, endpoints: m, list: strings.Join(endpoints, ", "), maxCustomID: maxCustomID}
}

func (c BodyLineCodec) Validate(it *sluice.Item) error {
	if !c.endpoints[it.URL] {
		return fmt.Errorf("url %q is not a batch endpoint of %s (accepted: %s)", it.URL, c.name, c.list)
	}
	if c.maxCustomID > 0 && len([]rune(it.CustomID)) > c.maxCustomID {
		return fmt.Errorf("custom_id %q is longer than the %d characters %s allows", it.CustomID, c.maxCustomID, c.name)
	}
	return nil
}

func (BodyLineCodec) Envelope() sluice.Envelope { return sluice.Envelope{} }

func (BodyLineCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	body, err := itemBody(it)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `{"custom_id":`...)
	dst = appendJSONString(dst, it.CustomID)
	dst = append(dst, `,"body":`...)
	dst = append(dst, body...)
	return append(dst, "}\n"...), nil
}

// itemBody is an item's body as a line carries it: the job's model put in
// when it comes from the job, spaces trimmed.
func itemBody(it *sluice.Item) ([]byte, error) {
	body := it.Body
	if it.ModelFromJob {
		var err error
		if body, err = withModel(body, it.Model); err != nil {
			return nil, err
		}
	}
	return bytes.TrimSpace(body), nil
}

// FamilyOf is the API family whose batch endpoint url is: Anthropic's
// /v1/messages, Cloudflare's /ai/run[/...], Gemini's
// /{v1beta,v1}/models/{model}:generateContent, else OpenAI's.
func FamilyOf(url string) Family {
	switch {
	case url == "/v1/messages":
		return FamilyAnthropic
	case url == "/ai/run" || strings.HasPrefix(url, "/ai/run/"):
		return FamilyCloudflare
	case strings.HasSuffix(url, ":generateContent") && geminiURL.MatchString(url):
		return FamilyGemini
	}
	return FamilyOpenAI
}

// MixedCodec is the sluice.RoutedCodec of --provider local: OpenAI lines in
// the OpenAI format, /v1/messages lines in Anthropic's, /ai/run lines in
// Cloudflare's, :generateContent lines in Gemini's, each under its family's
// per-batch limits.
type MixedCodec struct {
	OpenAI OpenAICodec
}

func (m MixedCodec) For(url string) (sluice.Codec, sluice.Limits) {
	switch FamilyOf(url) {
	case FamilyAnthropic:
		return AnthropicCodec{}, Presets["anthropic"].Limits
	case FamilyCloudflare:
		return CloudflareCodec{}, Presets["cloudflare"].Limits
	case FamilyGemini:
		return GeminiCodec{}, Presets["gemini"].Limits
	}
	return m.OpenAI, sluice.Limits{}
}

func (m MixedCodec) Validate(it *sluice.Item) error {
	c, _ := m.For(it.URL)
	return c.Validate(it)
}

// Envelope is the OpenAI one; a chunk's own is that of For(its url).
func (m MixedCodec) Envelope() sluice.Envelope { return m.OpenAI.Envelope() }

func (m MixedCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	c, _ := m.For(it.URL)
	return c.AppendItem(dst, it)
}

// cloudflareDefaultMaxTokens is the output bound Workers AI's text
// generation models apply when a request sets no max_tokens.
const cloudflareDefaultMaxTokens = 256

// embeddingsBound is 0 (no output) for an embeddings or moderations url,
// else read.
func embeddingsBound(url string, read int64) int64 {
	if strings.HasSuffix(url, "/embeddings") || strings.HasSuffix(url, "/moderations") {
		return 0
	}
	return read
}

// MaxOutput implements sluice.OutputBounder: embeddings produce none.
func (OpenAICodec) MaxOutput(it *sluice.Item, read int64) int64 { return embeddingsBound(it.URL, read) }

// MaxOutput implements sluice.OutputBounder: embeddings produce none.
func (BodyLineCodec) MaxOutput(it *sluice.Item, read int64) int64 {
	return embeddingsBound(it.URL, read)
}

// MaxOutput implements sluice.OutputBounder: a text generation request
// (messages or prompt) that sets no max_tokens gets Workers AI's default;
// an embeddings request (text) produces none.
func (CloudflareCodec) MaxOutput(it *sluice.Item, read int64) int64 {
	if read >= 0 {
		return read
	}
	switch r := gjson.GetManyBytes(it.Body, "messages", "prompt", "text"); {
	case r[0].Exists() || r[1].Exists():
		return cloudflareDefaultMaxTokens
	case r[2].Exists():
		return 0
	}
	return read
}

// MaxOutput implements sluice.OutputBounder for the family of url.
func (m MixedCodec) MaxOutput(it *sluice.Item, read int64) int64 {
	if ob, ok := sluice.CodecFor(m, it.URL).(sluice.OutputBounder); ok {
		return ob.MaxOutput(it, read)
	}
	return read
}

// BodyMaxOutput is the bound of a native body's output: the largest of its
// max_tokens, max_completion_tokens, max_output_tokens and Gemini's
// generationConfig.maxOutputTokens, times its answers (n, best_of,
// generationConfig.candidateCount) when it asks for several; -1 when it
// sets no bound.
func BodyMaxOutput(body []byte) int64 {
	n, choices := int64(-1), int64(1)
	count := func(v gjson.Result, into *int64) {
		if v.Type == gjson.Number && v.Num >= 0 && v.Num <= 1e15 {
			*into = max(*into, int64(math.Ceil(v.Num)))
		}
	}
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			count(v, &n)
		case "n", "best_of":
			count(v, &choices)
		case "generationConfig", "generation_config":
			count(v.Get("maxOutputTokens"), &n)
			count(v.Get("max_output_tokens"), &n)
			count(v.Get("candidateCount"), &choices)
			count(v.Get("candidate_count"), &choices)
		}
		return true
	})
	if n > 0 && choices > 1 {
		if n > 1e15/choices {
			return 1e15
		}
		n *= choices
	}
	return n
}

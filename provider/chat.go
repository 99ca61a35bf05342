package provider

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/translate"
)

// ChatURL is the url of OpenAI chat completions lines, the lines that run
// on any provider (docs/translation.md).
const ChatURL = "/v1/chat/completions"

// EmbeddingsURL is the url of OpenAI embeddings lines, translated for the
// families whose chatFamily has embeds (Bedrock's Titan).
const EmbeddingsURL = "/v1/embeddings"

// chatFamily is how a family runs chat completions lines: the translator
// of their bodies and answers, and the url of the native line a
// translated line stands for (the url its codec validates and writes).
type chatFamily struct {
	target    *translate.Target
	nativeURL func(model string) string
	// check, when set, stands in for the family codec's Validate on a
	// translated line: it checks what the codec checks of the line itself
	// (the custom_id's form, say) and fills it.Model, leaving out the
	// checks of the body that the translator's output meets by
	// construction, which would read the body a second time. Nil: the
	// codec's Validate runs on the native line.
	check func(it *sluice.Item) error
	// serves, when set, tells whether a model name is one of the family's
	// own: a chat line whose model is not and that no --model-map entry
	// renames is told to ChatOptions.Unmapped even when no map is given
	// (a gpt-4o-mini line sent to Anthropic as written would fail there).
	serves func(model string) bool
	// embeds, when set, is the translator of /v1/embeddings lines to
	// model's native body (nil for a model it has none for); the native
	// url is nativeURL's. Nil: embeddings lines go to the codec as they
	// are.
	embeds func(model string) *translate.Embedder
}

// chatFamilies are the families whose chat completions lines are
// translated. A family wires in with one entry; families not listed
// (OpenAI and compatible) take chat lines as they are.
var chatFamilies = map[Family]chatFamily{
	FamilyAnthropic: {translate.Anthropic, func(string) string { return "/v1/messages" }, func(it *sluice.Item) error {
		// AnthropicCodec.Validate's other checks are of max_tokens and
		// messages, which the translation always writes.
		if !AnthropicCustomID.MatchString(it.CustomID) {
			return fmt.Errorf("custom_id %q does not match Anthropic's ^[a-zA-Z0-9_-]{1,64}$", it.CustomID)
		}
		return nil
	}, func(m string) bool { return strings.HasPrefix(m, "claude") }, nil},
	// CloudflareCodec.Validate takes the model from the url and checks the
	// body has no external_reference, which the translation never writes.
	FamilyCloudflare: {translate.Cloudflare, func(m string) string { return "/ai/run/" + m }, func(*sluice.Item) error { return nil },
		func(m string) bool { return strings.HasPrefix(m, "@cf/") || strings.HasPrefix(m, "@hf/") }, nil},
	// GeminiCodec.Validate runs on the native line: it takes the model
	// from the url and checks body.contents.
	FamilyGemini: {translate.Gemini, func(m string) string {
		if strings.HasPrefix(m, "tunedModels/") {
			return "/v1beta/" + m + ":generateContent"
		}
		return "/v1beta/models/" + strings.TrimPrefix(m, "models/") + ":generateContent"
	}, nil, func(m string) bool {
		m = strings.TrimPrefix(m, "models/")
		return strings.HasPrefix(m, "gemini") || strings.HasPrefix(m, "gemma") || strings.HasPrefix(m, "tunedModels/")
	}, nil},
	// Mistral and Together take chat lines at the same url; their codec
	// (BodyLineCodec) checks the url and the custom_id on the translated
	// line.
	// Their model names follow no one pattern: only a map's misses are told.
	FamilyMistral: {translate.Mistral, func(string) string { return ChatURL }, nil, nil, nil},
	// BedrockCodec.Validate runs on the native line: it takes the model
	// from the url and checks the body's shape.
	FamilyBedrock:  {translate.Bedrock, bedrockNativeURL, nil, bedrockServes, bedrockEmbeds},
	FamilyTogether: {translate.Together, func(string) string { return ChatURL }, nil, nil, nil},
}

// bufs are the buffers of translated bodies, from Validate to AppendItem
// of the same line (the splitter calls one right after the other).
var bufs = sync.Pool{New: func() any { return new([]byte) }}

// Translates reports whether the family translates chat completions lines.
func (f Family) Translates() bool { _, ok := chatFamilies[f]; return ok }

// ChatOptions are the job's choices for chat completions lines.
type ChatOptions struct {
	// ModelMap maps a line's model to the model sent (--model-map); models
	// not in it are sent as they are.
	ModelMap map[string]string
	// DefaultMaxTokens is the output token limit of translated lines that
	// set none (--default-max-tokens); 0: none.
	DefaultMaxTokens int64
	// Warn is told of each parameter left out of a translated line. It is
	// called from the splitter's workers at once: it must be safe for
	// concurrent use. Nil: warnings are dropped.
	Warn func(line int64, w translate.Warning)
	// Unmapped is told of each chat completions line whose model ModelMap
	// (when not empty) does not rename: it is sent as written. Called
	// like Warn, at once from the splitter's workers. Nil: not told.
	Unmapped func(line int64, model string)
}

// ParseModelMap reads --model-map: old=new pairs separated by commas.
func ParseModelMap(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		old, new, ok := strings.Cut(pair, "=")
		old, new = strings.TrimSpace(old), strings.TrimSpace(new)
		if !ok || old == "" || new == "" {
			return nil, fmt.Errorf("--model-map: %q is not old=new", pair)
		}
		if prev, dup := m[old]; dup && prev != new {
			return nil, fmt.Errorf("--model-map: %s is mapped twice", old)
		}
		m[old] = new
	}
	return m, nil
}

// chatCodec wraps a family's codec: chat completions lines have their
// model mapped and, for families in chatFamilies, their body translated
// to the native body, which the family's codec then validates and writes
// like a native line of the native url. The line keeps its url, so its
// chunk's url says the results need translating back (TranslateResult).
// Every other line goes to the family's codec untouched.
type chatCodec struct {
	inner sluice.Codec
	fam   *chatFamily // nil: the family takes chat lines as they are
	opts  ChatOptions
}

// PlanCodec is the preset's codec with the job's chat options, for
// planning.
func (p Preset) PlanCodec(o ChatOptions) sluice.Codec {
	c := chatCodec{inner: p.nativeCodec(), opts: o}
	if f, ok := chatFamilies[p.Family]; ok {
		c.fam = &f
	} else if len(o.ModelMap) == 0 {
		return c.inner
	}
	if _, ok := c.inner.(sluice.RoutedCodec); ok {
		return routedChatCodec{c}
	}
	return c
}

// routedChatCodec keeps a RoutedCodec (--provider local) routed when a
// model map wraps it: each url's codec is wrapped in turn.
type routedChatCodec struct{ chatCodec }

func (c routedChatCodec) For(url string) (sluice.Codec, sluice.Limits) {
	inner, lim := c.inner.(sluice.RoutedCodec).For(url)
	return chatCodec{inner: inner, fam: c.fam, opts: c.opts}, lim
}

func (c chatCodec) Envelope() sluice.Envelope { return c.inner.Envelope() }

// translated reports whether lines of url are translated: chat lines for
// every family of chatFamilies, embeddings lines for those with embeds.
func (c chatCodec) translated(url string) bool {
	return c.fam != nil && (url == ChatURL || url == EmbeddingsURL && c.fam.embeds != nil)
}

// translate is the native body of line it, translated (the line's model
// already mapped).
func (c chatCodec) translate(dst []byte, it *sluice.Item, warn func(translate.Warning)) ([]byte, error) {
	if it.URL == ChatURL {
		return c.fam.target.Translate(dst, it.Body, translate.Options{
			Model: it.Model, Warn: warn, Valid: true, DefaultMaxTokens: c.opts.DefaultMaxTokens})
	}
	e := c.fam.embeds(it.Model)
	if e == nil {
		return dst, fmt.Errorf("model %q has no embeddings body sluice writes: map the line's model to an embeddings model (--model-map)", it.Model)
	}
	return e.Request(dst, it.Body, it.Model, warn)
}

func (c chatCodec) Validate(it *sluice.Item) error {
	if it.URL != ChatURL && !c.translated(it.URL) {
		return c.inner.Validate(it)
	}
	mapped := false
	if m, ok := c.opts.ModelMap[it.Model]; ok {
		it.Model, mapped = m, true
	} else if c.opts.Unmapped != nil && (len(c.opts.ModelMap) > 0 ||
		c.fam != nil && c.fam.serves != nil && it.Model != "" && !c.fam.serves(it.Model)) {
		c.opts.Unmapped(it.Line, it.Model)
	}
	if c.fam == nil {
		if err := c.inner.Validate(it); err != nil {
			return err
		}
		if mapped {
			it.ModelFromJob = true // the codec then writes it.Model into the body
		}
		return nil
	}
	if it.Model == "" {
		return fmt.Errorf("missing body.model (and no --model given)")
	}
	var warn func(translate.Warning)
	if c.opts.Warn != nil {
		line := it.Line
		warn = func(w translate.Warning) { c.opts.Warn(line, w) }
	}
	// The splitter has checked the line is valid JSON.
	buf := bufs.Get().(*[]byte)
	body, err := c.translate((*buf)[:0], it, warn)
	if err != nil {
		bufs.Put(buf)
		return fmt.Errorf("cannot translate for %s: %w", c.fam.target.Name, err)
	}
	*buf = body
	native := *it
	native.URL, native.Body, native.ModelFromJob = c.fam.nativeURL(it.Model), body, false
	if c.fam.check != nil {
		err = c.fam.check(&native)
	} else {
		err = c.inner.Validate(&native)
	}
	if err != nil {
		bufs.Put(buf)
		return fmt.Errorf("translated for %s: %w", c.fam.target.Name, err)
	}
	it.Body, it.Model, it.ModelFromJob = body, native.Model, false
	return nil
}

func (c chatCodec) AppendItem(dst []byte, it *sluice.Item) ([]byte, error) {
	if !c.translated(it.URL) {
		return c.inner.AppendItem(dst, it)
	}
	native := *it
	native.URL = c.fam.nativeURL(it.Model)
	dst, err := c.inner.AppendItem(dst, &native)
	// The translated body is copied into dst: its buffer goes back.
	b := it.Body[:0]
	it.Body = nil
	bufs.Put(&b)
	return dst, err
}

// TranslateResult turns the answer to a translated chat completions line
// back into OpenAI's shape: a success into a chat.completion, an error
// body into {"error":{...}}. An answer that cannot be translated fails
// its request for good with code untranslatable_response (the provider
// answered; asking again would get the same). Results of other chunks
// pass untouched.
func (c chatCodec) TranslateResult(ref sluice.BatchRef, r *sluice.Result) {
	if !c.translated(ref.URL) || r.Line.Response == nil {
		return
	}
	resp := r.Line.Response
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		out := *resp
		out.Body = c.fam.target.Error(nil, resp.Body, resp.StatusCode)
		r.Line.Response = &out
		return
	}
	meta := translate.Meta{ID: "chatcmpl-" + r.CustomID, Model: ref.Model, Created: time.Now().Unix()}
	result, what := c.fam.target.Result, "a chat.completion"
	if ref.URL == EmbeddingsURL {
		if e := c.fam.embeds(ref.Model); e != nil {
			result, what = e.Result, "an embeddings response"
		}
	}
	body, err := result(nil, resp.Body, meta)
	if err != nil {
		r.Kind = sluice.ResultFailed
		r.Line.Response = nil
		r.Line.Error = &sluice.LineError{Code: sluice.CodeUntranslatableResponse,
			Message: fmt.Sprintf("the %s answer could not be translated to %s: %v", c.fam.target.Name, what, err)}
		return
	}
	out := *resp
	out.Body = body
	r.Line.Response = &out
}

// MaxOutput implements sluice.OutputBounder: a translated line's bound is
// the one of its native body (which carries --default-max-tokens), as the
// family's codec reads it; any other line's is the inner codec's.
func (c chatCodec) MaxOutput(it *sluice.Item, read int64) int64 {
	inner := it
	if c.translated(it.URL) {
		native := *it
		native.URL = c.fam.nativeURL(it.Model)
		inner, read = &native, BodyMaxOutput(it.Body)
	}
	if ob, ok := c.inner.(sluice.OutputBounder); ok {
		return ob.MaxOutput(inner, read)
	}
	return read
}

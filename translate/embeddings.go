package translate

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Embedder translates OpenAI embeddings requests (/v1/embeddings lines)
// into a provider's native embeddings body, and its answer back into an
// OpenAI embeddings response ({"object":"list","data":[...],"usage"}).
// Like Target, it is pure: bytes in, bytes out.
type Embedder struct {
	Name    string
	request func(dst []byte, body gjson.Result, model string, warn func(Warning)) ([]byte, error)
	result  func(dst []byte, body gjson.Result, m Meta) ([]byte, error)
}

// Request appends to dst the native body for an OpenAI embeddings body
// (known to be valid JSON), for model; warn, which may be nil, is told of
// each parameter left out.
func (e *Embedder) Request(dst, body []byte, model string, warn func(Warning)) ([]byte, error) {
	r := gjson.ParseBytes(body)
	if !r.IsObject() {
		return dst, errf("", "body must be a JSON object")
	}
	var warns []Warning
	start := len(dst)
	out, err := e.request(dst, r, model, func(w Warning) { warns = append(warns, w) })
	if err != nil {
		return dst[:start], err
	}
	if warn != nil {
		for _, w := range warns {
			warn(w)
		}
	}
	return out, nil
}

// Result appends to dst the OpenAI embeddings response for a native
// successful answer body; an answer that is not the native shape is an
// error.
func (e *Embedder) Result(dst, body []byte, m Meta) ([]byte, error) {
	if !gjson.ValidBytes(body) {
		return dst, errf("", "the answer is not valid JSON")
	}
	start := len(dst)
	out, err := e.result(dst, gjson.ParseBytes(body), m)
	if err != nil {
		return dst[:start], err
	}
	return out, nil
}

// TitanEmbeddings is Amazon Titan Text Embeddings on Bedrock
// (amazon.titan-embed-text-v1, amazon.titan-embed-text-v2:0): the body
// {"inputText", "dimensions"} (dimensions on V2 only: 256, 512 or 1024),
// the answer {"embedding", "inputTextTokenCount"}. Titan embeds one text
// per request: an input of several texts, or of token ids, is refused;
// encoding_format base64 too (Titan answers floats).
var TitanEmbeddings = &Embedder{Name: "bedrock titan embeddings", request: titanRequest, result: titanResult}

func titanRequest(dst []byte, b gjson.Result, model string, warn func(Warning)) ([]byte, error) {
	v2 := strings.Contains(model, "titan-embed-text-v2")
	var text gjson.Result
	var err error
	b.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
		case "input":
			text, err = titanInput(v)
		case "encoding_format":
			if present(v) && v.String() != "float" {
				err = errf("encoding_format", "Titan answers floats only, got %s", v.Raw)
			}
		case "dimensions":
			switch n := v.Int(); {
			case !present(v):
			case !v2:
				err = errf("dimensions", "%s has fixed dimensions (Titan Text Embeddings V2 takes 256, 512 or 1024)", model)
			case v.Type != gjson.Number || n != 256 && n != 512 && n != 1024:
				err = errf("dimensions", "Titan Text Embeddings V2 takes 256, 512 or 1024, got %s", v.Raw)
			}
		case "user":
			warn(Warning{Param: "user", Reason: "an end-user id for abuse monitoring; Bedrock has no field for it"})
		default:
			err = errf(k.Str, "is not translated for Titan embeddings")
		}
		return err == nil
	})
	if err != nil {
		return dst, err
	}
	if !text.Exists() {
		return dst, errf("input", "is required")
	}
	dst = append(dst, `{"inputText":`...)
	dst = appendStr(dst, text)
	if d := b.Get("dimensions"); present(d) {
		dst = append(dst, `,"dimensions":`...)
		dst = append(dst, d.Raw...)
	}
	return append(dst, '}'), nil
}

// titanInput is the one text of an embeddings input: a string, or an
// array of one string.
func titanInput(v gjson.Result) (gjson.Result, error) {
	if v.Type == gjson.String {
		return v, nil
	}
	if !v.IsArray() {
		return v, errf("input", "must be a string")
	}
	arr := v.Array()
	switch {
	case len(arr) == 1 && arr[0].Type == gjson.String:
		return arr[0], nil
	case len(arr) > 1 && arr[0].Type == gjson.String:
		return v, errf("input", "Titan embeds one text per request: write one line per text (%d here)", len(arr))
	}
	return v, errf("input", "only text is translated for Titan (not token ids)")
}

// titanResult writes {"object":"list","data":[{"object":"embedding",
// "index":0,"embedding"}],"model","usage":{"prompt_tokens","total_tokens"}}
// from Titan's {"embedding","inputTextTokenCount"}.
func titanResult(dst []byte, r gjson.Result, m Meta) ([]byte, error) {
	emb := r.Get("embedding")
	if !emb.IsArray() {
		return dst, errf("", "a Titan answer needs an embedding array")
	}
	n := r.Get("inputTextTokenCount").Int()
	dst = append(dst, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":`...)
	dst = append(dst, compact(emb.Raw)...)
	dst = append(dst, `}],"model":`...)
	dst = appendString(dst, m.Model)
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = appendInt(dst, n)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, n)
	return append(dst, `}}`...), nil
}

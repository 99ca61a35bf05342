package sluice

import "encoding/json"

// InputLine is one line of the input file: the OpenAI batch input format.
type InputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// OutputLine is one line of the merged output file: the OpenAI batch output
// shape, whatever the provider.
type OutputLine struct {
	CustomID string     `json:"custom_id"`
	Response *Response  `json:"response"`
	Error    *LineError `json:"error"`
}

// Response is the endpoint's answer to one request.
type Response struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id,omitempty"`
	Body       json.RawMessage `json:"body"`

	// compact is Body once MarkCompact vouched for it.
	compact json.RawMessage
}

// MarkCompact records that the caller has checked that Body is exactly
// what json.Marshal writes for it (valid JSON, no whitespace between
// tokens, nothing encoding/json escapes), so that the output line encoder
// (internal/wire.AppendOutputLine) copies it without checking it again: a
// decoder that has just validated the line knows it for free. The mark holds for these
// bytes only: once Body is set to another slice (or resliced), Body is
// checked again. Changing Body's bytes in place after marking is a bug.
func (r *Response) MarkCompact() { r.compact = r.Body }

// MarkedCompact reports whether MarkCompact vouched for the current Body.
func (r *Response) MarkedCompact() bool {
	return len(r.Body) > 0 && len(r.compact) == len(r.Body) && &r.compact[0] == &r.Body[0]
}

// LineError is a request-level failure that is not an HTTP answer of the
// endpoint (expired, cancelled, missing from the provider's files, ...).
type LineError struct {
	Code     ErrorCode `json:"code"` // see errorcode.go
	Message  string    `json:"message"`
	Attempts int       `json:"attempts,omitempty"`
	// Line is the input line number, for a line rejected as invalid
	// (CodeInvalidRequest; --skip-invalid).
	Line int64 `json:"line,omitempty"`
}

// Item is one validated input line as the splitter hands it to a Codec.
// Body and Raw alias the splitter's buffers: a Codec must not keep them.
type Item struct {
	Line     int64  // 1-based line number in the input file
	Ordinal  int64  // 0-based position among the valid requests
	CustomID string // the line's custom_id
	URL      string // the line's url
	Model    string // body.model, or the model named by the url, or the job's model
	Body     []byte // the raw JSON object of "body"
	Raw      []byte // the whole raw line, without its newline
	// ModelFromJob is true when the body has no model and Model came from the
	// job's --model: a codec that needs the model in the body must add it.
	ModelFromJob bool
}

// Envelope is the fixed framing of a chunk file on a provider's wire:
// Header, then items separated by Sep, then Footer. OpenAI-style JSONL has
// an empty header and footer and items that end in a newline.
type Envelope struct {
	Header, Sep, Footer []byte
}

// Size returns the wire size of a chunk of n items whose items total
// itemBytes.
func (e Envelope) Size(n int, itemBytes int64) int64 {
	s := int64(len(e.Header)+len(e.Footer)) + itemBytes
	if n > 1 {
		s += int64(n-1) * int64(len(e.Sep))
	}
	return s
}

// Codec is a provider's wire format for chunk files. The splitter writes
// chunk files with it, so a chunk file is byte for byte the body the
// provider receives (the JSONL file for OpenAI, the {"requests":[...]}
// body for Anthropic and Cloudflare).
type Codec interface {
	// Validate checks what the provider requires of one line beyond the
	// common contract (an endpoint it accepts, the custom_id form, required
	// body fields). It may fill it.Model from the url. The error's text is
	// the reason shown to the user.
	Validate(it *Item) error
	// Envelope is the framing of a chunk file.
	Envelope() Envelope
	// AppendItem appends the wire form of one item to dst.
	AppendItem(dst []byte, it *Item) ([]byte, error)
}

// RoutedCodec is the Codec of a provider that speaks the APIs of several
// families (--provider local, whose emulator serves them all): each url is
// written in the wire format, envelope and per-batch limits of the family
// that serves it. Lines of one chunk share a url, so a chunk has one format.
type RoutedCodec interface {
	Codec
	// For returns the codec and the per-batch limits (zero: none) of url.
	For(url string) (Codec, Limits)
}

// CodecFor is the codec of url's chunks: c itself, or what a RoutedCodec
// routes url to.
func CodecFor(c Codec, url string) Codec {
	if r, ok := c.(RoutedCodec); ok {
		cc, _ := r.For(url)
		return cc
	}
	return c
}

// ChunkFormat is the codec and the per-batch limits of url's chunks under
// codec c and limits l: c and l, or the codec a RoutedCodec routes url to
// with l tightened by that family's limits (Limits.Tighter).
func ChunkFormat(c Codec, url string, l Limits) (Codec, Limits) {
	if r, ok := c.(RoutedCodec); ok {
		cc, fam := r.For(url)
		return cc, l.Tighter(fam)
	}
	return c, l
}

// OutputBounder is implemented by codecs that know the bound of a
// request's output in their family's terms better than the body's own
// max output keys, which the splitter reads (docs/money.md): a translated
// line's native body (with --default-max-tokens in it), a family's default
// when the body sets none (Workers AI's 256), embeddings (no output).
type OutputBounder interface {
	// MaxOutput is the most output tokens the provider can bill for it as
	// Validate left it (its body translated where it was), given read, the
	// largest max output count the splitter found in the line's body (-1:
	// none). It returns -1 when it knows no bound.
	MaxOutput(it *Item, read int64) int64
}

// ResultTranslator is implemented by codecs that translate lines into the
// provider's native form (chat completions lines sent to Anthropic, say):
// the dispatcher passes every result it decodes through TranslateResult,
// which puts the answer back into the shape of the line's own API
// (docs/translation.md). ref names the chunk the result came from.
type ResultTranslator interface {
	TranslateResult(ref BatchRef, r *Result)
}

package splitter

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/sluice-batch/sluice"
)

// rec is the outcome of one non-blank line, as a worker leaves it for the
// writer.
type rec struct {
	line     int64
	reason   string // why the line is bad; "" for a valid line
	customID string // "" when unknown
	url      string
	model    string
	hash     uint64 // xxh3 of customID
	tokens   int64
	maxOut   int64    // max output tokens; -1 when the body sets none
	key      [16]byte // ledger key (docs/money.md); zero without Config.KeyScope
	old      [16]byte // legacy key (bodykey.go) when it differs from key and may be found; else zero
	item     int      // the item's bytes are block.items[item:item+itemLen]
	itemLen  int
	raw      int // the raw line is block.data[raw:raw+rawLen]
	rawLen   int
}

// parser validates lines and encodes their wire items. Each worker owns
// one; nothing in it is shared.
type parser struct {
	codec    sluice.Codec
	env      sluice.Envelope
	limits   sluice.Limits
	model    string // the job's model
	s        scanner
	interned map[string]string
	keys     *bodyHasher // nil without Config.KeyScope
	legacy   bool        // compute legacy keys too (Config.legacy)
	oldOnly  bool        // key as before canonical keys (sluice.PlanLegacyKeys)
}

func newParser(cfg *Config) *parser {
	p := &parser{codec: cfg.Codec, env: cfg.Codec.Envelope(), limits: cfg.Limits, model: cfg.Model,
		interned: make(map[string]string)}
	if cfg.KeyScope != "" {
		p.keys = newBodyHasher(cfg.KeyScope)
		p.s.cn, p.legacy, p.oldOnly = new(canonRec), cfg.legacy, sluice.PlanLegacyKeys()
	}
	return p
}

var bom = []byte("\ufeff")

// block fills b.recs and b.items from b.data.
func (p *parser) block(b *block) {
	b.recs, b.items = b.recs[:0], b.items[:0]
	if b.long {
		b.recs = append(b.recs, rec{line: b.first, rawLen: len(b.data),
			reason: fmt.Sprintf("line is longer than %d bytes", maxLineBytes)})
		return
	}
	data, pos, n := b.data, 0, b.first
	for len(data) > 0 {
		l := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		at := pos
		pos += len(l) + 1
		if n == 1 && bytes.HasPrefix(l, bom) {
			l, at = l[len(bom):], at+len(bom)
		}
		p.line(b, n, l, at)
		n++
	}
}

// line validates one line and, if it is good, appends its wire item.
func (p *parser) line(b *block, n int64, l []byte, at int) {
	if len(l) > 0 && l[len(l)-1] == '\r' {
		l = l[:len(l)-1] // CRLF line ends
	}
	if len(l) > maxLineBytes {
		b.recs = append(b.recs, rec{line: n, raw: at, rawLen: min(len(l), rawPrefix),
			reason: fmt.Sprintf("line is longer than %d bytes", maxLineBytes)})
		return
	}
	s := &p.s
	s.reset(l)
	blank, ok := s.line()
	if blank {
		return
	}
	r := rec{line: n, raw: at, rawLen: len(l)}
	f := &s.fields
	// A custom_id read before the line turned out bad still names it.
	if id := f[keyCustomID]; id.typ == '"' && id.end > id.start+1 {
		r.customID = decodeString(l, id)
	}
	if !ok {
		r.reason = s.err
		b.recs = append(b.recs, r)
		return
	}
	// Ordinal is not known yet (it counts the valid lines before this one,
	// which other workers may be checking): codecs get 0.
	it := sluice.Item{Line: n, CustomID: r.customID, Body: l[f[keyBody].start:f[keyBody].end],
		Raw: bytes.Trim(l, " \t\r")}
	r.reason = p.check(l, &it)
	if r.reason == "" {
		r.reason = p.encode(b, &r, &it)
	}
	b.recs = append(b.recs, r)
}

// check applies the line contract to the fields s captured and fills it.
func (p *parser) check(l []byte, it *sluice.Item) string {
	f := &p.s.fields
	switch id := f[keyCustomID]; {
	case id.typ == 0:
		return "missing custom_id"
	case id.typ != '"':
		return "custom_id must be a string, got " + typeName(id.typ)
	case it.CustomID == "":
		return "custom_id is empty"
	}
	switch m := f[keyMethod]; {
	case m.typ == 0:
		return "missing method"
	case m.typ != '"' || decodeString(l, m) != "POST":
		return `method must be "POST", got ` + cut(l[m.start:m.end])
	}
	switch u := f[keyURL]; {
	case u.typ == 0:
		return "missing url"
	case u.typ != '"':
		return "url must be a string, got " + typeName(u.typ)
	default:
		it.URL = p.intern(l, u)
	}
	switch bd := f[keyBody]; {
	case bd.typ == 0:
		return "missing body"
	case bd.typ != '{':
		return "body must be a JSON object, got " + typeName(bd.typ)
	}
	switch m := f[keyModel]; {
	case m.typ == 0:
		it.Model, it.ModelFromJob = p.model, p.model != ""
	case m.typ != '"':
		return "body.model must be a string, got " + typeName(m.typ)
	default:
		if it.Model = p.intern(l, m); it.Model == "" {
			return "body.model is empty"
		}
	}
	if err := p.codec.Validate(it); err != nil {
		return err.Error()
	}
	if it.Model == "" {
		return "missing body.model (and no --model given)"
	}
	return ""
}

// encode appends the wire item of a checked line and checks it against
// the per-batch limits on its own.
func (p *parser) encode(b *block, r *rec, it *sluice.Item) string {
	s := &p.s
	r.url, r.model = it.URL, it.Model
	r.tokens = tokens(it.Model, &s.text, s.roles)
	r.maxOut = s.outputBound()
	if ob, ok := p.codec.(sluice.OutputBounder); ok {
		r.maxOut = ob.MaxOutput(it, r.maxOut)
	}
	switch {
	case p.keys == nil:
	case p.oldOnly:
		r.key = p.keys.legacyKey(it.Model, it.URL, it.Body, s.fields[keyBody].spaced)
	default:
		r.key, r.old = p.keys.key(it.Model, it.URL, s.b, s.fields[keyBody], s.cn, p.legacy)
		if r.old == r.key {
			r.old = [16]byte{}
		}
	}
	start := len(b.items)
	items, err := p.codec.AppendItem(b.items, it)
	if err != nil {
		b.items = b.items[:start]
		return "cannot encode the request for the provider: " + err.Error()
	}
	b.items = items
	r.item, r.itemLen = start, len(items)-start
	env, max := p.env, p.limits.MaxBatchBytes
	if rc, ok := p.codec.(sluice.RoutedCodec); ok {
		c, fam := rc.For(it.URL)
		env, max = c.Envelope(), p.limits.Tighter(fam).MaxBatchBytes
	}
	if max > 0 {
		if size := env.Size(1, int64(r.itemLen)); size > max {
			b.items = b.items[:start]
			return fmt.Sprintf("request is %d bytes on the provider's wire, over the batch limit of %d bytes", size, max)
		}
	}
	if max := p.limits.MaxBatchTokens; max > 0 && r.tokens > max {
		b.items = b.items[:start]
		return fmt.Sprintf("request has about %d input tokens, over the batch limit of %d tokens", r.tokens, max)
	}
	r.hash = xxh3.HashString(r.customID)
	return ""
}

// intern returns the string value of f, shared between lines with the
// same value (urls and models repeat).
func (p *parser) intern(l []byte, f field) string {
	if f.esc {
		return decodeString(l, f)
	}
	v := l[f.start+1 : f.end-1]
	if s, ok := p.interned[string(v)]; ok {
		return s
	}
	s := string(v)
	if len(p.interned) < 4096 {
		p.interned[s] = s
	}
	return s
}

// decodeString returns the value of the JSON string f.
func decodeString(l []byte, f field) string {
	if !f.esc {
		return string(l[f.start+1 : f.end-1])
	}
	var v string
	if err := json.Unmarshal(l[f.start:f.end], &v); err != nil {
		return string(l[f.start+1 : f.end-1])
	}
	return v
}

// cut shortens a raw value for an error message.
func cut(v []byte) string {
	if len(v) > 40 {
		return string(v[:37]) + "..."
	}
	return string(v)
}

// ValidateLine checks one input line (without its newline) as Split does,
// except for the uniqueness of custom_id, and returns its wire item. blank
// reports a line Split skips; reason is empty for a good line.
func ValidateLine(cfg Config, line []byte) (item []byte, blank bool, reason string) {
	p := newParser(&cfg)
	b := &block{data: line, first: 1}
	p.block(b)
	if len(b.recs) == 0 {
		return nil, true, ""
	}
	r := b.recs[0]
	if r.reason != "" {
		return nil, false, r.reason
	}
	return b.items[r.item : r.item+r.itemLen], false, ""
}

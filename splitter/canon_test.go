package splitter

import (
	"bytes"
	"crypto/sha256"
	"regexp"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/provider"
)

// canonOf scans a line whose body is body and returns the body's
// canonical form (ok false: none) as the ledger key hashes it.
func canonOf(t testing.TB, body string) (string, bool) {
	t.Helper()
	s := scanner{cn: new(canonRec)}
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":` + body + `}`
	s.reset([]byte(line))
	if _, ok := s.line(); !ok {
		t.Fatalf("%s: %s", body, s.err)
	}
	f := s.fields[keyBody]
	if !s.cn.dirty && !f.spaced {
		return line[f.start:f.end], true
	}
	var out bytes.Buffer
	ok := s.cn.emit(&out, nil, []byte(line), f.spaced)
	return out.String(), ok
}

func TestCanonicalForm(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"compact canonical", `{"a":1,"b":[true,false,null],"c":"x"}`, `{"a":1,"b":[true,false,null],"c":"x"}`},
		{"whitespace", "{ \"a\" : 1 ,\t\"b\":\n[ 1 , 2 ] }", `{"a":1,"b":[1,2]}`},
		{"member order", `{"model":"m","messages":[],"max_tokens":5}`, `{"max_tokens":5,"messages":[],"model":"m"}`},
		{"nested", `{"z":{"y":{"b":1,"a":2},"x":[{"role":"u","content":"c"}]},"a":0}`,
			`{"a":0,"z":{"x":[{"content":"c","role":"u"}],"y":{"a":2,"b":1}}}`},
		{"escapes resolved", `{"a":"\u003c\u003e\u0026 \/ caf\u00e9"}`, `{"a":"<>& / café"}`},
		{"ensure_ascii", `{"t": "\u4eba\u5de5 \ud83d\ude00 caf\u00e9"}`, `{"t":"人工 😀 café"}`},
		{"surrogate pair upper case", `{"t":"\uD83D\uDE00"}`, `{"t":"😀"}`},
		{"u2028 raw stays", "{\"t\":\"a\u2028b\"}", "{\"t\":\"a\u2028b\"}"},
		{"u2028 escaped", `{"t":"a\u2028b"}`, "{\"t\":\"a\u2028b\"}"},
		{"controls", `{"t":"\u000a\u0008\u0009\u000c\u000d\u001F\u0000\"\\"}`, `{"t":"\n\b\t\f\r\u001f\u0000\"\\"}`},
		{"canonical controls kept", `{"t":"\n\t\u001f"}`, `{"t":"\n\t\u001f"}`},
		{"escaped names", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"utf-16 order", "{\"\ue000\":1,\"\U0001F600\":2,\"z\":3}", "{\"z\":3,\"\U0001F600\":2,\"\ue000\":1}"},
		{"duplicates keep their order", `{"b":1,"a":1,"a":2}`, `{"a":1,"a":2,"b":1}`},
		{"properties keep their order", `{"schema":{"type":"object","properties":{"b":{"type":"string","description":"x"},"a":{}}}}`,
			`{"schema":{"properties":{"b":{"description":"x","type":"string"},"a":{}},"type":"object"}}`},
		{"numbers", `{"a":1.0,"b":1e2,"c":0.50,"d":-0,"e":1E-7,"f":0.1,"g":-0.0,"h":2.5e-3,"i":1e21,"j":123.456}`,
			`{"a":1,"b":100,"c":0.5,"d":0,"e":1e-7,"f":0.1,"g":0,"h":0.0025,"i":1000000000000000000000,"j":123.456}`},
		{"big integers keep their digits", `{"seed":12345678901234567891,"n":-9007199254740993,"m":100000000000000000000000000001}`,
			`{"m":100000000000000000000000000001,"n":-9007199254740993,"seed":12345678901234567891}`},
		{"integral double beyond 2^53: exact digits", `{"x":1.2345678901234567e19}`, `{"x":12345678901234567168}`},
		{"many digits in a fraction", `{"x":0.30000000000000004441}`, `{"x":0.30000000000000004}`},
		{"empty", `{}`, `{}`},
		{"empty nested", `{"b":{},"a":[]}`, `{"a":[],"b":{}}`},
	} {
		got, ok := canonOf(t, c.in)
		if !ok || got != c.want {
			t.Errorf("%s: %s\n got %s (ok %v)\nwant %s", c.name, c.in, got, ok, c.want)
		}
	}
}

func TestCanonicalFormNone(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"t":"\ud800"}`, `{"t":"\udc00\ud800"}`, `{"t":"\ud83dx"}`, `{"\ud800":1,"a":0}`, `{"x":1e400}`, `{"b":0,"x":-1E+999}`} {
		if got, ok := canonOf(t, in); ok {
			t.Errorf("%s: canonical form %s, want none", in, got)
		}
	}
}

// TestCanonicalMatchesJCS: wherever RFC 8785 has an answer and the two
// departures (integers kept to their digits, "properties" in order) do not
// apply, the canonical form is the one gowebpki/jcs makes: on the
// generated corpus and on bodies written every way.
func TestCanonicalMatchesJCS(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if _, err := corpus.New(corpus.Options{Seed: 3, Size: 1 << 20}).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	bodies := []string{
		`{ "b" : [ 1 , { "d" : 1.50 , "c" : "\u00e9\/" } ], "a" : -0.0 }`,
		`{"t":"\ud83d\ude00\u2028\u0000","\u00e9":1,"e":2,"\uffff":3,"\ud83d\ude00":4}`,
		`{"n":[0.000001,1e-7,123456789012345680000,1.5e300,-2.5E-300,9007199254740992,5e-324]}`,
	}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		i := strings.Index(l, `"body":`)
		bodies = append(bodies, l[i+len(`"body":`):len(l)-1])
	}
	for _, b := range bodies {
		checkJCS(t, b)
	}
}

var longDigits = regexp.MustCompile(`[0-9]{16}`)

func checkJCS(t *testing.T, body string) {
	t.Helper()
	want, err := jcs.Transform([]byte(body))
	got, ok := canonOf(t, body)
	switch {
	case err != nil || strings.Contains(got, `"properties":{`) || longDigits.MatchString(got):
		return // no JCS form, or a departure
	case !ok:
		t.Fatalf("%s: no canonical form; jcs has %s", body, want)
	case got != string(want):
		t.Fatalf("%s:\n got %s\njcs  %s", body, got, want)
	}
	if again, _ := canonOf(t, got); again != got {
		t.Fatalf("not idempotent: %s -> %s", got, again)
	}
}

func FuzzCanonicalMatchesJCS(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,"\u00e9"]}`, `{"x":{"z":"\n","y":1e5}}`, `{ "a" : 0.5 }`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s := scanner{cn: new(canonRec)}
		s.reset([]byte(`{"body":` + body + `}`))
		if _, ok := s.line(); !ok || s.fields[keyBody].typ != '{' {
			return
		}
		checkJCS(t, body)
	})
}

// keyOf is the ledger key (and legacy key, when legacy) of a request with
// body, as a worker computes it.
func keyOf(t testing.TB, body string, legacy bool) rec {
	t.Helper()
	p := newParser(&Config{Codec: provider.Presets["openai"].Codec(), KeyScope: "openai\x00http://x/v1", legacy: legacy})
	b := &block{data: []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":` + body + `}`), first: 1}
	p.block(b)
	return b.recs[0]
}

// legacyKey is the key as sluice made it before canonical keys.
func legacyKeyOf(body string) (k [16]byte) {
	var compact bytes.Buffer
	compact.WriteString("openai\x00http://x/v1\x00gpt-4o-mini\x00/v1/chat/completions\x00")
	inStr, esc := false, false
	for _, c := range []byte(body) {
		switch {
		case inStr:
			esc, inStr = !esc && c == '\\', inStr && (esc || c != '"')
		case c == '"':
			inStr = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		compact.WriteByte(c)
	}
	sum := sha256.Sum256(compact.Bytes())
	copy(k[:], sum[:])
	return k
}

func TestBodyKeySpellings(t *testing.T) {
	t.Parallel()
	base := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"caf\u00e9 <b> \ud83d\ude00"}],"temperature":1,"seed":12345678901234567891}`
	k := keyOf(t, base, false)
	if k.reason != "" {
		t.Fatal(k.reason)
	}
	same := []string{
		// Python's json.dumps with its defaults (ensure_ascii, ", " and ": ").
		`{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "caf\u00e9 <b> \ud83d\ude00"}], "temperature": 1, "seed": 12345678901234567891}`,
		// Go's encoding/json (HTML escapes), members sorted.
		`{"messages":[{"content":"café \u003cb\u003e 😀","role":"user"}],"model":"gpt-4o-mini","seed":12345678901234567891,"temperature":1}`,
		// Canonical already (hashed as it is, not written out again).
		`{"messages":[{"content":"café <b> 😀","role":"user"}],"model":"gpt-4o-mini","seed":12345678901234567891,"temperature":1}`,
		// Raw UTF-8, another order, 1.0 for 1.
		`{"seed":12345678901234567891,"temperature":1.0,"messages":[{"content":"café <b> 😀","role":"user"}],"model":"gpt-4o-mini"}`,
		"{\t  \"model\": \"gpt-4o-mini\",\t  \"messages\": [\t    {\"role\": \"user\", \"content\": \"caf\\u00E9 \\u003Cb\\u003E \\uD83D\\uDE00\"}\t  ],\t  \"temperature\": 10e-1,\t  \"seed\": 12345678901234567891\t}",
	}
	for _, s := range same {
		if got := keyOf(t, s, false); got.key != k.key {
			t.Errorf("another key for the same request:\n%s\n%s", base, s)
		}
	}
	differ := []string{
		strings.Replace(base, "12345678901234567891", "12345678901234567890", 1),
		strings.Replace(base, "12345678901234567891", "12345678901234567891.0", 1), // a double: ...7168
		strings.Replace(base, `"temperature":1`, `"temperature":1.0000001`, 1),
		strings.Replace(base, `\u00e9`, `e`, 1),
		strings.Replace(base, `"role":"user","content"`, `"content":"x","role":"user","content"`, 1),
	}
	for _, s := range differ {
		if got := keyOf(t, s, false); got.key == k.key {
			t.Errorf("the same key for requests the provider tells apart:\n%s\n%s", base, s)
		}
	}
}

// Beyond 2^53 integers are not rounded to a double: 2^53+1 and 2^53 are
// two requests.
func TestBodyKeyIntegersBeyond2p53(t *testing.T) {
	t.Parallel()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"seed":%s}`
	a := keyOf(t, strings.Replace(body, "%s", "9007199254740993", 1), false)
	b := keyOf(t, strings.Replace(body, "%s", "9007199254740992", 1), false)
	c := keyOf(t, strings.Replace(body, "%s", "9007199254740992.0", 1), false)
	if a.reason != "" || b.reason != "" {
		t.Fatal(a.reason, b.reason)
	}
	if a.key == b.key {
		t.Error("9007199254740993 and 9007199254740992 have the same key")
	}
	if b.key != c.key {
		t.Error("9007199254740992 and 9007199254740992.0 (the same number) have different keys")
	}
}

// A body already in canonical form keeps the key it had before keys were
// canonical; for another, the legacy key is the old one, given only when a
// plan may find answers under it.
func TestBodyKeyLegacy(t *testing.T) {
	t.Parallel()
	canonical := `{"messages":[{"content":"x","role":"user"}],"model":"gpt-4o-mini"}`
	if r := keyOf(t, canonical, true); r.key != legacyKeyOf(canonical) || r.old != [16]byte{} {
		t.Errorf("canonical body: key %x legacy %x, want %x and none", r.key, r.old, legacyKeyOf(canonical))
	}
	for _, body := range []string{`{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "caf\u00e9"}]}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`} {
		r := keyOf(t, body, true)
		if r.old != legacyKeyOf(body) || r.key == r.old {
			t.Errorf("%s: legacy key %x, want %x (key %x)", body, r.old, legacyKeyOf(body), r.key)
		}
		if r := keyOf(t, body, false); r.old != [16]byte{} {
			t.Errorf("%s: a legacy key without legacy", body)
		}
	}
	// Without a canonical form, the legacy key is the key.
	lone := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"\ud800"}]}`
	if r := keyOf(t, lone, true); r.key != legacyKeyOf(lone) || r.old != [16]byte{} {
		t.Errorf("lone surrogate: key %x legacy %x, want the legacy key %x", r.key, r.old, legacyKeyOf(lone))
	}
}

// An invalid line gets no key: it is rejected before one is made.
func TestBodyKeyInvalidJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"model":"gpt-4o-mini","messages":[}`, `{"model":"gpt-4o-mini","messages":[],"x":01}`,
		`{"model":"gpt-4o-mini","messages":[{"content":"\x"}]}`, `{"model":"gpt-4o-mini","messages":[],"x":"` + "\x01" + `"}`} {
		r := keyOf(t, body, true)
		if r.reason == "" || r.key != [16]byte{} {
			t.Errorf("%s: reason %q key %x, want rejected without a key", body, r.reason, r.key)
		}
	}
}

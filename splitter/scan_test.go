package splitter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice/provider"
)

// syntaxOK runs the scanner over any JSON value (not only objects).
func syntaxOK(b []byte) (bool, string) {
	var s scanner
	s.reset(b)
	s.ws()
	if s.i == len(b) {
		return false, "blank"
	}
	if !s.value() {
		return false, s.err
	}
	s.ws()
	if s.i != len(b) {
		return false, "trailing"
	}
	return true, ""
}

var syntaxCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e10`, `1E+2`, `-1.0e-3`, `true`, `false`, `null`,
	`{"a":1}`, `{"a":[1,2,{"b":null}]}`, ` { "a" : "b" } `, "\t{}\r",
	`01`, `1.`, `.1`, `-`, `+1`, `1e`, `1e+`, `{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `{a:1}`, `{'a':1}`,
	`"\u00e9"`, `"\uD83D\uDE00"`, `"\ud800"`, `"\x"`, `"\u12"`, `"\u12G4"`, `"a\"b"`, `"\/"`,
	"\"\x01\"", "\"\x1f\"", "\"\x7f\"", "\"é\"", "\"\xff\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"",
	`{"a":1}x`, `{"a":1} {}`, `{"a":1`, `{"a":"b`, `{"a":tru`, `nul`, `[`, `{`, `"`,
	`{"a":1 "b":2}`, `[1 2]`, `{"a":1}}`, "\xef\xbb\xbf{}", `{"a":"\u0000"}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	`"abcdefghijklmnopqrstuvwxyz\"0123456789"`, `"abcdefgh\\ijklmnop"`, `"0123456789abcdé"`,
}

func TestScannerMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, c := range syntaxCases {
		want := json.Valid([]byte(c)) && utf8.ValidString(c)
		got, why := syntaxOK([]byte(c))
		if got != want {
			t.Errorf("%.60q: scanner %v (%s), encoding/json+utf8 %v", c, got, why, want)
		}
	}
}

func TestGJSONDifferences(t *testing.T) {
	t.Parallel()
	// Documents why gjson.ValidBytes alone is not enough (see scan.go).
	for _, c := range []string{"\"\xff\"", `{"a":1,"a":2}`} {
		if !gjson.Valid(c) {
			t.Logf("gjson rejects %q", c)
		}
	}
	if v := gjson.Get(`{"model":"a","model":"b"}`, "model").String(); v != "a" {
		t.Errorf("gjson duplicate key: got %q, doc says first wins", v)
	}
	var m map[string]string
	json.Unmarshal([]byte(`{"model":"a","model":"b"}`), &m)
	if m["model"] != "b" {
		t.Errorf("encoding/json duplicate key: got %q, doc says last wins", m["model"])
	}
}

func openaiCfg() Config {
	return Config{Codec: provider.Presets["openai"].Codec(), Limits: provider.Presets["openai"].Limits}
}

func TestValidateLineReasons(t *testing.T) {
	t.Parallel()
	ok := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`
	item, blank, reason := ValidateLine(openaiCfg(), []byte(ok))
	if blank || reason != "" || string(item) != ok+"\n" {
		t.Fatalf("good line: %q %v %q", item, blank, reason)
	}
	if _, blank, _ := ValidateLine(openaiCfg(), []byte(" \t\r")); !blank {
		t.Fatal("blank line not blank")
	}
}

// TestTextCounts: the validator's scan counts a body's text by class, the
// same whether a run of ASCII goes through the 8-byte path or byte by byte,
// escapes as the characters they stand for, keys like "model" and "role"
// not at all.
func TestTextCounts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body  string
		want  textCounts
		roles int64
	}{
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello, world!"}]}`,
			textCounts{letters: 10, spaces: 1, other: 2}, 1},
		// 41 letters and 7 of [\]^_`{|}~, 11 spaces, 5 digits and other
		// punctuation: long enough for the 8-byte path, with a tail.
		{`{"model":"m","input":"The 3 quick brown foxes jumped over 12 lazy dogs: [ok] {x}_y|z~!"}`,
			textCounts{letters: 48, spaces: 11, other: 5}, 0},
		// Escapes: \n and \" are "other"; \u00e9 is an accented letter,
		// \u4e16 a CJK character.
		{`{"model":"m","input":"a\nb\"c\u00e9\u4e16"}`, textCounts{letters: 3, latin: 1, other: 2, wide: 1}, 0},
		// An escaped surrogate pair is one four-byte character, as the raw
		// emoji; U+0080–U+00BF (no-break space, ©) are "other".
		{`{"model":"m","input":"\ud83d\ude00😀\u00a0©"}`, textCounts{other: 2, astral: 2}, 0},
		// Script classes; an input list counts every string.
		{`{"model":"m","input":["Привет мир","مرحبا","नमस्ते","你好世界","こんにちは","안녕","😀👍","café"]}`,
			textCounts{letters: 3, latin: 1, spaces: 1, narrow: 14, indic: 6, wide: 11, astral: 2}, 0},
	}
	for _, c := range cases {
		var s scanner
		s.reset([]byte(c.body))
		s.count = true
		if !s.object(kindBody) {
			t.Fatalf("%s: %s", c.body, s.err)
		}
		if s.text != c.want || s.roles != c.roles {
			t.Errorf("%s:\n got %+v roles %d\nwant %+v roles %d", c.body, s.text, s.roles, c.want, c.roles)
		}
	}
}

func TestEstimateTokens(t *testing.T) {
	// Not parallel: testing.AllocsPerRun refuses to run beside other tests.
	cases := []struct {
		body string
		want int64
	}{
		// 10 letters/6.1 + 1 space*0.48 + 2 other*0.3 = 2.72 -> 3, + 4 for
		// one message + 3 (o200k with the cookbook's framing: 11).
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello, world!"}]}`, 3 + 4 + 3},
		// 4 CJK characters: 4/1.3 = 3.08 -> 4, + 4 + 3 (o200k: 9).
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"你好世界"}]}`, 4 + 4 + 3},
		// Two emoji: 2.8 -> 3; no messages, so only the 3 per request.
		{`{"model":"m","input":"😀👍"}`, 3 + 3},
		// Claude's tokenizer cuts finer: 12 letters, 1 space, 1 other:
		// 2.45 * 1.15 = 2.82 -> 3.
		{`{"model":"claude-3-5-haiku","max_tokens":10,"messages":[{"role":"user","content":"Hello Claude!"}]}`, 3 + 4 + 3},
		// Not JSON: length / 4 rounded up.
		{`not json`, 2},
	}
	for _, c := range cases {
		if got := EstimateTokens([]byte(c.body)); got != c.want {
			t.Errorf("EstimateTokens(%s) = %d, want %d", c.body, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { EstimateTokens([]byte(cases[0].body)) }); n > 1 {
		t.Errorf("EstimateTokens allocates %v times", n)
	}
}

var benchLine = []byte(`{"custom_id":"request-000123","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant that answers in one paragraph."},{"role":"user","content":"` +
	strings.Repeat(`Summarise the following text, keeping names and numbers: the quick brown fox jumps over the lazy dog \"quoted\" and caf\u00e9 crème brûlée 東京 🙂. `, 12) + `"}],"max_tokens":256}}`)

func BenchmarkScanLine(b *testing.B) {
	b.SetBytes(int64(len(benchLine)))
	var s scanner
	for b.Loop() {
		s.reset(benchLine)
		if _, ok := s.line(); !ok {
			b.Fatal(s.err)
		}
	}
}

func BenchmarkValidateLine(b *testing.B) {
	p := newParser(&Config{Codec: provider.Presets["openai"].Codec(), Limits: provider.Presets["openai"].Limits})
	blk := &block{data: benchLine, first: 2}
	b.SetBytes(int64(len(benchLine)))
	for b.Loop() {
		p.block(blk)
		if blk.recs[0].reason != "" {
			b.Fatal(blk.recs[0].reason)
		}
	}
}

// BenchmarkGJSON is the gjson route for comparison: validity, UTF-8, the
// four fields and body.model (no token count).
func BenchmarkGJSON(b *testing.B) {
	b.SetBytes(int64(len(benchLine)))
	for b.Loop() {
		if !gjson.ValidBytes(benchLine) || !utf8.Valid(benchLine) {
			b.Fatal("invalid")
		}
		r := gjson.GetManyBytes(benchLine, "custom_id", "method", "url", "body")
		if r[3].Get("model").Str == "" {
			b.Fatal("no model")
		}
	}
}

func BenchmarkEncodingJSONValid(b *testing.B) {
	b.SetBytes(int64(len(benchLine)))
	for b.Loop() {
		if !json.Valid(benchLine) {
			b.Fatal("invalid")
		}
	}
}

var _ = bytes.Equal

// TestUTF8Len: the inline UTF-8 check agrees with package utf8 on every
// sequence of up to three bytes (and on four-byte ones by sampling).
func TestUTF8Len(t *testing.T) {
	t.Parallel()
	b := make([]byte, 4)
	for c0 := 0x80; c0 < 0x100; c0++ {
		for c1 := 0; c1 < 0x100; c1++ {
			for c2 := 0; c2 < 0x100; c2++ {
				b[0], b[1], b[2], b[3] = byte(c0), byte(c1), byte(c2), 0x80
				r, n := utf8.DecodeRune(b)
				if r == utf8.RuneError && n == 1 {
					n = 0
				}
				if got := utf8Len(b); got != n {
					t.Fatalf("% x: utf8Len %d, utf8 %d", b, got, n)
				}
				if got := utf8Len(b[:2]); got != 0 && got != 2 || got == 2 && !utf8.Valid(b[:2]) {
					t.Fatalf("% x: utf8Len of 2 bytes = %d", b[:2], got)
				}
			}
		}
	}
}

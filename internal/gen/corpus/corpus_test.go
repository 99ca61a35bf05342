package corpus

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestDeterministicAndValid(t *testing.T) {
	for _, format := range []string{"openai", "anthropic"} {
		var a, b bytes.Buffer
		New(Options{Size: 500_000, Seed: 9, Format: format}).WriteTo(&a)
		New(Options{Size: 500_000, Seed: 9, Format: format}).WriteTo(&b)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatal("same seed, other bytes")
		}
		var c bytes.Buffer
		New(Options{Size: 500_000, Seed: 10, Format: format}).WriteTo(&c)
		if bytes.Equal(a.Bytes(), c.Bytes()) {
			t.Fatal("other seed, same bytes")
		}
		urls := map[string]int{}
		nonASCII := 0
		for _, l := range bytes.Split(bytes.TrimSuffix(a.Bytes(), []byte{'\n'}), []byte{'\n'}) {
			var in struct {
				CustomID string          `json:"custom_id"`
				URL      string          `json:"url"`
				Body     json.RawMessage `json:"body"`
			}
			if err := json.Unmarshal(l, &in); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			if len(l) < 150 || len(l) > 8192+200 {
				t.Errorf("line of %d bytes", len(l))
			}
			urls[in.URL]++
			if bytes.ContainsFunc(l, func(r rune) bool { return r > 127 }) {
				nonASCII++
			}
		}
		if format == "openai" && (urls["/v1/chat/completions"] == 0 || urls["/v1/embeddings"] == 0) || nonASCII == 0 {
			t.Errorf("%s: urls %v, %d lines with non-ASCII text", format, urls, nonASCII)
		}
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"1G": 1 << 30, "1GiB": 1 << 30, "1GB": 1e9, "500M": 500 << 20, "64k": 64 << 10, "1000": 1000, "1.5MB": 1_500_000} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	if _, err := ParseSize("lots"); err == nil {
		t.Error("ParseSize(lots) succeeded")
	}
}

func BenchmarkGenerate(b *testing.B) {
	g := New(Options{Seed: 1})
	var n int64
	for b.Loop() {
		n += int64(len(g.Next()))
	}
	b.SetBytes(n / int64(b.N))
}

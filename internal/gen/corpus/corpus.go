// Package corpus generates realistic sluice input files: OpenAI batch input
// lines (or Anthropic /v1/messages lines) of varied length, with English,
// accented, CJK and emoji text and JSON escapes, for several models and
// endpoints. Output is a pure function of the options (deterministic for a
// seed) and is produced at several hundred MB/s.
package corpus

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
)

// Options say what to generate.
type Options struct {
	Size   int64  // stop after the first line that reaches this many bytes
	Seed   uint64 // the same seed gives the same bytes
	Models int    // chat models to spread lines over (default 3)
	// Format is "openai" (chat completions and embeddings, default) or
	// "anthropic" (/v1/messages with max_tokens).
	Format string
	// MinLine and MaxLine bound line lengths (default 200 and 8192 bytes).
	MinLine, MaxLine int
	// IDPrefix starts every custom_id (default "req-").
	IDPrefix string
}

var chatModels = []string{"gpt-4o-mini", "gpt-4.1-mini", "gpt-4o", "gpt-4.1-nano", "o4-mini", "gpt-4.1", "o3-mini", "gpt-5-mini"}
var embedModels = []string{"text-embedding-3-small", "text-embedding-3-large"}
var claudeModels = []string{"claude-3-5-haiku-latest", "claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"}

// fragments are JSON-escaped pieces of text (each already valid inside a
// JSON string). Most are English words; some carry accents, CJK, emoji and
// escapes.
var words = []string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
	"this", "which", "or", "from", "but", "are", "an", "they", "we", "summary", "document", "analysis",
	"customer", "report", "quarterly", "revenue", "increase", "model", "question", "answer", "please",
	"explain", "briefly", "following", "paragraph", "translate", "classify", "sentiment", "positive",
	"negative", "neutral", "product", "review", "shipping", "delivery", "battery", "performance", "screen",
	"quality", "price", "support", "refund", "order", "invoice", "contract", "clause", "liability",
	"patient", "symptoms", "diagnosis", "research", "experiment", "results", "significant", "data",
	"pipeline", "function", "variable", "error", "exception", "database", "query", "index", "latency",
}
var specials = []string{
	`café`, `crème brûlée`, `naïve`, `Zürich`, `São Paulo`, `\u00e9t\u00e9`, `\"quoted\"`, `C:\\path\\to\\file`,
	`line one\nline two`, `tab\tseparated`, `東京は日本の首都です。`, `人工智能正在改变世界`, `これはテストです`,
	`안녕하세요`, `Привет, мир`, `مرحبا بالعالم`, `🙂`, `🚀 launch`, `👍🏽`, `emoji 🎉🎉`, `½ × ∑ ≠ ∞`, `\u2014`,
}
var systems = []string{
	"You are a helpful assistant.",
	"You are a careful analyst. Answer in one paragraph.",
	"Réponds en français, s'il te plaît.",
	"You classify product reviews as positive, negative or neutral. Reply with one word.",
	"以简洁的中文回答。",
}

// Writer generates lines into an io.Writer.
type Writer struct {
	o    Options
	rng  *rand.Rand
	line []byte
	seq  int64
}

// New returns a generator for o.
func New(o Options) *Writer {
	if o.Models <= 0 {
		o.Models = 3
	}
	if o.MinLine <= 0 {
		o.MinLine = 200
	}
	if o.MaxLine < o.MinLine {
		o.MaxLine = max(8192, o.MinLine)
	}
	if o.IDPrefix == "" {
		o.IDPrefix = "req-"
	}
	return &Writer{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eed5eed5eed5eed))}
}

// WriteTo writes lines until o.Size bytes are reached.
func (g *Writer) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	var n int64
	for n < g.o.Size {
		l := g.Next()
		if _, err := bw.Write(l); err != nil {
			return n, err
		}
		n += int64(len(l))
	}
	return n, bw.Flush()
}

// Lines returns how many lines were generated so far.
func (g *Writer) Lines() int64 { return g.seq }

// Next returns the next line, newline included; valid until the next call.
func (g *Writer) Next() []byte {
	r := g.rng
	// Log-uniform target length: many short lines, some long ones.
	lo, hi := math.Log(float64(g.o.MinLine)), math.Log(float64(g.o.MaxLine))
	target := int(math.Exp(lo + r.Float64()*(hi-lo)))
	b := g.line[:0]
	b = append(b, `{"custom_id":"`...)
	b = append(b, g.o.IDPrefix...)
	b = strconv.AppendInt(b, g.seq, 10)
	g.seq++
	b = append(b, `","method":"POST","url":"`...)
	switch {
	case g.o.Format == "anthropic":
		b = append(b, `/v1/messages","body":{"model":"`...)
		b = append(b, claudeModels[r.IntN(min(g.o.Models, len(claudeModels)))]...)
		b = append(b, `","max_tokens":`...)
		b = strconv.AppendInt(b, int64(64+r.IntN(1024)), 10)
		b = append(b, `,"messages":[{"role":"user","content":"`...)
		b = g.text(b, target-len(b)-6)
		b = append(b, `"}]}}`...)
	case r.IntN(5) == 0:
		b = append(b, `/v1/embeddings","body":{"model":"`...)
		b = append(b, embedModels[r.IntN(len(embedModels))]...)
		b = append(b, `","input":"`...)
		b = g.text(b, target-len(b)-3)
		b = append(b, `"}}`...)
	default:
		b = append(b, `/v1/chat/completions","body":{"model":"`...)
		b = append(b, chatModels[r.IntN(min(g.o.Models, len(chatModels)))]...)
		b = append(b, `","messages":[{"role":"system","content":"`...)
		b = append(b, systems[r.IntN(len(systems))]...)
		b = append(b, `"},{"role":"user","content":"`...)
		b = g.text(b, target-len(b)-24)
		b = append(b, `"}],"max_tokens":`...)
		b = strconv.AppendInt(b, int64(16+r.IntN(1000)), 10)
		b = append(b, `}}`...)
	}
	b = append(b, '\n')
	g.line = b
	return b
}

// text appends about n bytes of JSON-escaped text.
func (g *Writer) text(b []byte, n int) []byte {
	end := len(b) + max(n, 8)
	r := g.rng
	first := true
	for len(b) < end {
		if !first {
			b = append(b, ' ')
		}
		first = false
		x := r.Uint32()
		if x&31 == 0 {
			b = append(b, specials[(x>>5)%uint32(len(specials))]...)
			continue
		}
		b = append(b, words[(x>>5)%uint32(len(words))]...)
		if x>>24 < 16 {
			b = append(b, ',')
		} else if x>>24 < 24 {
			b = append(b, '.')
		}
	}
	return b
}

// ParseSize reads sizes like 1G, 1GiB (2^30), 1GB (10^9), 500M, 64k, 1000.
func ParseSize(s string) (int64, error) {
	num := s
	mult := float64(1)
	units := []struct {
		suffix string
		m      float64
	}{
		{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3},
		{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"k", 1 << 10}, {"B", 1},
	}
	for _, u := range units {
		if len(s) > len(u.suffix) && s[len(s)-len(u.suffix):] == u.suffix {
			num, mult = s[:len(s)-len(u.suffix)], u.m
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 1G, 500MB, 64KiB)", s)
	}
	return int64(v * mult), nil
}

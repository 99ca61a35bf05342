package splitter

import (
	"bytes"
	"testing"

	"github.com/sluice-batch/sluice/internal/cputime"
	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/provider"
)

// BenchmarkParseCorpus: a worker's whole job on 1 MiB blocks of the
// generated corpus (the end-to-end benchmark's input): validation, token
// estimate, ledger key and wire item of every line.
func BenchmarkParseCorpus(b *testing.B) {
	var buf bytes.Buffer
	if _, err := corpus.New(corpus.Options{Seed: 1, Size: 16 << 20}).WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	var blocks []*block
	data := buf.Bytes()
	for len(data) > 0 {
		n := min(len(data), 1<<20)
		if i := bytes.LastIndexByte(data[:n], '\n'); i >= 0 && n < len(data) {
			n = i + 1
		}
		blocks = append(blocks, &block{data: bytes.TrimSuffix(data[:n], []byte{'\n'}), first: 2})
		data = data[n:]
	}
	p := newParser(&Config{Codec: provider.Presets["openai"].Codec(), Limits: provider.Presets["openai"].Limits,
		KeyScope: "openai\x00https://api.openai.com/v1"})
	b.SetBytes(int64(buf.Len()))
	cpu0 := cputime.Process()
	for b.Loop() {
		for _, blk := range blocks {
			p.block(blk)
			if blk.recs[0].reason != "" {
				b.Fatal(blk.recs[0].reason)
			}
		}
	}
	// CPU time is steadier than wall time on a shared machine.
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

package splitter_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-batch/sluice/internal/cputime"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
)

// translationInputs are one generated Anthropic file (/v1/messages lines)
// and the same lines as OpenAI chat completions lines: same model,
// max_tokens and messages, so translated they give the same params.
func translationInputs(t testing.TB, size int64) (native, chat []byte) {
	native = genInput(t, size, corpus.Options{Seed: 7, Format: "anthropic"})
	chat = bytes.ReplaceAll(native, []byte(`"url":"/v1/messages"`), []byte(`"url":"/v1/chat/completions"`))
	return native, chat
}

// TestChatLinesTranslatedInChunks: chat completions lines planned for
// anthropic produce the very chunk bytes the equivalent native lines do:
// the translation happens when the chunk is written, and the limits
// measure the translated bytes.
func TestChatLinesTranslatedInChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	native, chat := translationInputs(t, 2_000_000)
	lim := sluice.Limits{MaxBatchBytes: 300_000}
	rn := e.mustSplit(e.write("native.jsonl", native), "anthropic", lim, nil)
	rc := e.mustSplit(e.write("chat.jsonl", chat), "anthropic", lim, nil)
	if rn.res.Requests != rc.res.Requests || rc.res.Rejected != 0 || len(rn.chunks) != len(rc.chunks) || len(rn.chunks) < 5 {
		t.Fatalf("native: %d requests in %d chunks; chat: %d requests (%d rejected) in %d chunks",
			rn.res.Requests, len(rn.chunks), rc.res.Requests, rc.res.Rejected, len(rc.chunks))
	}
	for i := range rn.chunks {
		cn, cc := rn.chunks[i], rc.chunks[i]
		if cc.URL != provider.ChatURL || cn.URL != "/v1/messages" {
			t.Fatalf("chunk %d: urls %q and %q", i, cn.URL, cc.URL)
		}
		if cc.Bytes > lim.MaxBatchBytes {
			t.Fatalf("chunk %d: %d bytes, over the limit", i, cc.Bytes)
		}
		bn, err := os.ReadFile(filepath.Join(rn.cfg.Dir, cn.Path))
		if err != nil {
			t.Fatal(err)
		}
		bc, err := os.ReadFile(filepath.Join(rc.cfg.Dir, cc.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bn, bc) || cc.Bytes != int64(len(bc)) {
			t.Fatalf("chunk %d: the translated chunk differs from the native one (%d and %d bytes)", i, len(bn), len(bc))
		}
	}
}

// BenchmarkPlanTranslation: planning for --provider anthropic, the same
// requests as native /v1/messages lines (translation off) and as OpenAI
// chat completions lines (translation on), with the splitter alone
// (null sink) and with the real tracker. Compare ns/op (or lines/s)
// between native and chat of the same sink: the target is within
// 20%.
func BenchmarkPlanTranslation(b *testing.B) {
	native, chat := translationInputs(b, 32<<20)
	lines := bytes.Count(native, []byte{'\n'})
	codec := provider.Presets["anthropic"].Codec()
	lim := provider.Presets["anthropic"].Limits
	for _, sink := range []string{"null", "tracker"} {
		for _, in := range []struct {
			name string
			data []byte
		}{{"native", native}, {"chat", chat}} {
			b.Run(sink+"/"+in.name, func(b *testing.B) {
				e := newEnv(b)
				path := e.write(in.name+".jsonl", in.data)
				b.SetBytes(int64(len(in.data)))
				cpu0 := cputime.Process()
				for b.Loop() {
					if sink == "tracker" {
						r := e.mustSplit(path, "anthropic", sluice.Limits{}, nil)
						os.RemoveAll(r.cfg.Dir)
						continue
					}
					dir := filepath.Join(e.dir, "nulljob")
					cfg := splitter.Config{Input: path, Dir: dir, Codec: codec, Limits: lim}
					if _, err := splitter.Split(context.Background(), cfg, nullSink{}); err != nil {
						b.Fatal(err)
					}
					os.RemoveAll(dir)
				}
				b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
				// CPU time is steadier than wall time on a shared machine.
				b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N)/float64(lines), "cpu-ns/line")
			})
		}
	}
}

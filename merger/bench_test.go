//go:build unix

package merger

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/cputime"

	"github.com/sluice-batch/sluice/internal/wire"
)

// benchFiles writes n results records of about recBytes bytes into nfiles
// chunk results files as a job makes them: each file holds a contiguous
// range of ordinals (one chunk), its records shuffled (providers answer in
// any order; the emulator shuffles), every 50th failed. It returns the
// files and the expected custom_ids. Lines have the shape of sluice's
// output lines (custom_id first).
//
// With groups > 1 the ordinals are dealt to that many (url, model) groups
// at random, as in an input of several models, and each group's requests
// fill nfiles/groups chunk files in turn: files of different groups are
// merged side by side.
func benchFiles(b *testing.B, dir string, n, nfiles, groups, recBytes int) ([]string, []string) {
	b.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	ids := make([]string, n)
	var files []string
	byGroup := make([][]int, groups)
	for o := range n {
		g := rng.IntN(groups)
		byGroup[g] = append(byGroup[g], o)
	}
	var chunks [][]int
	for _, ords := range byGroup {
		per := (len(ords) + nfiles/groups - 1) / (nfiles / groups)
		for len(ords) > 0 {
			k := min(per, len(ords))
			chunks = append(chunks, ords[:k])
			ords = ords[k:]
		}
	}
	for f, ords := range chunks {
		rng.Shuffle(len(ords), func(i, j int) { ords[i], ords[j] = ords[j], ords[i] })
		var data []byte
		for _, ord := range ords {
			id := fmt.Sprintf("request-%08d", ord)
			ids[ord] = id
			pad := strings.Repeat("w", max(0, recBytes-200+rng.IntN(100)))
			var line string
			failed := ord%50 == 7
			if failed {
				line = fmt.Sprintf(`{"custom_id":%q,"response":{"status_code":500,"request_id":"req_%d","body":{"error":{"message":"%s"}}},"error":null}`, id, ord, pad)
			} else {
				line = fmt.Sprintf(`{"custom_id":%q,"response":{"status_code":200,"request_id":"req_%d","body":{"choices":[{"message":{"content":"%s"}}]}},"error":null}`, id, ord, pad)
			}
			data = wire.AppendResultRecord(data, int64(ord), failed, []byte(line))
		}
		name := filepath.Join(dir, fmt.Sprintf("c%06d.results", f+1))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, name)
	}
	return files, ids
}

// BenchmarkMerge merges 200,000 results (~670 bytes each, like the
// 1,000,000-request end-to-end benchmark's) in input order: from 5 chunk
// results files of ~27 MB of one group, and from 10 files of 5 groups.
func BenchmarkMerge(b *testing.B) {
	b.Run("1group", func(b *testing.B) { benchMerge(b, 5, 1) })
	b.Run("5groups", func(b *testing.B) { benchMerge(b, 10, 5) })
}

func benchMerge(b *testing.B, nfiles, groups int) {
	const n = 200_000
	dir := b.TempDir()
	files, ids := benchFiles(b, dir, n, nfiles, groups, 670)
	var size int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			b.Fatal(err)
		}
		size += st.Size()
	}
	b.SetBytes(size)
	b.ResetTimer()
	cpu0 := cputime.Process().Nanoseconds()
	for range b.N {
		sum := mustMerge(b, Config{Output: filepath.Join(dir, "out.jsonl"), Files: files, Total: n, Expected: expectIDs(ids)})
		if sum.Lines != n {
			b.Fatalf("%d lines, want %d", sum.Lines, n)
		}
	}
	b.ReportMetric(float64(cputime.Process().Nanoseconds()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

package translate

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-batch/sluice/internal/gen/corpus"
)

// corpusBodies are the bodies of generated chat lines (the splitter's
// benchmark corpus, mean ~2 KB a line).
func corpusBodies(b *testing.B, size int64) [][]byte {
	var buf bytes.Buffer
	corpus.New(corpus.Options{Seed: 7, Format: "anthropic", Size: size}).WriteTo(&buf)
	var out [][]byte
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, []byte(gjson.GetBytes(sc.Bytes(), "body").Raw))
	}
	return out
}

// BenchmarkRequest: one chat body translated per op, for each target.
func BenchmarkRequest(b *testing.B) {
	bodies := corpusBodies(b, 4<<20)
	var total int64
	for _, x := range bodies {
		total += int64(len(x))
	}
	for _, tn := range targetNames {
		b.Run(tn, func(b *testing.B) {
			tg := Lookup(tn)
			b.SetBytes(total / int64(len(bodies)))
			var dst []byte
			i := 0
			for b.Loop() {
				var err error
				dst, err = tg.RequestValid(dst[:0], bodies[i%len(bodies)], "m", nil)
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

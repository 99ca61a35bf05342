// Command gen writes a realistic sluice input file for benchmarks and
// tests:
//
//	go run ./internal/gen -size 1GB -out FILE [-seed N] [-models k] [-compress zstd|gzip] [-format openai|anthropic]
//	go run ./internal/gen -lines 1000000 -max-line 2860 -out FILE   # exactly 1M requests, about 1 GB
//
// Lines are OpenAI batch input lines for /v1/chat/completions and
// /v1/embeddings (or Anthropic /v1/messages), 200 B to 8 KB, with English,
// accented, CJK and emoji text and JSON escapes. The output is the same for
// the same flags. Sizes: 1G and 1GiB are 2^30 bytes, 1GB is 10^9.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-batch/sluice/internal/gen/corpus"
)

func main() {
	size := flag.String("size", "100M", "uncompressed bytes to write (1G, 500MB, ...)")
	out := flag.String("out", "", "output file (- for stdout)")
	seed := flag.Uint64("seed", 1, "random seed")
	models := flag.Int("models", 3, "chat models to spread lines over")
	format := flag.String("format", "openai", "openai (chat + embeddings) or anthropic (/v1/messages)")
	compress := flag.String("compress", "", "zstd or gzip (default: none)")
	minLine := flag.Int("min-line", 200, "shortest line, bytes")
	maxLine := flag.Int("max-line", 8192, "longest line, bytes")
	lines := flag.Int64("lines", 0, "write exactly this many lines instead of -size bytes")
	flag.Parse()
	if err := run(*size, *out, *seed, *models, *format, *compress, *minLine, *maxLine, *lines); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(size, out string, seed uint64, models int, format, compress string, minLine, maxLine int, lines int64) error {
	n, err := corpus.ParseSize(size)
	if err != nil {
		return err
	}
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	var w io.Writer = os.Stdout
	var f *os.File
	if out != "-" {
		if f, err = os.Create(out); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	var closer io.Closer
	switch compress {
	case "":
	case "zstd":
		zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			return err
		}
		w, closer = zw, zw
	case "gzip":
		zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return err
		}
		w, closer = zw, zw
	default:
		return fmt.Errorf("-compress: want zstd or gzip, got %q", compress)
	}
	start := time.Now()
	g := corpus.New(corpus.Options{Size: n, Seed: seed, Models: models, Format: format, MinLine: minLine, MaxLine: maxLine})
	var wrote int64
	if lines > 0 {
		wrote, err = writeLines(g, w, lines)
	} else {
		wrote, err = g.WriteTo(w)
	}
	if err != nil {
		return err
	}
	if closer != nil {
		if err := closer.Close(); err != nil {
			return err
		}
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return err
		}
	}
	d := time.Since(start)
	fmt.Fprintf(os.Stderr, "gen: %d lines, %d bytes in %.2fs (%.0f MB/s)\n", g.Lines(), wrote, d.Seconds(), float64(wrote)/d.Seconds()/1e6)
	return nil
}

// writeLines writes exactly n lines of g.
func writeLines(g *corpus.Writer, w io.Writer, n int64) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	var wrote int64
	for g.Lines() < n {
		k, err := bw.Write(g.Next())
		wrote += int64(k)
		if err != nil {
			return wrote, err
		}
	}
	return wrote, bw.Flush()
}

// Command benchmerge generates synthetic results files and measures the
// merger against cat and sort on the same bytes (scripts/bench-merge.sh).
//
//	benchmerge -gen -dir D -size 1G     write D/*.results and D/manifest.json
//	benchmerge -merge -dir D -out F     merge D in input order into F
//	benchmerge -bench -dir D -out F     run cat, sort and -merge as children
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-batch/sluice/internal/wire"
	"github.com/sluice-batch/sluice/merger"
)

type manifest struct {
	Total int64    `json:"total"`
	Bytes int64    `json:"bytes"`
	Files []string `json:"files"`
}

func main() {
	gen := flag.Bool("gen", false, "generate results files")
	doMerge := flag.Bool("merge", false, "merge in input order")
	bench := flag.Bool("bench", false, "run cat, sort and the merge, and compare")
	dir := flag.String("dir", "", "directory of the results files")
	size := flag.String("size", "1G", "job size for -gen (K, M, G suffixes: powers of 1024)")
	out := flag.String("out", "", "output file for -merge and -bench")
	order := flag.String("order", "input", "merge order")
	seed := flag.Uint64("seed", 1, "seed for -gen")
	reps := flag.Int("reps", 3, "runs of each merge for -bench")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of -merge here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmerge:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	switch {
	case *gen:
		err = generate(*dir, *size, *seed)
	case *doMerge:
		err = runMerge(*dir, *out, *order)
	case *bench:
		err = runBench(*dir, *out, *reps)
	default:
		err = fmt.Errorf("want -gen, -merge or -bench")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmerge:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseFloat(s, 64)
	return int64(n * float64(mult)), err
}

func hash(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Each request's record is a function of its ordinal.
const (
	minLine, maxLine = 200, 8 << 10
	maxFileBytes     = 200_000_000
	maxFileLines     = 50_000
)

func lineLen(ord int64) int { return minLine + int(hash(uint64(ord))%(maxLine-minLine+1)) }
func failed(ord int64) bool { return hash(uint64(ord)^0xf00)%100 == 0 }
func retried(ord int64) bool {
	return hash(uint64(ord)^0xbeef)%100 < 3
}

var filler = func() []byte {
	words := strings.Fields("the of batch model token result request merge output chunk provider " +
		"answer input order stream file line limit retry window budget summary error")
	r := rand.New(rand.NewPCG(7, 7))
	var b []byte
	for len(b) < 2*maxLine {
		b = append(b, words[r.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return b
}()

// appendLine appends ord's output line, padded to lineLen(ord) bytes.
func appendLine(dst []byte, ord int64) []byte {
	start := len(dst)
	h := hash(uint64(ord) ^ 0x1234)
	id := fmt.Sprintf("doc-%09d", ord)
	if failed(ord) {
		dst = fmt.Appendf(dst, `{"custom_id":%q,"response":{"status_code":400,"request_id":"req_%016x","body":{"error":{"type":"invalid_request_error","message":"`, id, h)
	} else {
		dst = fmt.Appendf(dst, `{"custom_id":%q,"response":{"status_code":200,"request_id":"req_%016x","body":{"id":"chatcmpl-%016x","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"`, id, h, h>>3)
	}
	tail := `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":345,"total_tokens":357}}},"error":null}`
	if failed(ord) {
		tail = `"}}},"error":null}`
	}
	pad := lineLen(ord) - (len(dst) - start) - len(tail)
	off := int(h % maxLine)
	dst = append(dst, filler[off:off+max(pad, 1)]...)
	return append(dst, tail...)
}

func generate(dir, sizeStr string, seed uint64) error {
	size, err := parseSize(sizeStr)
	if err != nil || dir == "" {
		return fmt.Errorf("want -dir and a -size like 1G: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	man := manifest{}
	var retry []int64 // final records that come in a later attempt's file
	write := func(ords []int64, attempt int) error {
		rng.Shuffle(len(ords), func(i, j int) { ords[i], ords[j] = ords[j], ords[i] })
		name := filepath.Join(dir, fmt.Sprintf("c%05d-a%d.results", len(man.Files), attempt))
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		var rec, line []byte
		for _, o := range ords {
			line = appendLine(line[:0], o)
			rec = wire.AppendResultRecord(rec[:0], o, failed(o), line)
			man.Bytes += int64(len(rec))
			bw.Write(rec)
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		man.Files = append(man.Files, name)
		return f.Close()
	}
	var chunk []int64
	var chunkBytes, total int64
	flushChunk := func() error {
		err := write(chunk, 1)
		chunk, chunkBytes = chunk[:0], 0
		return err
	}
	for ord := int64(0); total < size; ord++ {
		n := int64(lineLen(ord) + 16)
		if len(chunk) >= maxFileLines || chunkBytes+n > maxFileBytes {
			if err := flushChunk(); err != nil {
				return err
			}
		}
		chunkBytes += n
		total += n
		man.Total = ord + 1
		if retried(ord) {
			retry = append(retry, ord)
		} else {
			chunk = append(chunk, ord)
		}
	}
	if err := flushChunk(); err != nil {
		return err
	}
	for len(retry) > 0 { // attempt 2 files
		k := min(len(retry), maxFileLines)
		if err := write(retry[:k], 2); err != nil {
			return err
		}
		retry = retry[k:]
	}
	b, _ := json.MarshalIndent(man, "", " ")
	fmt.Printf("generated %d requests, %d bytes in %d files\n", man.Total, man.Bytes, len(man.Files))
	return os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
}

func readManifest(dir string) (manifest, error) {
	var man manifest
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(b, &man)
	}
	return man, err
}

func runMerge(dir, out, order string) error {
	man, err := readManifest(dir)
	if err != nil {
		return err
	}
	start := time.Now()
	sum, err := merger.Merge(context.Background(), merger.Config{
		Output: out, Order: order, Files: man.Files, Total: man.Total,
		Expected: func(yield func(int64, string) bool) error {
			var b []byte
			for o := int64(0); o < man.Total; o++ {
				b = fmt.Appendf(b[:0], "doc-%09d", o)
				if !yield(o, string(b)) {
					return nil
				}
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("merged %d lines (%d failed) into %d bytes in %.2fs (order %s)\n",
		sum.Lines, sum.Failed, sum.OutputBytes, time.Since(start).Seconds(), order)
	return nil
}

type measure struct {
	name   string
	secs   float64 // median of the runs
	best   float64
	rssMiB float64 // largest of the runs
}

func run(name string, reps int, mk func() *exec.Cmd, after func()) (measure, error) {
	var secs []float64
	m := measure{name: name}
	for range reps {
		cmd := mk()
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		secs = append(secs, time.Since(start).Seconds())
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		m.rssMiB = max(m.rssMiB, float64(ru.Maxrss)/1024)
		if after != nil {
			after()
		}
	}
	slices.Sort(secs)
	m.secs, m.best = secs[len(secs)/2], secs[0]
	return m, nil
}

func runBench(dir, out string, reps int) error {
	man, err := readManifest(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average before: %s", load)
	errsOf := func(o string) string {
		return strings.Replace(o, ".jsonl", ".errors.jsonl", 1)
	}
	clean := func(o string) func() {
		return func() { os.Remove(o); os.Remove(errsOf(o)); exec.Command("sync").Run() }
	}
	mergeCmd := func(o string) func() *exec.Cmd {
		return func() *exec.Cmd {
			c := exec.Command(self, "-merge", "-dir", dir, "-out", o)
			c.Stdout = os.Stdout
			return c
		}
	}
	cases := []struct {
		name  string
		reps  int
		mk    func() *exec.Cmd
		after func()
	}{
		{"cat > /dev/null", 1, func() *exec.Cmd { return exec.Command("cat", man.Files...) }, nil},
		{"sort -n -S 100M > /dev/null", 1, func() *exec.Cmd {
			c := exec.Command("sort", append([]string{"-n", "-S", "100M", "-T", dir}, man.Files...)...)
			c.Env = append(os.Environ(), "LC_ALL=C")
			return c
		}, nil},
		{"merge (input order)", reps, mergeCmd(out), clean(out)},
		{"merge (input order, .zst)", reps, mergeCmd(out + ".zst"), clean(out + ".zst")},
		{"merge (any order)", reps, func() *exec.Cmd {
			c := mergeCmd(out)()
			c.Args = append(c.Args, "-order", "any")
			return c
		}, clean(out)},
	}
	var ms []measure
	for _, c := range cases {
		m, err := run(c.name, c.reps, c.mk, c.after)
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load average after: %s", load)
	mb := float64(man.Bytes) / 1e6
	fmt.Printf("\ninput: %d requests, %.0f MB in %d files; merges: median (best) of %d runs\n", man.Total, mb, len(man.Files), reps)
	fmt.Printf("%-28s %8s %12s %12s %14s\n", "command", "seconds", "MB/s", "peak RSS MiB", "time vs merge")
	merge := ms[2]
	for _, m := range ms {
		rate := fmt.Sprintf("%.0f", mb/m.secs)
		if m.best != m.secs {
			rate += fmt.Sprintf(" (%.0f)", mb/m.best)
		}
		fmt.Printf("%-28s %8.2f %12s %12.1f %14.2f\n", m.name, m.secs, rate, m.rssMiB, m.secs/merge.secs)
	}
	return nil
}

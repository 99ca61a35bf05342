// Command benchsplit plans one file as `sluice plan` does
// (lifecycle.Prepare: splitter.Split with the real tracker as sink), in a
// fresh state directory, and prints throughput and peak RSS.
// scripts/bench-split.sh drives it.
//
//	go run ./splitter/internal/benchsplit -in FILE [-provider openai] [-state DIR] [-db postgres://...] [-skip-invalid]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

func main() {
	in := flag.String("in", "", "input file")
	prov := flag.String("provider", "openai", "provider preset (limits and wire format)")
	state := flag.String("state", "", "state directory (default: a new temp dir, removed after)")
	skip := flag.Bool("skip-invalid", false, "write bad lines to the rejects file and go on")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.StringVar(&traceOut, "trace", "", "write an execution trace here")
	flag.StringVar(&dbURL, "db", "", "record the plan in this PostgreSQL database (default: SQLite in the state directory)")
	flag.BoolVar(&nullSink, "null-sink", false, "record nothing (measures the splitter without SQLite)")
	flag.Parse()
	if err := run(*in, *prov, *state, *skip, *cpuprof); err != nil {
		fmt.Fprintln(os.Stderr, "benchsplit:", err)
		os.Exit(1)
	}
}

func run(in, prov, state string, skip bool, cpuprof string) error {
	if in == "" {
		return fmt.Errorf("-in is required")
	}
	p, err := provider.Lookup(prov)
	if err != nil {
		return err
	}
	if state == "" {
		if state, err = os.MkdirTemp("", "benchsplit-"); err != nil {
			return err
		}
		defer os.RemoveAll(state)
	}
	ctx := context.Background()
	var db tracker.Backend
	if dbURL != "" {
		db, err = tracker.OpenPostgres(ctx, dbURL, state)
	} else {
		db, err = tracker.Open(ctx, state)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	// A PostgreSQL database outlives the state directory: drop the last
	// run's job, or this one would reuse its plan.
	if err := db.DeleteJob(ctx, "bench"); err != nil {
		return err
	}
	abs, _ := filepath.Abs(in)
	if cpuprof != "" {
		f, err := os.Create(cpuprof)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if traceOut != "" {
		f, err := os.Create(traceOut)
		if err != nil {
			return err
		}
		trace.Start(f)
		defer trace.Stop()
	}
	start := time.Now()
	var res *splitter.Result
	if nullSink {
		res, err = splitNull(ctx, db, p, abs, skip)
	} else {
		// Planned as `sluice plan` plans (lifecycle.Prepare).
		var pr *lifecycle.Prepared
		pr, err = lifecycle.Prepare(ctx, db, lifecycle.Spec{ID: "bench", Input: abs, Preset: p, SkipInvalid: skip,
			KeyScope: p.Name + "\x00" + p.BaseURL, Reuse: true}) // ledger keys, as sluice plan makes them
		if pr != nil {
			res = pr.Result
		}
	}
	if err != nil {
		return err
	}
	d := time.Since(start)
	st, _ := os.Stat(abs)
	out := map[string]any{
		"input_bytes": st.Size(), "lines": res.Lines, "requests": res.Requests, "rejected": res.Rejected,
		"chunks": len(res.Chunks), "wire_bytes": res.Bytes, "seconds": d.Seconds(),
		"mb_per_s": float64(st.Size()) / d.Seconds() / 1e6, "peak_rss_mb": float64(hwmKB()) / 1024,
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return nil
}

// hwmKB is this process's peak RSS (VmHWM), in KiB.
func hwmKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb
		}
	}
	return 0
}

var (
	nullSink bool
	dbURL    string
	traceOut string
)

// nopSink records nothing.
type nopSink struct{}

func (nopSink) AddRequest(*sluice.Request) error         { return nil }
func (nopSink) AddChunk(*sluice.Chunk) error             { return nil }
func (nopSink) FindCustomID(string) (int64, bool, error) { return 0, false, nil }

// splitNull splits with a sink that records nothing: the splitter alone,
// without SQLite (the job is begun and thrown away).
func splitNull(ctx context.Context, db tracker.Backend, p provider.Preset, abs string, skip bool) (*splitter.Result, error) {
	dir := filepath.Join(db.Dir(), "jobs", "bench")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	job := &sluice.Job{ID: "bench", Provider: p.Name, Input: abs, Dir: dir, Limits: p.Limits, MaxAttempts: sluice.DefaultMaxAttempts}
	plan, err := db.BeginPlan(ctx, job)
	if err != nil {
		return nil, err
	}
	defer plan.Abort(context.WithoutCancel(ctx))
	return splitter.Split(ctx, splitter.Config{Input: abs, Dir: dir, Codec: p.Codec(), Limits: p.Limits,
		SkipInvalid: skip, RejectsPath: filepath.Join(dir, "rejects.jsonl")}, nopSink{})
}

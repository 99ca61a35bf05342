// Command benchtracker measures the tracker's share of a job at scale: plan
// rows, each chunk's ChunkRequests and FinishChunk (with ledger), and the
// merge's Expected, printing wall and CPU seconds per phase.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/sluice-batch/sluice/internal/cputime"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

func main() {
	n := flag.Int("n", 1_000_000, "requests")
	chunks := flag.Int("chunks", 23, "chunks")
	dir := flag.String("dir", "", "state dir (default: temp)")
	idFormat := flag.String("ids", "request-%07d", "custom_id format: the default sorts in plan order; req-%d, like scripts/bench-e2e.sh's input, does not")
	prof := flag.String("cpuprofile", "", "write a CPU profile")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "benchtracker")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := tracker.Open(ctx, filepath.Join(*dir, "state"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	per := (*n + *chunks - 1) / *chunks
	phase := func(name string, f func()) {
		t0, c0 := time.Now(), cputime.Process()
		f()
		fmt.Printf("%-16s wall %6.2fs  cpu %6.2fs\n", name, time.Since(t0).Seconds(), (cputime.Process() - c0).Seconds())
	}
	total0 := cputime.Process()
	phase("plan", func() {
		p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/x", Dir: *dir})
		if err != nil {
			log.Fatal(err)
		}
		rows := make([]sluice.Request, 0, 512)
		var off int64
		for k := 0; k < *n; k++ {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(k))
			bk := sha256.Sum256(b[:])
			if k%per == 0 {
				off = 0
			}
			l := 200 + k%2600
			rows = append(rows, sluice.Request{Ordinal: int64(k), Line: int64(k + 1), CustomID: fmt.Sprintf(*idFormat, k),
				Chunk: int64(k/per + 1), Index: k % per, Offset: off, Length: l, Tokens: int64(l / 4), BodyKey: bk[:16]})
			off += int64(l)
			if len(rows) == cap(rows) || k == *n-1 {
				if err := p.AddRequests(rows); err != nil {
					log.Fatal(err)
				}
				rows = rows[:0]
			}
		}
		for c := 1; c <= *chunks; c++ {
			if err := p.AddChunk(&sluice.Chunk{ID: int64(c), Attempt: 1, URL: "/v1/chat/completions", Model: "m", Path: fmt.Sprint("c", c),
				Requests: min(per, *n-(c-1)*per), State: sluice.ChunkPending}); err != nil {
				log.Fatal(err)
			}
		}
		if err := p.Commit(ctx, sluice.Fingerprint{}, int64(*n), 0); err != nil {
			log.Fatal(err)
		}
	})
	cs, err := db.Chunks(ctx, "j")
	if err != nil {
		log.Fatal(err)
	}
	var read, fin time.Duration
	var readCPU, finCPU time.Duration
	for _, c := range cs {
		t0, c0 := time.Now(), cputime.Process()
		var outs []sluice.Outcome
		var roff int64
		err := db.ChunkRequests(ctx, "j", c.ID, func(r *sluice.Request) error {
			outs = append(outs, sluice.Outcome{Ordinal: r.Ordinal, State: sluice.RequestSucceeded, Offset: roff, Length: 700,
				CustomID: r.CustomID, BodyKey: r.BodyKey})
			roff += 700
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
		t1, c1 := time.Now(), cputime.Process()
		read += t1.Sub(t0)
		readCPU += c1 - c0
		d := *c
		d.State = sluice.ChunkDone
		if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: &d, From: sluice.ChunkPending, Outcomes: outs}); err != nil {
			log.Fatal(err)
		}
		fin += time.Since(t1)
		finCPU += cputime.Process() - c1
	}
	fmt.Printf("%-16s wall %6.2fs  cpu %6.2fs\n", "chunk requests", read.Seconds(), readCPU.Seconds())
	fmt.Printf("%-16s wall %6.2fs  cpu %6.2fs\n", "finish chunk", fin.Seconds(), finCPU.Seconds())
	phase("expected", func() {
		got := 0
		if err := db.Expected(ctx, "j", func(o int64, id string) bool { got++; return true }); err != nil || got != *n {
			log.Fatal(got, err)
		}
	})
	fmt.Printf("%-16s cpu %6.2fs\n", "total", (cputime.Process() - total0).Seconds())
	// The next plan in the state directory folds the answers into the
	// ledger (tracker/money.go foldLedger).
	phase("next plan", func() {
		p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j2", Provider: "openai", Input: "/y", Dir: *dir})
		if err != nil {
			log.Fatal(err)
		}
		p.Abort(ctx)
	})
	st, _ := os.Stat(filepath.Join(*dir, "state", "sluice.db"))
	if st != nil {
		fmt.Printf("db %.1f MB\n", float64(st.Size())/1e6)
	}
}

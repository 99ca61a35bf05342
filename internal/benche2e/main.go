// Command benche2e drives a built sluice binary end to end and measures it,
// for scripts/bench-e2e.sh and scripts/bench-polling.sh.
//
//	benche2e -mode e2e  -sluice BIN -input FILE -work DIR [-emulator local|separate] [-run-args "..."] [-emu-args "..."]
//	benche2e -mode poll -sluice BIN -input FILE -work DIR -batches N [-warmup 6m] [-window 2m] [-emu-args "--batch-time 24h"]
//	benche2e -mode e2e  ... [-postgres] [-s3] [-workers N]   (scripts/bench-scale.sh)
//
// e2e runs `sluice run` to completion and prints wall time, peak RSS and
// CPU of sluice (and of the emulator when it runs in its own process),
// requests per second, and the phases read from sluice's JSON log lines,
// each stamped by this driver as it arrives (zerolog writes every event
// unbuffered, so arrival time is event time to well under a millisecond).
//
// poll runs `sluice run` against a separate emulator whose batches take
// long, waits until N batches are submitted, then samples the sluice
// process's utime+stime from /proc over two windows: the first -window
// after the last submission (polls still ramping up from --poll-interval)
// and -window starting -warmup after it (polls at --max-poll-interval,
// the steady state of an overnight wait). Then it stops sluice with SIGINT
// (it exits 3, batches left running) and reads its peak RSS.
//
// With -postgres the job is tracked in a fresh database on the test
// PostgreSQL server (internal/testsrv: $SLUICE_TEST_POSTGRES, else a
// private server this process starts and takes down with it); with -s3 the
// input is put into a fresh bucket on the test S3 server ($SLUICE_TEST_S3,
// else a private versitygw) before the clock starts, and the run reads it
// from there, writes the output there and keeps its job files there
// (--store). -workers N starts N `sluice run --join` processes at once,
// each on a state directory of its own; the report then lists each
// process's CPU and peak RSS. Either way it gives the database's size
// after the run (the SQLite file, or pg_database_size).
//
// Both print one JSON object on stdout and a readable report on stderr.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

type options struct {
	mode, bin, input, work, emulator string
	runArgs, emuArgs                 []string
	batches                          int
	warmup, window                   time.Duration
	cpuprofile                       bool
	postgres, s3                     bool
	workers                          int
	out, state                       string // set by e2e: the run's --out and --state
}

func main() {
	var o options
	var runArgs, emuArgs string
	flag.StringVar(&o.mode, "mode", "e2e", "e2e (run to completion) or poll (measure CPU while batches wait)")
	flag.StringVar(&o.bin, "sluice", "", "sluice binary")
	flag.StringVar(&o.input, "input", "", "input file")
	flag.StringVar(&o.work, "work", "", "scratch directory (state, output, emulator data)")
	flag.StringVar(&o.emulator, "emulator", "separate", "local (--provider local, in-process) or separate (sluice emulate in its own process, --provider openai)")
	flag.StringVar(&runArgs, "run-args", "", "extra arguments of sluice run (space-separated)")
	flag.StringVar(&emuArgs, "emu-args", "", "extra arguments of sluice emulate (space-separated)")
	flag.IntVar(&o.batches, "batches", 0, "poll: batches to wait for before measuring")
	flag.DurationVar(&o.warmup, "warmup", 6*time.Minute, "poll: start of the steady-state window after the last submission")
	flag.DurationVar(&o.window, "window", 2*time.Minute, "poll: length of each measuring window")
	flag.BoolVar(&o.postgres, "postgres", false, "e2e: track the job in a fresh database on the test PostgreSQL server (--db)")
	flag.BoolVar(&o.s3, "s3", false, "e2e: input, output and job files (--store) in a fresh bucket on the test S3 server")
	flag.IntVar(&o.workers, "workers", 1, "e2e: sluice run processes on the job (--join when more than 1)")
	flag.BoolVar(&o.cpuprofile, "cpuprofile", false, "write CPU profiles of sluice (and the separate emulator) into -work via SLUICE_CPUPROFILE")
	flag.Parse()
	o.runArgs, o.emuArgs = strings.Fields(runArgs), strings.Fields(emuArgs)
	var err error
	switch {
	case o.bin == "" || o.input == "" || o.work == "":
		err = errors.New("-sluice, -input and -work are required")
	case o.mode == "e2e":
		err = e2e(o)
	case o.mode == "poll":
		err = poll(o)
	default:
		err = fmt.Errorf("-mode %q: want e2e or poll", o.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benche2e:", err)
		os.Exit(1)
	}
}

// event is one sluice log line, stamped on arrival.
type event struct {
	at    time.Duration // since sluice started
	msg   string
	chunk int64
	line  string
	cpu   float64 // utime+stime of the process so far, seconds
	peer  float64 // same, of the separate emulator (0 when in-process)
	hwm   float64 // the process's peak RSS so far, MB
}

// proc is a child process whose stderr is read line by line.
type proc struct {
	cmd   *exec.Cmd
	peer  int     // pid whose CPU is read beside each event (the emulator)
	peer0 float64 // its CPU when this process started
	start time.Time
	mu    sync.Mutex
	evs   []event
	seen  map[string]int
	cond  *sync.Cond
	done  chan struct{} // stderr drained
	log   *os.File
}

func startProc(logPath string, peer int, env []string, name string, args ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = nil
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout = lf
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, peer: peer, seen: map[string]int{}, done: make(chan struct{}), log: lf}
	p.cond = sync.NewCond(&p.mu)
	if peer > 0 {
		p.peer0, _ = procCPU(peer)
	}
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			at := time.Since(p.start)
			line := sc.Text()
			fmt.Fprintln(lf, line)
			ev := event{at: at, line: line}
			ev.cpu, _ = procCPU(cmd.Process.Pid)
			ev.hwm = procHWM(cmd.Process.Pid)
			if p.peer > 0 {
				ev.peer, _ = procCPU(p.peer)
			}
			var j struct {
				Message string `json:"message"`
				Chunk   int64  `json:"chunk"`
			}
			if json.Unmarshal([]byte(line), &j) == nil {
				ev.msg, ev.chunk = j.Message, j.Chunk
			}
			p.mu.Lock()
			p.evs = append(p.evs, ev)
			p.seen[ev.msg]++
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	return p, nil
}

// waitFor blocks until ok holds for the events so far, or stderr closes.
func (p *proc) waitFor(ok func(evs []event, seen map[string]int) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !ok(p.evs, p.seen) {
		select {
		case <-p.done:
			return ok(p.evs, p.seen)
		default:
		}
		p.cond.Wait()
	}
	return true
}

func (p *proc) wait() (wall time.Duration, ru *syscall.Rusage, err error) {
	<-p.done
	err = p.cmd.Wait()
	wall = time.Since(p.start)
	p.log.Close()
	if p.cmd.ProcessState != nil {
		ru, _ = p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	}
	return wall, ru, err
}

func cpuOf(ru *syscall.Rusage) (user, sys float64) {
	if ru == nil {
		return 0, 0
	}
	return tv(ru.Utime), tv(ru.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// emulator starts `sluice emulate` on a free loopback port.
func startEmulator(o options) (*proc, string, error) {
	var env []string
	if o.cpuprofile {
		env = append(env, "SLUICE_CPUPROFILE="+filepath.Join(o.work, "emulator.pprof"))
	}
	args := append([]string{"emulate", "--addr", "127.0.0.1:0", "--data", filepath.Join(o.work, "emulator")}, o.emuArgs...)
	p, err := startProc(filepath.Join(o.work, "emulator.log"), 0, env, o.bin, args...)
	if err != nil {
		return nil, "", err
	}
	var addr string
	p.waitFor(func(evs []event, _ map[string]int) bool {
		for _, e := range evs {
			if i := strings.Index(e.line, "listening on http://"); i >= 0 {
				addr = strings.Fields(e.line[i+len("listening on http://"):])[0]
				return true
			}
		}
		return false
	})
	if addr == "" {
		p.cmd.Process.Kill()
		p.wait()
		return nil, "", errors.New("the emulator did not start; see " + filepath.Join(o.work, "emulator.log"))
	}
	return p, addr, nil
}

func stopEmulator(p *proc) (*syscall.Rusage, error) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	_, ru, err := p.wait()
	return ru, err
}

func emulatorStats(addr string) map[string]any {
	resp, err := http.Get("http://" + addr + "/_emulator/stats")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return m
}

// sluiceArgs builds `sluice run` against the chosen emulator, writing to
// o.out (default DIR/out.jsonl) with its state in state (default
// DIR/state).
func sluiceArgs(o options, addr string) (args, env []string) {
	out, state := o.out, o.state
	if out == "" {
		out = filepath.Join(o.work, "out.jsonl")
	}
	if state == "" {
		state = filepath.Join(o.work, "state")
	}
	args = []string{"run", o.input, "--out", out, "--state", state, "--log-format", "json"}
	if o.emulator == "separate" {
		args = append(args, "--provider", "openai", "--base-url", "http://"+addr+"/v1")
		env = append(env, "OPENAI_API_KEY=bench")
	}
	args = append(args, o.runArgs...)
	if o.cpuprofile {
		env = append(env, "SLUICE_CPUPROFILE="+filepath.Join(o.work, "sluice.pprof"))
	}
	return args, env
}

// backend prepares where the job lives (-postgres, -s3): it returns the
// environment every sluice process gets, rewrites o's input, output and
// run arguments for S3, and returns the database size probe and a cleanup.
func backend(o *options) (env []string, dbSize func() (int64, error), outLines func() (int64, error), cleanup func(), err error) {
	cleanup = func() {}
	o.out = filepath.Join(o.work, "out.jsonl")
	outLines = func() (int64, error) {
		f, err := os.Open(o.out)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return countLines(f)
	}
	dbSize = func() (int64, error) { // the SQLite file and its journal
		var n int64
		ms, _ := filepath.Glob(filepath.Join(o.work, "state", tracker.DBName+"*"))
		for _, m := range ms {
			if st, err := os.Stat(m); err == nil {
				n += st.Size()
			}
		}
		if len(ms) == 0 {
			return 0, errors.New("no SQLite database in " + filepath.Join(o.work, "state"))
		}
		return n, nil
	}
	if o.postgres {
		dsn, drop, err := testsrv.NewPostgresDatabase()
		if err != nil {
			return nil, nil, nil, cleanup, fmt.Errorf("PostgreSQL: %w", err)
		}
		cleanup = func() { drop() }
		env = append(env, "SLUICE_DB="+dsn)
		dbSize = func() (int64, error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return 0, err
			}
			defer conn.Close(ctx)
			var n int64
			err = conn.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n)
			return n, err
		}
	} else {
		env = append(env, "SLUICE_DB=")
	}
	if !o.s3 {
		return append(env, "SLUICE_STORE="), dbSize, outLines, cleanup, nil
	}
	endpoint, bucket, err := testsrv.NewS3Bucket()
	if err != nil {
		return nil, nil, nil, cleanup, fmt.Errorf("S3: %w", err)
	}
	client, err := testsrv.S3Client(context.Background(), endpoint)
	if err != nil {
		return nil, nil, nil, cleanup, err
	}
	// The input goes into the bucket before the clock starts; its name
	// keeps its extension (.gz, .zst).
	f, err := os.Open(o.input)
	if err != nil {
		return nil, nil, nil, cleanup, err
	}
	defer f.Close()
	key := "in-" + filepath.Base(o.input)
	if _, err := client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: f}); err != nil {
		return nil, nil, nil, cleanup, fmt.Errorf("put the input into s3://%s/%s: %w", bucket, key, err)
	}
	o.input = "s3://" + bucket + "/" + key
	o.out = "s3://" + bucket + "/out.jsonl"
	o.runArgs = append(o.runArgs, "--store", "s3://"+bucket+"/state")
	outLines = func() (int64, error) {
		obj, err := client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("out.jsonl")})
		if err != nil {
			return 0, err
		}
		defer obj.Body.Close()
		return countLines(obj.Body)
	}
	return append(env, testsrv.S3Env()...), dbSize, outLines, cleanup, nil
}

func countLines(r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func e2e(o options) error {
	if o.emulator != "separate" && o.emulator != "local" {
		return fmt.Errorf("-emulator %q: want local or separate", o.emulator)
	}
	if o.workers < 1 || (o.workers > 1 && o.emulator != "separate") {
		return errors.New("-workers: want 1, or more with -emulator separate (--join refuses --provider local)")
	}
	benv, dbSize, outLines, cleanup, err := backend(&o)
	defer cleanup()
	if err != nil {
		return err
	}
	var empty int64 // an empty PostgreSQL database's catalog, not the job's
	if o.postgres {
		if empty, err = dbSize(); err != nil {
			return fmt.Errorf("database size: %w", err)
		}
	}
	var emu *proc
	var addr string
	if o.emulator == "separate" {
		if emu, addr, err = startEmulator(o); err != nil {
			return err
		}
	}
	start := time.Now()
	ps, err := startWorkers(o, benv, addr, emu)
	if err != nil {
		return err
	}
	r := report{Mode: o.emulator}
	walls, runErr := r.workers(ps)
	r.WallS = time.Since(start).Seconds()
	var emuRU *syscall.Rusage
	if emu != nil {
		r.Stats = emulatorStats(addr)
		emuRU, _ = stopEmulator(emu)
	}
	if runErr != nil {
		return runErr
	}
	if emuRU != nil {
		r.EmulatorUserS, r.EmulatorSysS = cpuOf(emuRU)
		r.EmulatorPeakRSSMB = float64(emuRU.Maxrss) / 1024
	}
	r.timeline(o, ps, walls, start)
	if r.DBBytes, err = dbSize(); err != nil {
		return fmt.Errorf("database size: %w", err)
	}
	r.DBBytesEmpty = empty
	if r.Requests > 0 {
		r.DBBytesPerMillion = math.Round(float64(r.DBBytes-empty) * 1e6 / float64(r.Requests))
	}
	if r.OutputLines, err = outLines(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	r.Backend = backendName(o)
	return r.print()
}

// startWorkers starts the sluice processes of a run: one, or o.workers
// joining the same job (each with a state directory of its own when the
// job is tracked in PostgreSQL). The emulator's CPU, if it runs apart, is
// sampled beside the first process's events.
func startWorkers(o options, benv []string, addr string, emu *proc) ([]*proc, error) {
	peer := 0
	if emu != nil {
		peer = emu.cmd.Process.Pid
	}
	ps := make([]*proc, o.workers)
	for i := range ps {
		po := o
		logName := "sluice.log"
		if o.workers > 1 {
			po.runArgs = append(append([]string{}, o.runArgs...), "--join")
			logName = fmt.Sprintf("sluice-%d.log", i+1)
			if o.postgres { // a machine of its own: only the database and store are shared
				po.state = filepath.Join(o.work, fmt.Sprintf("state-%d", i+1))
			}
		}
		args, env := sluiceArgs(po, addr)
		if i > 0 {
			peer = 0
		}
		var err error
		if ps[i], err = startProc(filepath.Join(o.work, logName), peer, append(benv, env...), o.bin, args...); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// workers waits for each sluice process and adds it to the report; it
// returns their wall times and the first failure.
func (r *report) workers(ps []*proc) ([]time.Duration, error) {
	var runErr error
	var walls []time.Duration
	for _, p := range ps {
		wall, ru, err := p.wait()
		walls = append(walls, wall)
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("sluice run: %v; see %s", err, p.log.Name())
		}
		w := worker{Log: filepath.Base(p.log.Name()), WallS: round3(wall.Seconds())}
		w.UserS, w.SysS = cpuOf(ru)
		if ru != nil {
			w.PeakRSSMB = float64(ru.Maxrss) / 1024
		}
		w.Planned, w.Merged = p.seen["job planned"] > 0, p.seen["job done"] > 0
		r.Workers = append(r.Workers, w)
		r.SluiceUserS += w.UserS
		r.SluiceSysS += w.SysS
		r.SluicePeakRSSMB = max(r.SluicePeakRSSMB, w.PeakRSSMB)
	}
	return walls, runErr
}

// timeline reads the phases of the run from the processes' events.
func (r *report) timeline(o options, ps []*proc, walls []time.Duration, start time.Time) {
	if o.workers == 1 {
		end := event{at: walls[0], cpu: r.SluiceUserS + r.SluiceSysS, peer: r.EmulatorUserS + r.EmulatorSysS}
		r.phases(ps[0].evs, event{peer: ps[0].peer0}, end)
		return
	}
	// The workers' events on one timeline; CPU per phase is a
	// per-process figure, so phases give wall time only here.
	var evs []event
	for _, p := range ps {
		for _, e := range p.evs {
			e.at += p.start.Sub(start)
			e.cpu, e.peer = 0, 0
			evs = append(evs, e)
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	r.Mode = fmt.Sprintf("%s, %d workers", o.emulator, o.workers)
	r.phases(evs, event{}, event{at: time.Since(start)})
	r.WallS = round3(r.WallS)
}

// backendName names where the run kept its job: the tracker's database
// and the file store.
func backendName(o options) string {
	name := "sqlite"
	if o.postgres {
		name = "postgres"
	}
	if o.s3 {
		return name + " + s3"
	}
	return name + " + local files"
}

// worker is one sluice process of a run.
type worker struct {
	Log       string  `json:"log"`
	WallS     float64 `json:"wall_s"`
	UserS     float64 `json:"user_s"`
	SysS      float64 `json:"sys_s"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	Planned   bool    `json:"planned"`
	Merged    bool    `json:"merged"`
}

type report struct {
	Mode              string   `json:"emulator"`
	Backend           string   `json:"backend,omitempty"`
	Workers           []worker `json:"workers,omitempty"`
	DBBytes           int64    `json:"db_bytes,omitempty"`
	DBBytesEmpty      int64    `json:"db_bytes_empty,omitempty"` // before the run (PostgreSQL's catalog)
	DBBytesPerMillion float64  `json:"db_bytes_per_million_requests,omitempty"`
	OutputLines       int64    `json:"output_lines,omitempty"`
	Requests          int64    `json:"requests"`
	Batches           int      `json:"batches"`
	WallS             float64  `json:"wall_s"`
	RequestsPerS      float64  `json:"requests_per_s"`
	SluiceUserS       float64  `json:"sluice_user_s"`
	SluiceSysS        float64  `json:"sluice_sys_s"`
	SluicePeakRSSMB   float64  `json:"sluice_peak_rss_mb"`
	EmulatorUserS     float64  `json:"emulator_user_s,omitempty"`
	EmulatorSysS      float64  `json:"emulator_sys_s,omitempty"`
	EmulatorPeakRSSMB float64  `json:"emulator_peak_rss_mb,omitempty"`
	// OverheadS estimates the wall time that is not the emulator's own
	// work (separate emulator only): per phase, wall time that sluice's
	// own CPU does not explain is put down to the emulator, up to the
	// emulator's CPU in that phase, and taken off.
	OverheadS float64        `json:"overhead_estimate_s,omitempty"`
	Phases    []phase        `json:"phases"`
	PerBatch  map[string]dur `json:"per_batch"`
	Stats     map[string]any `json:"emulator_stats,omitempty"`
}

type phase struct {
	Name         string  `json:"name"`
	StartS       float64 `json:"start_s"`
	EndS         float64 `json:"end_s"`
	SluiceCPUS   float64 `json:"sluice_cpu_s"`
	EmulatorCPUS float64 `json:"emulator_cpu_s,omitempty"`
	// PeakRSSMB is sluice's peak RSS by the phase's last event: the phase
	// in which it grows is the one that set it.
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
	What      string  `json:"what"`
}

// dur sums per-batch intervals: total, mean and max seconds.
type dur struct {
	N     int     `json:"n"`
	SumS  float64 `json:"sum_s"`
	MeanS float64 `json:"mean_s"`
	MaxS  float64 `json:"max_s"`
}

// phases reads the timeline. The dispatcher overlaps uploads, creates,
// polls and downloads of different batches, so the wall-clock phases are
// spans from the first to the last event of a kind, and the per-batch
// intervals are summed separately.
func (r *report) phases(evs []event, start, end event) {
	first := map[string]event{}
	last := map[string]event{}
	type chunkT struct{ uploaded, submitted, recorded time.Duration }
	chunks := map[int64]*chunkT{}
	for _, e := range evs {
		if _, ok := first[e.msg]; !ok {
			first[e.msg] = e
		}
		last[e.msg] = e
		c := chunks[e.chunk]
		if c == nil {
			c = &chunkT{-1, -1, -1}
			chunks[e.chunk] = c
		}
		switch e.msg {
		case "chunk uploaded":
			c.uploaded = e.at
		case "batch submitted":
			c.submitted = e.at
			r.Batches++
		case "chunk recorded":
			c.recorded = e.at
		case "job planned":
			var j struct{ Requests int64 }
			json.Unmarshal([]byte(e.line), &j)
			r.Requests = j.Requests
		}
	}
	add := func(name string, a, b event, what string) {
		r.Phases = append(r.Phases, phase{Name: name, StartS: round3(a.at.Seconds()), EndS: round3(b.at.Seconds()),
			SluiceCPUS: round3(b.cpu - a.cpu), EmulatorCPUS: round3(b.peer - a.peer), PeakRSSMB: round3(b.hwm), What: what})
	}
	planned := first["job planned"]
	add("plan", start, planned, "start to \"job planned\": split, validate, chunk files, tracker rows")
	add("submit", planned, last["batch submitted"], "\"job planned\" to the last \"batch submitted\" (uploads, creates)")
	add("  upload", planned, last["chunk uploaded"], "\"job planned\" to the last \"chunk uploaded\" (overlaps creates)")
	add("wait+download", last["batch submitted"], last["chunk recorded"], "last \"batch submitted\" to the last \"chunk recorded\" (polls, downloads, conclude)")
	add("merge", first["merging results"], last["job done"], "\"merging results\" to \"job done\"")
	add("exit", last["job done"], end, "\"job done\" to process exit")
	if r.Mode == "separate" && len(r.Workers) <= 1 {
		o := end.at.Seconds()
		for _, p := range r.Phases {
			if strings.HasPrefix(p.Name, " ") {
				continue // a part of the phase before it
			}
			o -= max(0, min(p.EmulatorCPUS, p.EndS-p.StartS-p.SluiceCPUS))
		}
		r.OverheadS = round3(o)
	}
	r.PerBatch = map[string]dur{}
	acc := func(name string, d time.Duration) {
		x := r.PerBatch[name]
		x.N++
		x.SumS += d.Seconds()
		x.MaxS = max(x.MaxS, d.Seconds())
		r.PerBatch[name] = x
	}
	for id, c := range chunks {
		if id == 0 {
			continue
		}
		if c.uploaded >= 0 && c.submitted >= 0 {
			acc("create (uploaded to submitted)", c.submitted-c.uploaded)
		}
		if c.submitted >= 0 && c.recorded >= 0 {
			acc("batch (submitted to recorded)", c.recorded-c.submitted)
		}
	}
	for k, x := range r.PerBatch {
		x.MeanS = x.SumS / float64(x.N)
		x.SumS, x.MeanS, x.MaxS = round3(x.SumS), round3(x.MeanS), round3(x.MaxS)
		r.PerBatch[k] = x
	}
	r.WallS = round3(r.WallS)
	if r.WallS > 0 {
		r.RequestsPerS = math.Round(float64(r.Requests) / r.WallS)
	}
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func (r *report) print() error {
	w := os.Stderr
	fmt.Fprintf(w, "sluice run, emulator %s: %d requests in %d batches\n", r.Mode, r.Requests, r.Batches)
	fmt.Fprintf(w, "  wall %.2fs, %.0f requests/s; sluice CPU %.2fs user + %.2fs sys, peak RSS %.1f MB\n",
		r.WallS, r.RequestsPerS, r.SluiceUserS, r.SluiceSysS, r.SluicePeakRSSMB)
	if r.Backend != "" {
		fmt.Fprintf(w, "  %s: database %.1f MB after the run (%.1f MB empty) = %.1f MB per million requests; output %d lines\n",
			r.Backend, float64(r.DBBytes)/1e6, float64(r.DBBytesEmpty)/1e6, r.DBBytesPerMillion/1e6, r.OutputLines)
	}
	if len(r.Workers) > 1 {
		for _, x := range r.Workers {
			role := ""
			if x.Planned {
				role += " planned"
			}
			if x.Merged {
				role += " merged"
			}
			fmt.Fprintf(w, "  worker %s: wall %.2fs, CPU %.2fs user + %.2fs sys, peak RSS %.1f MB%s\n", x.Log, x.WallS, x.UserS, x.SysS, x.PeakRSSMB, role)
		}
	}
	if r.Mode == "separate" {
		fmt.Fprintf(w, "  emulator process: CPU %.2fs user + %.2fs sys, peak RSS %.1f MB\n", r.EmulatorUserS, r.EmulatorSysS, r.EmulatorPeakRSSMB)
		fmt.Fprintf(w, "  overhead estimate (wall minus the emulator's work on the critical path): %.1fs\n", r.OverheadS)
	}
	fmt.Fprintf(w, "  %-14s %8s  %-20s %10s %10s %9s\n", "phase", "wall", "from .. to (s)", "sluice CPU", "emu CPU", "peak RSS")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "  %-14s %7.2fs  [%7.2f .. %7.2f] %9.2fs %9.2fs %6.0f MB  %s\n", p.Name, p.EndS-p.StartS, p.StartS, p.EndS, p.SluiceCPUS, p.EmulatorCPUS, p.PeakRSSMB, p.What)
	}
	keys := make([]string, 0, len(r.PerBatch))
	for k := range r.PerBatch {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x := r.PerBatch[k]
		fmt.Fprintf(w, "  per batch, %s: %d batches, mean %.2fs, max %.2fs\n", k, x.N, x.MeanS, x.MaxS)
	}
	if r.Stats != nil {
		fmt.Fprintf(w, "  emulator stats: requests_processed %v, requests_processed_more_than_once %v\n",
			r.Stats["requests_processed"], r.Stats["requests_processed_more_than_once"])
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// procCPU reads utime+stime of pid in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// procHWM reads VmHWM (peak RSS) of pid in MB.
func procHWM(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

type pollReport struct {
	Batches          int     `json:"batches"`
	SubmitS          float64 `json:"submit_s"`
	RampWindowS      float64 `json:"ramp_window_s"`
	RampCPUS         float64 `json:"ramp_cpu_s"`
	RampCalls        float64 `json:"ramp_api_calls"`
	SteadyStartS     float64 `json:"steady_start_s"`
	SteadyWindowS    float64 `json:"steady_window_s"`
	SteadyCPUS       float64 `json:"steady_cpu_s"`
	SteadyCalls      float64 `json:"steady_api_calls"`
	SteadyCPUPerHour float64 `json:"steady_cpu_s_per_hour"`
	RampCPUPerHour   float64 `json:"ramp_cpu_s_per_hour"`
	SubmitCPUS       float64 `json:"submit_cpu_s"`
	PeakRSSMB        float64 `json:"sluice_peak_rss_mb"`
	EmulatorCPUS     float64 `json:"emulator_cpu_s"`
}

func poll(o options) error {
	if o.batches <= 0 {
		return errors.New("-batches is required in poll mode")
	}
	o.emulator = "separate"
	emu, addr, err := startEmulator(o)
	if err != nil {
		return err
	}
	defer func() {
		if emu != nil {
			stopEmulator(emu)
		}
	}()
	args, env := sluiceArgs(o, addr)
	p, err := startProc(filepath.Join(o.work, "sluice.log"), emu.cmd.Process.Pid, env, o.bin, args...)
	if err != nil {
		return err
	}
	pid := p.cmd.Process.Pid
	if !p.waitFor(func(_ []event, seen map[string]int) bool { return seen["batch submitted"] >= o.batches }) {
		_, _, err := p.wait()
		return fmt.Errorf("sluice ended before submitting %d batches (%v); see %s", o.batches, err, filepath.Join(o.work, "sluice.log"))
	}
	var r pollReport
	r.Batches = o.batches
	t0 := time.Now()
	r.SubmitS = round3(t0.Sub(p.start).Seconds())
	c0, err := procCPU(pid)
	if err != nil {
		return err
	}
	r.SubmitCPUS = c0
	fmt.Fprintf(os.Stderr, "all %d batches submitted after %.1fs (sluice CPU so far %.2fs); measuring %s now and %s from +%s\n",
		o.batches, r.SubmitS, c0, o.window, o.window, o.warmup)
	// sluice logs nothing per poll of a running batch: count calls at the emulator.
	calls := func() float64 {
		v, _ := emulatorStats(addr)["api_calls"].(float64)
		return v
	}
	a0 := calls()
	time.Sleep(o.window)
	c1, _ := procCPU(pid)
	r.RampCalls = calls() - a0
	r.RampWindowS = round3(time.Since(t0).Seconds())
	r.RampCPUS = round3(c1 - c0)
	if d := o.warmup - time.Since(t0); d > 0 {
		time.Sleep(d)
	}
	t2 := time.Now()
	c2, _ := procCPU(pid)
	a2 := calls()
	time.Sleep(o.window)
	c3, err := procCPU(pid)
	r.SteadyCalls = calls() - a2
	if err != nil {
		return fmt.Errorf("sluice exited while waiting: %w; see %s", err, filepath.Join(o.work, "sluice.log"))
	}
	r.SteadyStartS = round3(t2.Sub(t0).Seconds())
	r.SteadyWindowS = round3(time.Since(t2).Seconds())
	r.SteadyCPUS = round3(c3 - c2)
	r.SteadyCPUPerHour = round3(r.SteadyCPUS / r.SteadyWindowS * 3600)
	r.RampCPUPerHour = round3(r.RampCPUS / r.RampWindowS * 3600)
	r.PeakRSSMB = procHWM(pid)
	p.cmd.Process.Signal(syscall.SIGINT)
	_, ru, _ := p.wait() // exit 3: stopped with batches running
	if ru != nil {
		r.PeakRSSMB = float64(ru.Maxrss) / 1024
	}
	emuRU, _ := stopEmulator(emu)
	emu = nil
	u, s := cpuOf(emuRU)
	r.EmulatorCPUS = round3(u + s)
	fmt.Fprintf(os.Stderr, "%d live batches: ramp window (first %.0fs after submitting): %.2f CPU s = %.0f CPU s/hour, %.0f API calls (%.1f/s)\n",
		r.Batches, r.RampWindowS, r.RampCPUS, r.RampCPUPerHour, r.RampCalls, r.RampCalls/r.RampWindowS)
	fmt.Fprintf(os.Stderr, "  steady window (%.0fs from +%.0fs): %.2f CPU s = %.1f CPU s/hour, %.0f API calls (%.1f/s)\n",
		r.SteadyWindowS, r.SteadyStartS, r.SteadyCPUS, r.SteadyCPUPerHour, r.SteadyCalls, r.SteadyCalls/r.SteadyWindowS)
	fmt.Fprintf(os.Stderr, "  sluice peak RSS %.1f MB; submitting took %.1fs and %.2f CPU s; emulator CPU %.2fs in all\n",
		r.PeakRSSMB, r.SubmitS, r.SubmitCPUS, r.EmulatorCPUS)
	return json.NewEncoder(os.Stdout).Encode(r)
}

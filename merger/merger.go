// Package merger turns the results files of a job's chunk attempts into the
// job's one output file: one line per input request, in input order by
// default, plus the errors file, with bounded memory and crash safety.
//
// A results file (wire.AppendResultRecord framing: "<ordinal>\t<s|f>\t<json>\n")
// holds the final records of one chunk attempt in any order. In input order
// each file is read once to build an index of (ordinal, offset, length)
// entries (24 bytes a record). Small files are kept in memory. A file whose
// ordinals are dense (a chunk's results, shuffled by the provider) gets a
// table from ordinal to entry instead of a sort, and its records are read
// back a window at a time: one sequential pass over the file per window of
// up to 16 MiB, at most 8 passes a file; when the window pool (48 MiB for
// the merge, half of what is left to each window) cannot give a file that
// much, its records are read one ReadAt each. Other files have their index sorted and are read back in ordinal
// order with ReadAt, one call per run of records that lie back to back. A
// k-way merge by ordinal then joins the files; a file's bytes are read only
// when its records come up, so files whose ordinals follow each other hold
// a window one at a time. With more files
// than MaxOpen, or more index than the memory budget, groups of files are
// first merged into intermediate runs (same framing) under TempDir, and runs
// are merged with the same fan-in until one final merge remains.
//
// Memory: the indexes (and files kept whole) of the files merged at once
// stay under indexBudget (48 MiB, about 2 million records; past it a group
// becomes a run), plus a 256 KiB read window per open file, the windows of
// dense files (at most 48 MiB for all files of a merge) and a few 1 MiB
// write buffers. Lines
// are written by a goroutine (which also compresses); on Linux the
// writeback of the temp file is started every 32 MiB, so the final fsync is
// short, and written ranges are dropped from the page cache.
//
// What is checked:
//
//   - Order "input": the merged stream is zipped with Config.Expected. Every
//     expected ordinal must have exactly one record, whose line's custom_id
//     equals the expected one; records with ordinals Expected does not yield
//     are unknown. Without Expected, ordinals 0..Total-1 are checked, ids not.
//   - Order "any": files are copied as they come. A bitmap (one bit per
//     request) finds doubled ordinals and ordinals >= Total; at the end one
//     pass over Expected names the missing requests and compares an
//     order-independent sum of hash(ordinal, custom_id) over the records with
//     the same sum over Expected. Only if the sums differ (some line carries
//     a custom_id that is not its request's) does a second, ordered pass
//     (verification only) name the culprits.
//
// Outputs are written to temp files beside their final names, fsynced and
// renamed (errors file first, so an existing output always has its errors
// file); on any error or invariant violation nothing is renamed and the temp
// files are removed. Temp files and run directories left by a killed merge
// to the same output are removed when the next one starts.
package merger

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"strconv"
)

// Config says what to merge and where.
type Config struct {
	// Output is the final path; compressed when the name ends in .gz or .zst.
	Output string
	// ErrorsPath receives every failed ('f') record's line too (compressed
	// when the name ends in .gz or .zst); "" means Output's name with
	// "errors" inserted: out.jsonl -> out.errors.jsonl, out.jsonl.zst ->
	// out.errors.jsonl.zst.
	ErrorsPath string
	// Order is "input" (default: output in ordinal order) or "any" (files
	// copied as they come: cheaper).
	Order string
	// Files are the results files, each bounded by one chunk's size,
	// records within a file in any order.
	Files []string
	// Total is the number of requests of the job (ordinals 0..Total-1).
	Total int64
	// Expected yields (ordinal, custom_id) for every request in ordinal
	// order: exactly 0..Total-1, else Merge fails. nil checks ordinals
	// only. It is called once (in order "any" a second time only to name
	// the culprits of a custom_id mismatch).
	Expected func(yield func(ordinal int64, customID string) bool) error
	// TempDir holds intermediate runs; default: Output's directory.
	TempDir string
	// MaxOpen is the fan-in of the k-way merge (default 64, at least 2).
	MaxOpen int
	// Rejected is the file of input lines rejected as invalid
	// (splitter.RejectedResults; "" or absent: none). They are no requests:
	// each goes to the errors file, and with a custom_id to the output too,
	// in its input place (order "input"; first in order "any").
	Rejected string
}

// Summary tells what a merge wrote.
type Summary struct {
	Lines, Succeeded, Failed int64
	Rejected                 int64 // input lines rejected as invalid (Config.Rejected), in the errors file
	OutputBytes              int64 // size of the output file on disk
	Output, Errors           string
}

// Memory limits (variables for tests).
var (
	// indexBudget bounds the indexes (and kept files) of the files merged
	// at once; past it a group of files is merged into a run first.
	indexBudget int64 = 48 << 20
	// keepMax: files up to this size are read into memory whole (within
	// keepBudget for all files of a group) rather than read back with ReadAt.
	keepMax    int64 = 4 << 20
	keepBudget int64 = 16 << 20
)

type job struct {
	cfg     Config
	out     string
	errs    string
	tempDir string
	maxOpen int
	runDir  string
	nRuns   int
	br      *bufio.Reader
}

// Merge merges cfg.Files into cfg.Output and the errors file. It returns an
// *InvariantError when the results are not exactly one per request; nothing
// is written then.
func Merge(ctx context.Context, cfg Config) (*Summary, error) {
	m := &job{cfg: cfg, out: cfg.Output, errs: cfg.ErrorsPath, tempDir: cfg.TempDir, maxOpen: cfg.MaxOpen}
	if m.out == "" {
		return nil, errors.New("merger: no output path")
	}
	if m.errs == "" {
		m.errs = errorsName(m.out)
	}
	if filepath.Clean(m.errs) == filepath.Clean(m.out) {
		return nil, errors.New("merger: errors path is the output path")
	}
	if m.tempDir == "" {
		m.tempDir = filepath.Dir(m.out)
	}
	if m.maxOpen == 0 {
		m.maxOpen = 64
	}
	m.maxOpen = max(m.maxOpen, 2)
	if cfg.Total < 0 {
		return nil, errors.New("merger: negative Total")
	}
	removeStaleTemps(m.out)
	removeStaleTemps(m.errs)
	removeStaleRunDirs(m.tempDir, m.out)
	defer func() {
		if m.runDir != "" {
			os.RemoveAll(m.runDir)
		}
	}()
	switch cfg.Order {
	case "", "input":
		return m.mergeInput(ctx)
	case "any":
		return m.mergeAny(ctx)
	}
	return nil, fmt.Errorf("merger: unknown order %q (want input or any)", cfg.Order)
}

func (m *job) createWriters() (*writers, error) {
	out, err := createAtomic(m.out)
	if err != nil {
		return nil, err
	}
	errs, err := createAtomic(m.errs)
	if err != nil {
		out.abort()
		return nil, err
	}
	return &writers{out: out, errs: errs}, nil
}

// finish commits the outputs after a clean merge.
func (m *job) finish(w *writers) (*Summary, error) {
	size, err := w.out.finish()
	if err == nil {
		_, err = w.errs.finish()
	}
	if err == nil {
		err = w.errs.commit()
	}
	if err == nil {
		err = w.out.commit()
	}
	if err != nil {
		w.abort()
		return nil, err
	}
	return &Summary{Lines: w.out.lines, Succeeded: w.succeeded, Failed: w.failed, Rejected: w.rejected,
		OutputBytes: size, Output: m.out, Errors: m.errs}, nil
}

func (m *job) mergeInput(ctx context.Context) (*Summary, error) {
	var w *writers
	v := &verifier{}
	err := m.zipInput(ctx, v, func() (err error) {
		w, err = m.createWriters()
		v.w = w
		return err
	})
	if err != nil {
		v.w.abort()
		return nil, err
	}
	if v.inv.any() {
		return nil, &v.inv
	}
	return m.finish(w)
}

// verifyOrdered checks the invariant in input order without writing.
func (m *job) verifyOrdered(ctx context.Context) (*InvariantError, error) {
	v := &verifier{}
	if err := m.zipInput(ctx, v, nil); err != nil {
		return nil, err
	}
	return &v.inv, nil
}

// zipInput walks the results in input order through v (m.zip): the
// sources planned, merged by ordinal, and closed after. open, when set,
// runs once the sources are open, before the walk.
func (m *job) zipInput(ctx context.Context, v *verifier, open func() error) error {
	srcs, err := m.plan(ctx)
	defer closeAll(srcs)
	if err != nil {
		return err
	}
	it, err := newMergeIter(srcs)
	if err != nil {
		return err
	}
	if open != nil {
		if err := open(); err != nil {
			return err
		}
	}
	return m.zip(ctx, it, v)
}

func closeAll(srcs []source) {
	for _, s := range srcs {
		s.close()
	}
}

// plan indexes the files and returns at most maxOpen sources for the final
// merge, merging groups of files and then runs into runs as needed.
func (m *job) plan(ctx context.Context) (final []source, err error) {
	var group []source
	var runs []string
	defer func() {
		if err != nil {
			closeAll(group)
			for _, r := range runs {
				os.Remove(r)
			}
		}
	}()
	m.br = bufio.NewReaderSize(nil, indexBuffer)
	pool := newWindowPool()
	var groupMem, kept int64
	flush := func() error {
		run, err := m.writeRun(ctx, group)
		group, groupMem, kept = nil, 0, 0
		runs = append(runs, run)
		return err
	}
	for _, name := range m.cfg.Files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("merger: %w", err)
		}
		keep := st.Size() <= keepMax && kept+st.Size() <= keepBudget
		fs, err := indexFile(name, keep, m.br, pool)
		if err != nil {
			return nil, err
		}
		if len(group) > 0 && (len(group) >= m.maxOpen || groupMem+fs.memory() > indexBudget) {
			if err := flush(); err != nil {
				fs.close()
				return nil, err
			}
		}
		group = append(group, fs)
		groupMem += fs.memory()
		if keep {
			kept += st.Size()
		}
	}
	m.br = nil
	if len(runs) == 0 {
		return group, nil
	}
	if len(runs)+len(group) > m.maxOpen && len(group) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	for len(runs) > m.maxOpen-len(group) {
		// Merge just enough runs to leave room for the final fan-in.
		k := min(m.maxOpen, len(runs)-(m.maxOpen-len(group))+1)
		srcs := make([]source, 0, k)
		for _, r := range runs[:k] {
			rs, err := openRun(r)
			if err != nil {
				closeAll(srcs)
				return nil, err
			}
			srcs = append(srcs, rs)
		}
		runs = runs[k:]
		run, err := m.writeRun(ctx, srcs)
		runs = append(runs, run)
		if err != nil {
			return nil, err
		}
	}
	for i, r := range runs {
		rs, err := openRun(r)
		if err != nil {
			runs = runs[i:]
			return nil, err
		}
		group = append(group, rs)
	}
	return group, nil
}

// writeRun merges srcs into a new run file and closes them (which removes
// runs).
func (m *job) writeRun(ctx context.Context, srcs []source) (name string, err error) {
	defer closeAll(srcs)
	if m.runDir == "" {
		if m.runDir, err = os.MkdirTemp(m.tempDir, runDirPrefix(m.out)); err != nil {
			return "", fmt.Errorf("merger: %w", err)
		}
	}
	m.nRuns++
	name = filepath.Join(m.runDir, "run-"+strconv.Itoa(m.nRuns))
	f, err := os.Create(name)
	if err != nil {
		return "", fmt.Errorf("merger: %w", err)
	}
	defer func() {
		if e := f.Close(); err == nil && e != nil {
			err = fmt.Errorf("merger: %w", e)
		}
	}()
	it, err := newMergeIter(srcs)
	if err != nil {
		return name, err
	}
	bw := bufio.NewWriterSize(f, writeBuffer)
	for n := 0; ; n++ {
		r, err := it.next()
		if err != nil {
			return name, err
		}
		if r == nil {
			break
		}
		bw.Write(r.raw)
		bw.WriteByte('\n')
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return name, err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return name, fmt.Errorf("merger: write run: %w", err)
	}
	return name, nil
}

func (m *job) mergeAny(ctx context.Context) (*Summary, error) {
	w, err := m.createWriters()
	if err != nil {
		return nil, err
	}
	v := &verifier{w: w}
	rej, err := openRejected(m.cfg.Rejected)
	if err != nil {
		v.w.abort()
		return nil, err
	}
	err = rej.emitBefore(ctx, -1, v)
	rej.close()
	if err != nil {
		v.w.abort()
		return nil, err
	}
	if err := m.copyAny(ctx, v); err != nil {
		v.w.abort()
		return nil, err
	}
	if v.inv.any() {
		return nil, &v.inv
	}
	return m.finish(w)
}

// copyAny copies the files as they come, checking ordinals with a bitmap,
// then checks missing requests and custom_ids against Expected.
func (m *job) copyAny(ctx context.Context, v *verifier) error {
	total := m.cfg.Total
	bits := make([]uint64, (total+63)/64)
	seed := maphash.MakeSeed()
	var sum, want uint64
	for _, name := range m.cfg.Files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("merger: %w", err)
		}
		sc := newScanner(name, f, indexBuffer)
		for {
			ok, err := sc.next()
			if err != nil || !ok {
				f.Close()
				if err != nil {
					return err
				}
				break
			}
			r := &sc.cur
			if err := v.tick(ctx); err != nil {
				f.Close()
				return err
			}
			if r.ord >= total {
				v.inv.unknown(recName(r))
				v.violated()
				continue
			}
			word, bit := &bits[r.ord>>6], uint64(1)<<(r.ord&63)
			if *word&bit != 0 {
				v.inv.doubled(recName(r))
				v.violated()
				continue
			}
			*word |= bit
			if m.cfg.Expected != nil {
				id, _ := customID(r.json)
				sum += pairHash(seed, r.ord, id)
			}
			if err := v.emit(r); err != nil {
				f.Close()
				return err
			}
		}
	}
	err := m.expected(func(ord int64, id string) (bool, error) {
		if bits[ord>>6]&(1<<(ord&63)) == 0 {
			v.inv.missing(name(id, ord))
			v.violated()
		} else if m.cfg.Expected != nil {
			want += pairHash(seed, ord, id)
		}
		return true, nil
	})
	if err != nil || sum == want {
		return err
	}
	// Some line carries another request's custom_id: name them.
	inv, err := m.verifyOrdered(ctx)
	if err != nil {
		return err
	}
	v.inv = *inv
	v.violated()
	return nil
}

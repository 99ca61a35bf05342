package merger

import (
	"bufio"
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/wire"
)

// FuzzParseRecords checks that the merger's three readers of results files
// (the sequential scanner, the index pass with records kept in memory and
// the one read back with ReadAt) agree with wire.ParseResultRecord on any
// file: the same records, or an error on the same malformed line.
func FuzzParseRecords(f *testing.F) {
	seeds := []string{
		"",
		"0\ts\t{}\n",
		"0\ts\t{\"custom_id\":\"a\"}\n1\tf\t{\"custom_id\":\"b\"}\n",
		"2\tf\t{}\n0\ts\t{}\n1\ts\t{}",         // no final newline
		"+7\ts\t{}\n-0\ts\t{}\n007\tf\tx\ty\n", // signs, zeros, tabs in the line
		"-1\ts\t{}\n",
		"9223372036854775807\ts\t{}\n9223372036854775808\ts\t{}\n",
		"1\ts\t\n",
		"1\tx\t{}\n",
		"1\ts{}\n",
		"\n",
		"1\ts\t{}\n\n",
		"abc\n",
		"1\ts\t{}\r\n",
		"1 \ts\t{}\n",
		strings.Repeat("0", 300) + "1\ts\t{}\n",
		strings.Repeat("0", 249) + "1\ts\t{}\n" + strings.Repeat("0", 250) + "1\ts\t{}\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// What ParseResultRecord says, line by line.
		type want struct {
			ord    int64
			failed bool
			line   string
		}
		var wants []want
		bad := -1 // index of the first malformed line
		lines := bytes.SplitAfter(data, []byte{'\n'})
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		for i, l := range lines {
			ord, failed, line, err := wire.ParseResultRecord(l)
			// The merger also refuses empty lines and framings over maxHeader bytes.
			if err != nil || len(line) == 0 || bytes.IndexByte(l, '\t') > maxHeader-3 || bytes.IndexByte(l, '\t') < 0 && len(l) > maxHeader-3 {
				bad = i
				break
			}
			wants = append(wants, want{ord, failed, string(line)})
		}
		check := func(reader string, got []rec, err error, wants []want) {
			t.Helper()
			if bad >= 0 {
				if err == nil {
					t.Fatalf("%s: no error for malformed line %d %q", reader, bad, lines[bad])
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", reader, err)
			}
			if len(got) != len(wants) {
				t.Fatalf("%s: %d records, want %d", reader, len(got), len(wants))
			}
			for i, w := range wants {
				g := got[i]
				if (want{g.ord, g.failed, string(g.json)}) != w {
					t.Fatalf("%s: record %d = (%d %v %q), want (%d %v %q)", reader, i, g.ord, g.failed, g.json, w.ord, w.failed, w.line)
				}
			}
		}
		// The sequential scanner (order "any", runs), with a tiny buffer.
		sc := newScanner("fuzz", bytes.NewReader(data), 16)
		var got []rec
		var err error
		for {
			var ok bool
			if ok, err = sc.next(); !ok || err != nil {
				break
			}
			r := sc.cur
			r.json = bytes.Clone(r.json)
			got = append(got, r)
		}
		check("scanner", got, err, wants)
		// The index passes serve records in ordinal order, equal ordinals
		// in file order.
		sorted := slices.Clone(wants)
		slices.SortStableFunc(sorted, func(a, b want) int { return cmp.Compare(a.ord, b.ord) })
		name := filepath.Join(t.TempDir(), "f.results")
		writeRaw(t, name, data)
		defer func(a, b, c int64, d int) {
			windowMax, windowPoolSize, maxPasses, windowScratch = a, b, c, d
		}(windowMax, windowPoolSize, maxPasses, windowScratch)
		for _, mode := range []struct {
			name                string
			keep                bool
			pool, window, scrat int64
		}{
			{"index+memory", true, 0, 0, 0},
			{"index+ReadAt", false, -1, 0, 0},
			{"index+window", false, 1 << 20, 1 << 20, 1 << 20},
			{"index+small windows", false, 1 << 20, 40, 16},
			{"index+no room", false, 30, 40, 16},
		} {
			var pool *windowPool
			if mode.pool >= 0 {
				windowMax, windowPoolSize, maxPasses, windowScratch = mode.window, mode.pool, 1<<40, int(mode.scrat)
				pool = newWindowPool()
			}
			got = got[:0]
			fs, err := indexFile(name, mode.keep, bufio.NewReaderSize(nil, 16), pool)
			if err == nil {
				for {
					ok, e := fs.next()
					if e == nil && ok {
						e = fs.load()
					}
					if !ok || e != nil {
						err = e
						break
					}
					r := fs.cur
					r.json = bytes.Clone(r.json)
					got = append(got, r)
				}
				fs.close()
				if pool != nil && (pool.avail() != windowPoolSize || pool.inUse+pool.held > windowPoolSize) {
					t.Fatalf("%s: pool has %d bytes free after close (%d held in spares), want %d of at most %d",
						mode.name, pool.avail(), pool.held, windowPoolSize, windowPoolSize)
				}
			}
			check(mode.name, got, err, sorted)
		}
	})
}

func writeRaw(t *testing.T, name string, data []byte) {
	check.NoErr(t, "WriteFile", os.WriteFile(name, data, 0o644))
}

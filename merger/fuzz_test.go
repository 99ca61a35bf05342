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

	"github.com/sluice-batch/sluice"
)

// FuzzParseRecords checks that the merger's three readers of results files
// (the sequential scanner, the index pass with records kept in memory and
// the one read back with ReadAt) agree with sluice.ParseResultRecord on any
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
			ord, failed, line, err := sluice.ParseResultRecord(l)
			// The merger also refuses empty lines and framings over maxHeader bytes.
			if err != nil || len(line) == 0 || bytes.IndexByte(l, '\t') > maxHeader-3 || bytes.IndexByte(l, '\t') < 0 && len(l) > maxHeader-3 {
				bad = i
				break
			}
			wants = append(wants, want{ord, failed, string(line)})
		}
		check := func(reader string, got []rec, err error) {
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
				if g.ord != w.ord || g.failed != w.failed || string(g.json) != w.line {
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
		check("scanner", got, err)
		// The index passes, in file order (sort by offset).
		name := filepath.Join(t.TempDir(), "f.results")
		writeRaw(t, name, data)
		for _, keep := range []bool{true, false} {
			got = got[:0]
			fs, err := indexFile(name, keep, bufio.NewReaderSize(nil, 16))
			if err == nil {
				slicesSortByOffset(fs.idx)
				for {
					ok, e := fs.next()
					if !ok || e != nil {
						err = e
						break
					}
					r := fs.cur
					r.json = bytes.Clone(r.json)
					got = append(got, r)
				}
				fs.close()
			}
			check(map[bool]string{true: "index+memory", false: "index+ReadAt"}[keep], got, err)
		}
	})
}

func slicesSortByOffset(idx []entry) {
	slices.SortFunc(idx, func(a, b entry) int { return cmp.Compare(a.off, b.off) })
}

func writeRaw(t *testing.T, name string, data []byte) {
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

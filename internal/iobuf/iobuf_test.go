package iobuf

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// openFile writes data to a new file and opens it for reading.
func openFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSize(t *testing.T) {
	dir := t.TempDir()
	file := func(n int) *os.File { return openFile(t, bytes.Repeat([]byte("x"), n)) }
	for _, c := range []struct {
		name string
		size int
		want int
	}{
		{"empty file", 0, least},
		{"small file", 100, least},
		{"file of 10 KiB", 10 << 10, 10<<10 + 1},
		{"file of the most", 1 << 20, 1 << 20},
		{"file over the most", 3 << 20, 1 << 20},
	} {
		if got := Size(file(c.size), 1<<20); got != c.want {
			t.Errorf("%s: Size = %d, want %d", c.name, got, c.want)
		}
	}
	if got := Size(bytes.NewReader(make([]byte, 10)), 1<<20); got != 1<<20 {
		t.Errorf("a reader that does not say its size: Size = %d, want the most", got)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := Size(d, 1<<20); got != 1<<20 {
		t.Errorf("a directory: Size = %d, want the most", got)
	}
}

// countingWriter is a writer that is no io.ReaderFrom.
type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// onlyReader hides a reader's other methods (io.WriterTo, Stat).
type onlyReader struct{ r *bytes.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestCopy(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 300_000)
	for _, c := range []struct {
		name string
		src  func() io.Reader
	}{
		{"a file (io.WriterTo)", func() io.Reader { return openFile(t, data) }},
		{"a plain reader, through a buffer", func() io.Reader { return onlyReader{bytes.NewReader(data)} }},
	} {
		w := &countingWriter{}
		n, err := Copy(w, c.src(), 1<<20)
		if err != nil || n != int64(len(data)) || w.n != len(data) {
			t.Errorf("%s: copied %d (%d written), %v; want %d", c.name, n, w.n, err, len(data))
		}
	}
}

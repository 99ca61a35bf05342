package iobuf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestSize(t *testing.T) {
	dir := t.TempDir()
	file := func(n int) *os.File {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, bytes.Repeat([]byte("x"), n), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
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

//go:build !linux

package merger

import "os"

// fileWriter writes to f and counts the bytes.
type fileWriter struct {
	f   *os.File
	off int64
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	return n, err
}

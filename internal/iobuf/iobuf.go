// Package iobuf sizes read buffers: a regular file smaller than the most a
// caller would buffer gets a buffer of its own size, not the most. Chunk
// and result files are often a few KiB; a fresh 1 MiB buffer for each is
// a megabyte to zero and collect for nothing. Copy allocates none where
// io.CopyBuffer would not use it.
package iobuf

import (
	"io"
	"os"
)

// least is the smallest buffer Size gives.
const least = 4 << 10

// Size is how large a buffer reading r needs, at most most: the size of r
// plus one (so a read sees the end without a second fill) when r is a
// regular file that says its size, else most. The size only bounds the
// buffer: a file that grows while it is read is still read whole.
func Size(r io.Reader, most int) int {
	s, ok := r.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return most
	}
	fi, err := s.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() >= int64(most) {
		return most
	}
	return min(most, max(least, int(fi.Size())+1))
}

// Copy copies src to dst as io.CopyBuffer does with a buffer of at most
// most bytes (Size), but allocates none when the copy would not use it:
// src an io.WriterTo or dst an io.ReaderFrom (an *os.File is both), which
// io.CopyBuffer hands the copy to, its buffer unused.
func Copy(dst io.Writer, src io.Reader, most int) (int64, error) {
	_, wt := src.(io.WriterTo)
	_, rf := dst.(io.ReaderFrom)
	if wt || rf {
		return io.Copy(dst, src)
	}
	return io.CopyBuffer(dst, src, make([]byte, Size(src, most)))
}

package merger

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileWriter writes to f and, every syncEvery bytes, starts the writeback
// of what it wrote (sync_file_range, without waiting), so that the disk works
// while the merge runs and the final fsync has little left. The range
// before that, whose writeback was started syncEvery bytes ago, is waited
// for and dropped from the page cache: a big merge then neither evicts
// everything else nor needs fresh pages for every byte it writes (on this
// VM that cut the kernel time of a 4 GB merge from 8-10 s to about 5 s).
// Errors of these hints are ignored: the final fsync reports real ones.
type fileWriter struct {
	f                 *os.File
	off, synced, prev int64
}

const syncEvery = 32 << 20

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.synced >= syncEvery {
		fd := int(w.f.Fd())
		unix.SyncFileRange(fd, w.synced, w.off-w.synced, unix.SYNC_FILE_RANGE_WRITE)
		if w.synced > w.prev {
			unix.SyncFileRange(fd, w.prev, w.synced-w.prev, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			unix.Fadvise(fd, w.prev, w.synced-w.prev, unix.FADV_DONTNEED)
		}
		w.prev, w.synced = w.synced, w.off
	}
	return n, err
}

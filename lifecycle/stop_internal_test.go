package lifecycle

import (
	"context"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// blackhole is a loopback TCP proxy to a real server that, once cut,
// keeps every connection open and forwards nothing more: a network that
// silently drops packets (a firewall DROP, a failover without RST).
type blackhole struct {
	ln  net.Listener
	cut atomic.Bool
	mu  sync.Mutex
	cs  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	t.Cleanup(b.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.cs = append(b.cs, c, s)
			b.mu.Unlock()
			go b.pipe(s, c)
			go b.pipe(c, s)
		}
	}()
	return b
}

// close ends the proxy and every connection through it.
func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cs {
		c.Close()
	}
}

// pipe copies from src to dst until cut, then reads and drops.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestWorkerStopBoundedWhenTheDatabaseHangs: a worker whose database
// stopped answering (its connections open, nothing coming back) still
// stops, within its bound: a run stopped by a signal keeps signals caught
// until it exits (Life.Stop), so its shutdown must end by itself.
func TestWorkerStopBoundedWhenTheDatabaseHangs(t *testing.T) {
	// Not parallel: it sets stopWithin.
	defer func(d time.Duration) { stopWithin = d }(stopWithin)
	stopWithin = 300 * time.Millisecond
	ctx := context.Background()
	u, err := url.Parse(testsrv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	b := newBlackhole(t, u.Host)
	u.Host = b.ln.Addr().String()
	db, err := tracker.OpenPostgres(ctx, u.String(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	planMergingJob(t, db)
	w, err := StartWorker(ctx, db, "j", time.Minute, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	b.cut.Store(true)
	stopped := make(chan struct{})
	t0 := time.Now()
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		b.close() // let the database's handle close
		t.Fatal("Worker.Stop still waits on a database that stopped answering")
	}
	t.Logf("stopped in %v", time.Since(t0))
	b.close()
	// Not waited for: pgx may take its own 15 s to close a connection
	// whose query was cut mid-way.
	go db.Close()
}

package lifecycle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Life is the owner of one run's life (river's startstop services,
// litestream's Replica.Start/Stop): Start begins it, with the two-phase
// stop of SIGINT and SIGTERM watched, and Stop ends it, stopping what it
// owns in the reverse order it was given (Own) and waiting for each.
//
// The first signal closes Stopping: no new submissions, calls in flight
// record their outcome. The second cancels Context: calls in flight are
// cancelled (the next run reconciles them), and Cancelled says so.
type Life struct {
	ctx       context.Context
	cancel    context.CancelFunc
	stopping  chan struct{}
	cancelled atomic.Bool
	log       zerolog.Logger

	sigs chan os.Signal
	done chan struct{} // closed when the signal watcher has ended

	mu    sync.Mutex
	owned []func()
	once  sync.Once

	// now and settle (tests): the clock, and how soon after the first
	// signal a second one counts.
	now    func() time.Time
	settle time.Duration
}

// settleSignals: timeout(1) and process-group kills deliver one stop as
// two signals at once: a second signal counts only this long after.
const settleSignals = 500 * time.Millisecond

// Start begins a run's life under parent, watching SIGINT and SIGTERM.
func Start(parent context.Context, log zerolog.Logger) *Life {
	return newLife(parent, log, time.Now, settleSignals).start()
}

// start watches the signals.
func (l *Life) start() *Life {
	signal.Notify(l.sigs, os.Interrupt, syscall.SIGTERM)
	go l.watch()
	return l
}

func newLife(parent context.Context, log zerolog.Logger, now func() time.Time, settle time.Duration) *Life {
	ctx, cancel := context.WithCancel(parent)
	return &Life{ctx: ctx, cancel: cancel, stopping: make(chan struct{}), log: log,
		sigs: make(chan os.Signal, 2), done: make(chan struct{}), now: now, settle: settle}
}

// watch is the signal watcher: it ends with the life's context.
func (l *Life) watch() {
	defer close(l.done)
	n := 0
	var first time.Time
	for {
		select {
		case <-l.sigs:
			if n == 1 && l.now().Sub(first) < l.settle {
				continue
			}
			n++
			if n == 1 {
				first = l.now()
				l.log.Warn().Msg("stopping: no new submissions; waiting for calls in flight (signal again to cancel them)")
				close(l.stopping)
			} else {
				l.log.Warn().Msg("cancelling calls in flight")
				l.cancelled.Store(true)
				l.cancel()
				return
			}
		case <-l.ctx.Done():
			return
		}
	}
}

// Context is the run's context: cancelled by a second signal, by Cancel,
// or by Stop.
func (l *Life) Context() context.Context { return l.ctx }

// Stopping is closed by the first signal.
func (l *Life) Stopping() <-chan struct{} { return l.stopping }

// Cancelled reports whether a second signal cancelled the run.
func (l *Life) Cancelled() bool { return l.cancelled.Load() }

// Cancel cancels the run's context (the job lock lost for good, say).
func (l *Life) Cancel() { l.cancel() }

// Own gives the life stop to call when it ends (a worker's Stop, the
// database's close, a server's Stop). Stops run in the reverse order
// they were given, after the signal watcher has ended.
func (l *Life) Own(stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owned = append(l.owned, stop)
}

// Stop ends the life: it stops watching signals, cancels the context,
// waits for the watcher to end, then stops what it owns, last given
// first, each waited for. Calling it again does nothing.
//
// A life a signal stopped keeps SIGINT and SIGTERM caught, unread: the
// process is on its way to exit with the code that names the stop, and a
// late Ctrl-C (the second one, pressed as the run was ending anyway) must
// not kill it by the default action first, losing that code. What it
// owns stops in bounded time (the worker's database calls within
// stopWithin, the lock's within its own timeouts), so the exit comes.
func (l *Life) Stop() {
	l.once.Do(func() {
		select {
		case <-l.stopping:
		default:
			signal.Stop(l.sigs)
		}
		l.cancel()
		<-l.done
		l.mu.Lock()
		owned := l.owned
		l.owned = nil
		l.mu.Unlock()
		for i := len(owned) - 1; i >= 0; i-- {
			owned[i]()
		}
	})
}

// Server is an HTTP server with an owner: Serve starts it, Stop closes it
// and waits until it has stopped serving.
type Server struct {
	hs   *http.Server
	done chan error
	once sync.Once
	err  error
}

// Serve serves hs on ln until Stop.
func Serve(hs *http.Server, ln net.Listener) *Server {
	s := &Server{hs: hs, done: make(chan error, 1)}
	go func() { s.done <- hs.Serve(ln) }()
	return s
}

// Stop closes the server (its listener and connections) and waits for
// Serve to return; its error, unless it is the close's own. Calling it
// again returns the same.
func (s *Server) Stop() error {
	s.once.Do(func() {
		s.err = s.hs.Close()
		if err := <-s.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	})
	return s.err
}

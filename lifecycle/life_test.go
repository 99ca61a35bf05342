package lifecycle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLifeTwoPhaseSignals: the first SIGINT closes Stopping and leaves the
// context alone; a second one at once (one stop delivered twice) is not a
// second signal; one after the settling time cancels the context, and
// Cancelled says so.
func TestLifeTwoPhaseSignals(t *testing.T) {
	// Not parallel, nor the other tests of a Life: a signal reaches every
	// Life the process has started.
	// The clock is atomic: the signal that makes the watcher read it is
	// no synchronisation the race detector sees.
	var clock atomic.Int64
	clock.Store(1e9)
	asked := make(chan time.Time)
	now := func() time.Time { c := time.Unix(clock.Load(), 0); asked <- c; return c }
	l := newLife(context.Background(), zerolog.Nop(), now, time.Second).start()
	defer l.Stop()
	kill := func() {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	}
	kill()
	<-asked // the first signal's time
	select {
	case <-l.Stopping():
	case <-time.After(10 * time.Second):
		t.Fatal("the first signal did not close Stopping")
	}
	kill()
	<-asked // the second, at once: not counted
	if l.Context().Err() != nil || l.Cancelled() {
		t.Fatal("a second signal at once cancelled the run")
	}
	clock.Add(2) // seconds
	kill()
	<-asked
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a second signal did not cancel the run")
	}
	if !l.Cancelled() {
		t.Error("Cancelled is false after a second signal")
	}
}

// TestLifeStopStopsWhatItOwns: Stop cancels the context, ends the signal
// watcher and calls what the life owns, last given first, once.
func TestLifeStopStopsWhatItOwns(t *testing.T) {
	l := Start(context.Background(), zerolog.Nop())
	var order []int
	l.Own(func() { order = append(order, 1) })
	l.Own(func() {
		if l.Context().Err() == nil {
			t.Error("an owned stop ran before the context was cancelled")
		}
		order = append(order, 2)
	})
	l.Stop()
	l.Stop()
	select {
	case <-l.done:
	default:
		t.Fatal("Stop returned before the signal watcher ended")
	}
	if len(order) != 2 || order[0] != 2 || order[1] != 1 {
		t.Fatalf("owned stops ran as %v, want [2 1]", order)
	}
	if l.Cancelled() {
		t.Error("Stop counts as a second signal")
	}
}

// TestServerStopWaits: Stop returns once Serve has returned, and the
// server no longer answers.
func TestServerStopWaits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(&http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}, ln)
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("the server still listens after Stop")
	}
}

// TestLateSignalAfterStopKeepsTheExitCode: a run stopped by a signal
// that gets another one after its life stopped (Ctrl-C twice, the run
// ending between the two) still exits with its own code, not killed by
// the signal's default action. In a subprocess: the other outcome kills
// the process.
func TestLateSignalAfterStopKeepsTheExitCode(t *testing.T) {
	if os.Getenv("SLUICE_TEST_LATE_SIGNAL") == "1" {
		lateSignalAfterStop()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLateSignalAfterStopKeepsTheExitCode$")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_LATE_SIGNAL=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("the stopped run ended with %v (exit code %d), want exit 3\n%s", err, cmd.ProcessState.ExitCode(), out)
	}
}

// lateSignalAfterStop is the subprocess: the first SIGINT stops the life,
// Stop ends it, a second SIGINT arrives; SIGUSR1 after it proves it was
// handled (pending signals are delivered lowest number first), and the
// process exits 3 as a stopped run does.
func lateSignalAfterStop() {
	l := Start(context.Background(), zerolog.Nop())
	syscall.Kill(syscall.Getpid(), syscall.SIGINT)
	select {
	case <-l.Stopping():
	case <-time.After(10 * time.Second):
		os.Exit(1)
	}
	l.Stop()
	after := make(chan os.Signal, 1)
	signal.Notify(after, syscall.SIGUSR1)
	syscall.Kill(syscall.Getpid(), syscall.SIGINT)
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	select {
	case <-after:
		os.Exit(3)
	case <-time.After(10 * time.Second):
		os.Exit(1)
	}
}

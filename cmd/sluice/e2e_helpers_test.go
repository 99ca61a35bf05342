package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/testsrv"
)

// binary is the sluice binary built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	if db := os.Getenv("SLUICE_TEST_HOLD_DB"); db != "" {
		holdDBLock(db)
		return
	}
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		panic(err)
	}
	// Most tests here wait on subprocesses (batches that take their time,
	// polls, kills), not on the CPU.
	testsrv.Parallel(testParallel)
	if binary, err = buildSluice(dir); err != nil {
		fmt.Fprintf(os.Stderr, "build sluice: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildSluice builds this package's binary and returns its path. `go
// run` caches the executables it links (Go 1.24 on), `go build -o` links
// every time: so the binary is built with `go run -exec echo`, which
// prints where the cached executable is instead of running it, and the
// tests run it from there. An unchanged tree then costs no link, 5 s of
// the package's start. A fresh link is printed in go's work directory,
// gone when go exits: the second call finds it in the cache; `go build
// -o` into dir is the last resort.
func buildSluice(dir string) (string, error) {
	for range 2 {
		out, err := exec.Command("go", "run", "-exec", "echo", ".").Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", fmt.Errorf("%w\n%s", err, ee.Stderr)
			}
			return "", err
		}
		built := strings.TrimSpace(string(out))
		if fi, err := os.Stat(built); err == nil && fi.Mode().IsRegular() {
			return built, nil
		}
	}
	path := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return path, nil
}

// testParallel is how many tests of this package run at once by default.
const testParallel = 16

// result of one sluice invocation.
type result struct {
	code           int
	stdout, stderr string
}

// sluiceCmd prepares a sluice subprocess with a private state dir and env.
func sluiceCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

func runSluice(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := sluiceCmd(env, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	code, err := procExit(cmd.Run())
	if err != nil {
		t.Fatalf("run sluice: %v", err)
	}
	return result{code: code, stdout: so.String(), stderr: se.String()}
}

// procExit reads what a finished process's Run or Wait returned: its exit
// code (-1 when a signal ended it), or the error when it did not run.
func procExit(err error) (int, error) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// emulatorProc is `sluice emulate` running as its own process.
type emulatorProc struct {
	cmd  *exec.Cmd
	addr string
}

func startEmulator(t *testing.T, args ...string) *emulatorProc {
	t.Helper()
	return startEmulatorEnv(t, nil, args...)
}

func startEmulatorEnv(t *testing.T, env []string, args ...string) *emulatorProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"emulate", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "http://"); i >= 0 {
			addr := strings.Fields(line[i+len("http://"):])[0]
			go io.Copy(io.Discard, stderr)
			// Generous: tests run in parallel on a shared machine.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("sluice emulate took %v to start, want a moment", d)
			}
			return &emulatorProc{cmd: cmd, addr: addr}
		}
	}
	t.Fatal("sluice emulate did not say where it listens")
	return nil
}

func (e *emulatorProc) stats(t *testing.T) map[string]int64 {
	t.Helper()
	resp, err := http.Get("http://" + e.addr + "/_emulator/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for k, v := range raw {
		if f, ok := v.(float64); ok {
			m[k] = int64(f)
		}
	}
	return m
}

// writeInput writes n OpenAI-style requests over two models and two
// endpoints and returns the path and the custom_ids.
func writeInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	return writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("r%05d", i)
		switch i % 3 {
		case 0:
			return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"doc %d"}}`, id, i)
		case 1:
			return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"q %d"}]}}`, id, i)
		default:
			return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4.1-nano","messages":[{"role":"user","content":"r %d"}]}}`, id, i)
		}
	})
}

// writeRequests writes n request lines to path, line i and its custom_id
// being what line returns for i, and returns the path and the custom_ids
// in order.
func writeRequests(t *testing.T, path string, n int, line func(i int) (id, text string)) (string, []string) {
	t.Helper()
	var b strings.Builder
	ids := make([]string, 0, n)
	for i := range n {
		id, l := line(i)
		ids = append(ids, id)
		b.WriteString(l + "\n")
	}
	writeFile(t, path, []byte(b.String()))
	return path, ids
}

// checkOutput asserts the output has every custom_id exactly once, in
// input order, and returns the parsed lines.
func checkOutput(t *testing.T, path string, ids []string) []sluice.OutputLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("output: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(ids) {
		t.Fatalf("output has %d lines, want %d", len(lines), len(ids))
	}
	var out []sluice.OutputLine
	for i, l := range lines {
		var o sluice.OutputLine
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("output line %d: %v", i+1, err)
		}
		if o.CustomID != ids[i] {
			t.Fatalf("output line %d is %q, want %q", i+1, o.CustomID, ids[i])
		}
		out = append(out, o)
	}
	return out
}

// outcomes counts the output's lines by outcome: "ok" for a 200 answer
// without error, else the error's code ("other" for neither). When codes
// are given, a line that is neither a success nor an error of one of them
// fails the test, named.
func outcomes(t *testing.T, lines []sluice.OutputLine, codes ...sluice.ErrorCode) map[string]int {
	t.Helper()
	n := map[string]int{}
	for i, l := range lines {
		k := "other"
		switch {
		case l.Error == nil && l.Response != nil && l.Response.StatusCode == 200:
			k = "ok"
		case l.Error != nil:
			k = string(l.Error.Code)
		}
		n[k]++
		if len(codes) > 0 && k != "ok" && (l.Error == nil || !slices.Contains(codes, l.Error.Code)) {
			t.Errorf("output line %d (%s): neither a success nor %v: %+v", i+1, l.CustomID, codes, l)
		}
	}
	return n
}

// openAIJob is how most end-to-end tests begin: an emulator started with
// emuArgs, n input lines (writeInput) in a temp directory dir, the output
// path out (outName in dir) and the environment of a --provider openai
// run against the emulator, state in dir.
func openAIJob(t *testing.T, n int, outName string, emuArgs ...string) (emu *emulatorProc, dir, in string, ids []string, out string, env []string) {
	t.Helper()
	emu, dir, in, ids, out = emulatorJob(t, n, outName, emuArgs...)
	env = append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	return emu, dir, in, ids, out, env
}

// emulatorJob starts an emulator with emuArgs and writes n requests to
// in.jsonl in a temporary directory, the output to be outName there.
func emulatorJob(t *testing.T, n int, outName string, emuArgs ...string) (emu *emulatorProc, dir, in string, ids []string, out string) {
	t.Helper()
	emu = startEmulator(t, emuArgs...)
	dir = t.TempDir()
	in, ids = writeInput(t, dir, n)
	return emu, dir, in, ids, filepath.Join(dir, outName)
}

// killRuns runs the command mk builds up to runs times, SIGKILLing run i
// after delay(i), until a run ends by itself, which must exit 0; it
// returns how many kills landed.
func killRuns(t *testing.T, mk func() *exec.Cmd, runs int, delay func(i int) time.Duration) int {
	t.Helper()
	kills := 0
	for i := 0; i < runs; i++ {
		killed, code := killAfter(t, mk(), delay(i))
		if !killed {
			if code != 0 {
				t.Fatalf("run %d ended with exit %d", i, code)
			}
			break
		}
		kills++
	}
	return kills
}

// randomDelays are killRuns delays of 30 to 330ms drawn from rng.
func randomDelays(rng *rand.Rand) func(int) time.Duration {
	return func(int) time.Duration { return time.Duration(30+rng.IntN(300)) * time.Millisecond }
}

// killAfter starts cmd and SIGKILLs it after d (if it is still running).
// It reports whether the kill landed before the process ended by itself.
func killAfter(t *testing.T, cmd *exec.Cmd, d time.Duration) (killed bool, code int) {
	t.Helper()
	w := startProc(t, cmd)
	select {
	case <-w.done:
		if w.code != 0 {
			t.Logf("stderr of the run that exited %d:\n%s", w.code, w.stderr.String())
		}
		return false, w.code
	case <-time.After(d):
		w.kill()
		return true, -1
	}
}

var _ = context.Background

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fmtInt(n int) string { return fmt.Sprint(n) }

func decompressZstd(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	o, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := io.Copy(o, zr); err != nil {
		t.Fatal(err)
	}
}

// killWhen starts cmd, its output discarded but for its stderr, and
// SIGKILLs it once ready says so, failing the test if the process ends
// before that or ready has not said so within 2 minutes (what names the
// awaited moment).
func killWhen(t *testing.T, cmd *exec.Cmd, what string, ready func() bool) {
	t.Helper()
	killWhenLog(t, cmd, what, 2*time.Minute, func(string) bool { return ready() })
}

// killWhenLog is killWhen whose ready reads the process's stderr so far,
// waiting at most limit.
func killWhenLog(t *testing.T, cmd *exec.Cmd, what string, limit time.Duration, ready func(stderr string) bool) {
	t.Helper()
	w := startProc(t, cmd)
	deadline := time.Now().Add(limit)
	for !ready(w.stderr.String()) {
		select {
		case <-w.done:
			t.Fatalf("the first run ended (exit %d) before it was killed (no %s):\n%s", w.code, what, w.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v:\n%s", what, limit, w.stderr.String())
		}
	}
	w.kill()
}

// waitWorkers waits up to timeout for each worker to end, fails the test
// unless each exited 0, and returns how many planned the job and how many
// merged it.
func waitWorkers(t *testing.T, ws []*workerProc, timeout time.Duration) (planned, merged int) {
	t.Helper()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-time.After(timeout):
			t.Fatalf("worker did not finish:\n%s", w.stderr.String())
		}
		if w.code != 0 {
			t.Fatalf("worker exited %d:\n%s", w.code, w.stderr.String())
		}
		if strings.Contains(w.stderr.String(), `"message":"job planned"`) {
			planned++
		}
		if strings.Contains(w.stdout.String(), " done: ") {
			merged++
		}
	}
	return planned, merged
}

// refusingAddr returns a loopback address that refuses connections for
// the rest of the test: a TCP socket bound there and never listening,
// without SO_REUSEADDR, so no other listener (an emulator of a test running
// in parallel, on port 0) can be given the port meanwhile. A listener
// closed at once, as this once was, left the port free for the next
// bind: a parallel cell's emulator took it, and a "dead endpoint" answered.
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// TestRefusingAddr: the address refuses a connection, and no listener can
// be given its port while the test runs.
func TestRefusingAddr(t *testing.T) {
	addr := refusingAddr(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s took a connection", addr)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener was given %s", addr)
	}
}

package merger

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain turns the test binary into the crash test's helper when
// MERGER_HELPER=1: it merges MERGER_DIR/in/*.results into MERGER_DIR/out.jsonl
// slowly (Expected sleeps now and then) and never exits by itself, so the
// parent's SIGKILL always lands.
func TestMain(m *testing.M) {
	if os.Getenv("MERGER_HELPER") == "1" {
		helper()
		return
	}
	os.Exit(m.Run())
}

const crashTotal = 30000

func crashConfig(dir string) Config {
	files, _ := filepath.Glob(filepath.Join(dir, "in", "*.results"))
	return Config{Output: filepath.Join(dir, "out.jsonl"), Files: files, Total: crashTotal,
		Expected: expectN(crashTotal), MaxOpen: 2}
}

func helper() {
	cfg := crashConfig(os.Getenv("MERGER_DIR"))
	inner := cfg.Expected
	cfg.Expected = func(yield func(int64, string) bool) error {
		return inner(func(o int64, id string) bool {
			if o%50 == 0 {
				time.Sleep(time.Millisecond)
			}
			return yield(o, id)
		})
	}
	_, err := Merge(context.Background(), cfg)
	fmt.Fprintln(os.Stderr, "helper: merge returned", err)
	select {} // wait for the kill
}

// tempSize is the size of the largest output temp file in dir, -1 if none.
func tempSize(dir string) int64 {
	size := int64(-1)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".out.jsonl.") && strings.HasSuffix(e.Name(), ".tmp") {
			if info, err := e.Info(); err == nil {
				size = max(size, info.Size())
			}
		}
	}
	return size
}

// A merge killed with SIGKILL mid-write leaves no final file (or the older
// complete one untouched); running it again writes the right file and
// removes what the killed one left.
func TestCrashKillMidMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	t.Parallel()
	recs := synth(crashTotal, 300)
	wantOut, wantErrs := wantOutput(recs)
	for _, older := range []bool{false, true} {
		t.Run("older="+strconv.FormatBool(older), func(t *testing.T) {
			t.Parallel() // a directory and a helper process of its own
			dir := t.TempDir()
			writeFiles(t, filepath.Join(dir, "in"), recs, 5, 21)
			out := filepath.Join(dir, "out.jsonl")
			if older {
				os.WriteFile(out, []byte("older complete output\n"), 0o644)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "MERGER_HELPER=1", "MERGER_DIR="+dir)
			logName := filepath.Join(t.TempDir(), "helper.log")
			logf, err := os.Create(logName)
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			cmd.Stderr = logf
			said := func() string { b, _ := os.ReadFile(logName); return string(b) }
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for tempSize(dir) < 1<<20 {
				if time.Now().After(deadline) || strings.Contains(said(), "helper:") {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("no 1 MiB temp output before the kill; helper said %q", said())
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("helper ended with %v, not by SIGKILL (stderr %q)", err, said())
			}
			if strings.Contains(said(), "helper:") {
				t.Fatalf("the merge ended before the kill: %s", said())
			}
			if older {
				if b, _ := os.ReadFile(out); string(b) != "older complete output\n" {
					t.Fatalf("older output changed: %.80q", b)
				}
			} else {
				assertNoFile(t, out)
			}
			if leftovers(t, dir) == nil {
				t.Fatal("the killed merge left no temp file: was it killed mid-merge?")
			}
			sum := mustMerge(t, crashConfig(dir))
			checkEqual(t, "output after re-run", readOut(t, sum.Output), wantOut)
			checkEqual(t, "errors after re-run", readOut(t, sum.Errors), wantErrs)
			if l := leftovers(t, dir); l != nil {
				t.Fatalf("left behind after re-run: %v", l)
			}
		})
	}
}

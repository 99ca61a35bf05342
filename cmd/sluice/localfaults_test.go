package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// holdDBLock is the helper process of the lock tests: it takes the write
// lock of the state database, says so, and holds it until killed.
func holdDBLock(path string) {
	db, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate")
	if err != nil {
		os.Exit(3)
	}
	tx, err := db.Begin()
	if err != nil {
		os.Exit(4)
	}
	if _, err := tx.Exec(`UPDATE jobs SET updated_at = updated_at`); err != nil {
		os.Exit(5)
	}
	fmt.Println("holding")
	time.Sleep(time.Minute)
}

func holdLock(t *testing.T, state string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SLUICE_TEST_HOLD_DB="+filepath.Join(state, tracker.DBName))
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := out.Read(buf); string(buf[:n]) != "holding\n" {
		cmd.Process.Kill()
		t.Fatalf("lock holder: %q", buf[:n])
	}
	return cmd
}

func checkIntegrity(t *testing.T, state string) {
	t.Helper()
	db, err := tracker.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.IntegrityCheck(context.Background()); err != nil {
		t.Error(err)
	}
}

// stateChunks reads the tracker of a state directory: how many jobs it
// holds and every chunk of them.
func stateChunks(t *testing.T, state string) (jobs int, chunks []*sluice.Chunk) {
	t.Helper()
	db, err := tracker.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	js, err := db.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		cs, err := db.Chunks(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, cs...)
	}
	return len(js), chunks
}

// TestStateDatabaseLocked: a run waits for another process's write lock,
// and past SLUICE_DB_BUSY_TIMEOUT fails with a clear message; the next run
// completes.
func TestStateDatabaseLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 20)
	env := stateEnv(dir)
	state := filepath.Join(dir, "state")
	if r := runSluice(t, env, "plan", in); r.code != 0 {
		t.Fatalf("plan: %d %s", r.code, r.stderr)
	}
	out := filepath.Join(dir, "out.jsonl")

	h := holdLock(t, state)
	r := runSluice(t, append(env, "SLUICE_DB_BUSY_TIMEOUT=300ms"), "run", in, "--out", out)
	h.Process.Kill()
	h.Wait()
	if r.code != 1 || !strings.Contains(r.stderr, "locked by another process") {
		t.Fatalf("run under a held lock: exit %d, %q; want 1 and a clear message", r.code, r.stderr)
	}

	// A lock held briefly is waited out.
	h = holdLock(t, state)
	go func() { time.Sleep(700 * time.Millisecond); h.Process.Kill() }()
	r = runSluice(t, env, "run", in, "--out", out)
	h.Wait()
	if r.code != 0 {
		t.Fatalf("run after the lock was released: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	checkIntegrity(t, state)
}

// smallDisk returns a directory with little room: a tmpfs of size bytes
// where this process may mount one, and a function to give it more room.
func smallDisk(t *testing.T, size int) (dir string, grow func()) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "small")
	os.MkdirAll(dir, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("this test needs to mount a small tmpfs (root or CAP_SYS_ADMIN): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir, func() {
		if out, err := exec.Command("mount", "-o", "remount,size=64m", dir).CombinedOutput(); err != nil {
			t.Fatalf("grow tmpfs: %v %s", err, out)
		}
	}
}

// TestDiskFullDuringMerge: the output's disk fills up while merging; the
// run fails clearly, leaves no half output, and the next run writes it.
func TestDiskFullDuringMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 300)
	small, grow := smallDisk(t, 64<<10)
	out := filepath.Join(small, "out.jsonl")
	env := stateEnv(dir)
	r := runSluice(t, env, "run", in, "--out", out)
	if r.code != 1 || !strings.Contains(r.stderr, "no space left on device") {
		t.Fatalf("merge onto a full disk: exit %d, %q; want 1 and ENOSPC", r.code, r.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a half output was left under the final name")
	}
	grow()
	r = runSluice(t, env, "run", in, "--out", out)
	if r.code != 0 {
		t.Fatalf("re-run with room: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	checkIntegrity(t, filepath.Join(dir, "state"))
}

// TestDiskFullDuringSplitAndDownload: the state directory fills up while
// planning (chunk files, rows) or while results come back; each run fails
// clearly, and once there is room the same command finishes the job.
func TestDiskFullDuringSplitAndDownload(t *testing.T) {
	t.Parallel()
	for _, size := range []int{96 << 10, 400 << 10} {
		t.Run(fmt.Sprint(size>>10, "KiB"), func(t *testing.T) {
			dir := t.TempDir()
			in, ids := writeInput(t, dir, 1500)
			state, grow := smallDisk(t, size)
			env := []string{"SLUICE_STATE=" + state}
			out := filepath.Join(dir, "out.jsonl")
			r := runSluice(t, env, "run", in, "--out", out, "--max-batch-requests", "100")
			if r.code != 1 || !(strings.Contains(r.stderr, "no space left") || strings.Contains(r.stderr, "disk is full") || strings.Contains(r.stderr, "database or disk is full")) {
				t.Fatalf("run on a full state disk: exit %d, %q; want 1 and a disk-full error", r.code, r.stderr)
			}
			grow()
			r = runSluice(t, env, "run", in, "--out", out, "--max-batch-requests", "100")
			if r.code != 0 {
				t.Fatalf("re-run with room: exit %d\n%s", r.code, r.stderr)
			}
			checkOutput(t, out, ids)
			checkIntegrity(t, state)
		})
	}
}

// TestChunkDirDeletedUnderLiveJob: the job's chunk files vanish while
// batches are still to be sent; the run stops with a clear error instead
// of looping, and the database stays sound.
func TestChunkDirDeletedUnderLiveJob(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulator(t, "--batch-time", "5s")
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 60)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	args := []string{"run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "openai", "--rate", "-1",
		"--max-batch-requests", "10", "--max-live-batches", "2", "--once"}
	if r := runSluice(t, env, args...); r.code != 3 {
		t.Fatalf("first --once: exit %d, want 3\n%s", r.code, r.stderr)
	}
	jobs, _ := filepath.Glob(filepath.Join(dir, "state", "jobs", "*", "chunks"))
	if len(jobs) != 1 {
		t.Fatalf("chunk dirs: %v", jobs)
	}
	os.RemoveAll(jobs[0])
	r := runSluice(t, env, append(args[:len(args)-1], "--max-live-batches", "10")...)
	if r.code != 1 || !strings.Contains(r.stderr, "changed under the job") {
		t.Fatalf("run without chunk files: exit %d, %q; want 1 and a clear message", r.code, r.stderr)
	}
	checkIntegrity(t, filepath.Join(dir, "state"))
}

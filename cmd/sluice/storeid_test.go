package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice/tracker"
)

// TestStoreSharedByTwoPlans: two state directories share one --store and
// plan the same job name (an input object rewritten between the plans) with
// different content; each plan's files must stay its own. A plans; B plans
// the rewritten input and runs it to the end; the input is restored and A
// runs from a fresh state directory (its tracker carried over, its cache
// gone, as a pod with no lasting disk): every request of A is answered
// from A's own body, none from B's. Then B's output is merged again from a
// fresh state directory: still B's own answers, none of A's.
//
// Both kinds of store: a prefix in S3 and a shared directory.
func TestStoreSharedByTwoPlans(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"s3", "dir"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testStoreSharedByTwoPlans(t, kind, false)
		})
	}
}

// TestStoreSharedByTwoPlansKilled: as TestStoreSharedByTwoPlans, but A
// runs first and is SIGKILLed once a chunk's results are in the store;
// its resumed run finishes its own batches, buying nothing twice.
func TestStoreSharedByTwoPlansKilled(t *testing.T) {
	t.Parallel()
	testStoreSharedByTwoPlans(t, "dir", true)
}

// moveTracker copies the tracker of state dir from to a new, empty state
// directory to and deletes from: a pod replaced, its database kept.
func moveTracker(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if data, err := os.ReadFile(filepath.Join(from, tracker.DBName+suffix)); err == nil {
			writeFile(t, filepath.Join(to, tracker.DBName+suffix), data)
		}
	}
	if err := os.RemoveAll(from); err != nil {
		t.Fatal(err)
	}
}

func testStoreSharedByTwoPlans(t *testing.T, kind string, kill bool) {
	b := newS3Bucket(t)
	dir := t.TempDir()
	store := b.url("state")
	if kind == "dir" {
		store = filepath.Join(dir, "shared")
	}
	const n = 300
	f := adoptFamilies[0] // openai: uploads files
	idsA := writeMarked(t, f, filepath.Join(dir, "a.jsonl"), "A", n)
	idsB := writeMarked(t, f, filepath.Join(dir, "b.jsonl"), "B", n)
	if strings.Join(idsA, ",") != strings.Join(idsB, ",") {
		t.Fatal("the two inputs must share their custom_ids")
	}
	dataA, _ := os.ReadFile(filepath.Join(dir, "a.jsonl"))
	dataB, _ := os.ReadFile(filepath.Join(dir, "b.jsonl"))
	var emu *emulatorProc
	if kill {
		emu = startEmulator(t, "--batch-time", "700ms")
	} else {
		emu = startEmulator(t)
	}
	in := b.url("in.jsonl")
	// Killed between a chunk's intent and its call, A's chunk is
	// reconciled after this grace (the default, two minutes, is waited
	// out when the kill lands there).
	grace := []string{"--store", store, "--reconcile-grace", "1s"}
	run := func(state, out string) result {
		env := append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + state}, b.env...)
		return runSluice(t, env, openAIRun(emu, in, out, grace...)...)
	}

	// A plans its input (its files go to the store).
	b.put(t, "in.jsonl", dataA)
	stateA := filepath.Join(dir, "stateA")
	envA := append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + stateA}, b.env...)
	if kill {
		// A runs, and is killed once a chunk's results are in the store.
		cmd := sluiceCmd(envA, openAIRun(emu, in, filepath.Join(dir, "outA.jsonl"), "--store", store, "--max-live-batches", "2")...)
		killWhen(t, cmd, "a results file in the store", func() bool {
			if kind == "dir" {
				m, _ := filepath.Glob(filepath.Join(store, "jobs", "*", "*", "results", "c*.results"))
				old, _ := filepath.Glob(filepath.Join(store, "jobs", "*", "results", "c*.results")) // before plan keys
				return len(m)+len(old) >= 1
			}
			for _, k := range b.keys(t, "state/jobs/") {
				if strings.Contains(k, "/results/c") {
					return true
				}
			}
			return false
		})
	} else if r := runSluice(t, envA, "plan", in, "--provider", "openai", "--base-url", "http://"+emu.addr+"/v1",
		"--max-batch-requests", "100", "--store", store); r.code != 0 {
		t.Fatalf("plan A: exit %d\n%s", r.code, r.stderr)
	}

	// Another state directory plans the rewritten input under the same
	// job name, in the same store, and runs it to the end.
	b.put(t, "in.jsonl", dataB)
	stateB := filepath.Join(dir, "stateB")
	outB := filepath.Join(dir, "outB.jsonl")
	runChecked := func(state, out string, ids []string, mark string) {
		t.Helper()
		if r := run(state, out); r.code != 0 {
			t.Fatalf("run %s in %s: exit %d, want 0\n%s", mark, filepath.Base(state), r.code, r.stderr)
		}
		checkAnswers(t, out, ids, mark)
	}
	runChecked(stateB, outB, idsB, "B")

	// A's input is back; A runs from a fresh state directory.
	b.put(t, "in.jsonl", dataA)
	stateA2 := filepath.Join(dir, "stateA2")
	moveTracker(t, stateA, stateA2)
	runChecked(stateA2, filepath.Join(dir, "outA.jsonl"), idsA, "A")

	// B's job merged again from a fresh state directory reads B's results.
	b.put(t, "in.jsonl", dataB)
	stateB2 := filepath.Join(dir, "stateB2")
	moveTracker(t, stateB, stateB2)
	if err := os.Remove(outB); err != nil {
		t.Fatal(err)
	}
	runChecked(stateB2, outB, idsB, "B")
	envB2 := append([]string{"SLUICE_STATE=" + stateB2}, b.env...)
	if r := runSluice(t, envB2, "status"); r.code != 0 {
		t.Fatalf("status of B from a fresh state directory: exit %d\n%s", r.code, r.stderr)
	}
	// The two jobs share their custom_ids: each bought its own 300 once,
	// in 3 batches.
	if st := emu.stats(t); st["batches_created"] != 6 || st["requests_processed"] != 600 {
		t.Fatalf("emulator stats: %v", st)
	}
}

// TestStoreChunkFileReplaced: a chunk file in the store that is not the
// one the job planned (another plan's bytes under its key: an earlier
// version's plan into the same store, or a hand edit) is never sent. The
// run from a fresh state directory stops (exit 1) naming the chunk and the
// digests,
// and the provider gets no batch.
func TestStoreChunkFileReplaced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "shared")
	f := adoptFamilies[0]
	in := filepath.Join(dir, "in.jsonl")
	writeMarked(t, f, in, "A", 200)
	writeMarked(t, f, filepath.Join(dir, "other.jsonl"), "B", 200)
	emu := startEmulator(t)
	state := filepath.Join(dir, "state")
	env := []string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + state}
	args := openAIRun(emu, in, filepath.Join(dir, "out.jsonl"), "--store", store)
	if r := runSluice(t, env, "plan", in, "--provider", "openai", "--base-url", "http://"+emu.addr+"/v1",
		"--max-batch-requests", "100", "--store", store); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	// The other input's first chunk, planned apart, replaces this job's.
	other := filepath.Join(dir, "other-state")
	if r := runSluice(t, []string{"SLUICE_STATE=" + other}, "plan", filepath.Join(dir, "other.jsonl"), "--provider", "openai",
		"--base-url", "http://"+emu.addr+"/v1", "--max-batch-requests", "100"); r.code != 0 {
		t.Fatalf("plan of the other input: exit %d\n%s", r.code, r.stderr)
	}
	theirs, _ := filepath.Glob(filepath.Join(other, "jobs", "*", "chunks", "c000001-a1.jsonl"))
	ours, _ := filepath.Glob(filepath.Join(store, "jobs", "*", "*", "chunks", "c000001-a1.jsonl"))
	if len(ours) == 0 { // the layout of jobs planned before plans had keys
		ours, _ = filepath.Glob(filepath.Join(store, "jobs", "*", "chunks", "c000001-a1.jsonl"))
	}
	if len(theirs) != 1 || len(ours) != 1 {
		t.Fatalf("chunk files: %v and %v, want one each", theirs, ours)
	}
	data, _ := os.ReadFile(theirs[0])
	writeFile(t, ours[0], data)
	fresh := filepath.Join(dir, "fresh")
	moveTracker(t, state, fresh)
	r := runSluice(t, []string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + fresh}, args...)
	if r.code != exitError || !strings.Contains(r.stderr, "chunk 1: the chunk file") || !strings.Contains(r.stderr, "is not the one job") {
		t.Fatalf("run with a replaced chunk file: exit %d, want a refusal naming chunk 1\n%s", r.code, r.stderr)
	}
	// Chunk 2 may have gone before the stop; chunk 1 never did.
	if st := emu.stats(t); st["batches_created"] > 1 || st["requests_processed"] > 100 {
		t.Fatalf("more than chunk 2 was sent: %v", st)
	}
}

// TestStoreJobPlannedBeforePlanKeys: a job an earlier version planned (no
// store key: its files under jobs/JOB/ in the store; no file digests) still
// runs to the end from a fresh state directory, every answer its own.
// (A compatibility check: the earlier version passes it too.)
func TestStoreJobPlannedBeforePlanKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "shared")
	in := filepath.Join(dir, "in.jsonl")
	ids := writeMarked(t, adoptFamilies[0], in, "A", 200)
	emu := startEmulator(t)
	state := filepath.Join(dir, "state")
	if r := runSluice(t, []string{"SLUICE_STATE=" + state}, "plan", in, "--provider", "openai", "--base-url", "http://"+emu.addr+"/v1",
		"--max-batch-requests", "100", "--store", store); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	// Made as an earlier version left it: the tracker without the new
	// columns' values, the files under jobs/JOB/.
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(state, tracker.DBName))
	if err != nil {
		t.Fatal(err)
	}
	var key string
	if err := db.QueryRow(`SELECT store_key FROM jobs`).Scan(&key); err != nil || !strings.HasPrefix(key, "jobs/") {
		t.Fatalf("store key %q, %v", key, err)
	}
	for _, q := range []string{`UPDATE jobs SET store_key = ''`, `UPDATE chunks SET file_digest = ''`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	plan := filepath.Join(store, filepath.FromSlash(key))
	entries, err := os.ReadDir(plan)
	if err != nil || len(entries) == 0 {
		t.Fatalf("the plan's files in the store: %v, %v", entries, err)
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(plan, e.Name()), filepath.Join(filepath.Dir(plan), e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(plan)
	fresh := filepath.Join(dir, "fresh")
	moveTracker(t, state, fresh)
	out := filepath.Join(dir, "out.jsonl")
	if r := runSluice(t, []string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + fresh}, openAIRun(emu, in, out, "--store", store)...); r.code != 0 {
		t.Fatalf("run of the job planned before plan keys: exit %d\n%s", r.code, r.stderr)
	}
	checkAnswers(t, out, ids, "A")
}

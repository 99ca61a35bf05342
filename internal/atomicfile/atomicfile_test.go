package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-batch/sluice/internal/atomicfile"
)

// leftovers lists the directory's entries other than want.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestCommitAppearsOnlyWhenComplete(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(final, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := atomicfile.Create(final)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("new\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(final); string(b) != "old\n" {
		t.Errorf("final name changed before Commit: %q", b)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // after Commit: nothing
	if b, _ := os.ReadFile(final); string(b) != "new\n" {
		t.Errorf("after Commit: %q", b)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("directory holds %v, want only the final file", got)
	}
	if st, _ := os.Stat(final); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "x")
	f, err := atomicfile.Create(final)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("partial")
	f.Abort()
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("after Abort the directory holds %v", got)
	}
}

func TestCommitFailureRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "sub")
	if err := os.Mkdir(final, 0o700); err != nil { // a directory that is not empty cannot be renamed over
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(final, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := atomicfile.Create(final)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("renamed over a non-empty directory")
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "sub" {
		t.Errorf("after a failed Commit the directory holds %v", got)
	}
}

func TestWriteFileAndCommitOpenFile(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "a.json")
	if err := atomicfile.WriteFile(final, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(final); string(b) != "{}\n" {
		t.Errorf("WriteFile wrote %q", b)
	}
	tmp, err := os.Create(filepath.Join(dir, ".open-b"))
	if err != nil {
		t.Fatal(err)
	}
	tmp.WriteString("b")
	if err := atomicfile.Commit(tmp, filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); len(got) != 2 || got[0] != "a.json" || got[1] != "b" {
		t.Errorf("directory holds %v, want a.json and b", got)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		t.Error(err)
	}
}

// TestCreateModeHonoursUmask: CreateMode's temp file, and so the final
// file, has the mode open(2) gives perm under the process's umask (the
// mode of a file the test makes the same way), under a name TempPattern
// matches; two at once get two names.
func TestCreateModeHonoursUmask(t *testing.T) {
	dir := t.TempDir()
	ref, err := os.OpenFile(filepath.Join(dir, "ref"), os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	ref.Close()
	rst, _ := os.Stat(ref.Name())
	final := filepath.Join(dir, "out.jsonl")
	f, err := atomicfile.CreateMode(final, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	g, err := atomicfile.CreateMode(final, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Abort()
	if f.Name() == g.Name() {
		t.Fatalf("two temp files named %s", f.Name())
	}
	if ok, _ := filepath.Match(atomicfile.TempPattern(final), filepath.Base(f.Name())); !ok {
		t.Errorf("temp %s does not match %s", f.Name(), atomicfile.TempPattern(final))
	}
	if _, err := f.WriteString("x\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(final)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != rst.Mode().Perm() {
		t.Errorf("mode %04o, want %04o (0666 under the umask)", st.Mode().Perm(), rst.Mode().Perm())
	}
}

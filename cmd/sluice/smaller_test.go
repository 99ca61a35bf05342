package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The small items of issue 21 (item 7), through the binary.

// asUnprivileged runs cmd as nobody when the tests run as root (whom file
// modes do not stop), from a copy of the binary nobody may execute.
func asUnprivileged(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	dir := openTempDir(t)
	bin := filepath.Join(dir, "sluice")
	src, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd.Path, cmd.Args[0] = bin, bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

// openTempDir is a temporary directory anyone may use (t.TempDir's parent
// is private to its owner).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnreadableInputIsBadInput: an input the user may not read is named
// as the input and exits 2 (bad input), for plan and run.
func TestUnreadableInputIsBadInput(t *testing.T) {
	dir := openTempDir(t)
	in, _ := writeInput(t, dir, 3)
	if err := os.Chmod(in, 0); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plan", in}, {"run", in, "--out", filepath.Join(dir, "out.jsonl")}} {
		cmd := sluiceCmd(append(stateEnv(dir), "HOME="+dir), args...)
		asUnprivileged(t, cmd)
		var se strings.Builder
		cmd.Stderr = &se
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != 2 || !strings.Contains(se.String(), "input: open "+in+": permission denied") {
			t.Errorf("%s: exit %d, want 2 naming the input\n%s", args[0], code, se.String())
		}
	}
}

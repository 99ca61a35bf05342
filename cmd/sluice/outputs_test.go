package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSkipInvalidOutputCustomIDsUnique (issue 21, item 6): under
// --skip-invalid the output holds each custom_id once, for the first line
// that has it: a later line with the same custom_id (valid or not) is
// rejected into the rejects file (with its custom_id and line) and the
// errors file (with its line; its custom_id, the earlier line's in the
// output, left null), and counted as rejected; the first line's answer is
// kept whether that line was valid or rejected.
func TestSkipInvalidOutputCustomIDsUnique(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := func(id, prompt string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}]}}`, id, prompt)
	}
	bad := func(id string) string { // no body
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions"}`, id)
	}
	lines := []string{
		good("a", "first a"),  // 1
		good("b", "b"),        // 2
		good("a", "second a"), // 3: duplicate of a valid line
		bad("c"),              // 4: rejected, in the output
		good("c", "late c"),   // 5: valid, but line 4 holds c in the output
		bad("a"),              // 6: rejected, and a is taken
		bad("d"),              // 7
		bad("d"),              // 8: rejected twice
		good("e", "e"),        // 9
	}
	in := filepath.Join(dir, "in.jsonl")
	writeFile(t, in, []byte(strings.Join(lines, "\n")+"\n"))
	out := filepath.Join(dir, "out.jsonl")
	rejects := filepath.Join(dir, "rejects.jsonl")
	r := runSluiceFor(t, 90*time.Second, stateEnv(dir), "run", in, "--out", out, "--skip-invalid", "--rejects", rejects)
	if r.code != exitFailures {
		t.Fatalf("exit %d, want 4\n%s", r.code, tail(r.stderr, 3000))
	}
	got := checkOutput(t, out, []string{"a", "b", "c", "d", "e"})
	for i, wantOK := range []bool{true, true, false, false, true} {
		o := got[i]
		if ok := o.Error == nil && o.Response != nil; ok != wantOK {
			t.Errorf("output line of %s: answered %v, want %v (%+v)", o.CustomID, ok, wantOK, o.Error)
		}
	}
	if !strings.Contains(string(got[0].Response.Body), "echo: a tsrif") { // the fake model echoes the prompt reversed
		t.Errorf("the answer of a is not line 1's: %s", got[0].Response.Body)
	}

	errs := readJSONL[errorsLine](t, filepath.Join(dir, "out.errors.jsonl"))
	want := []struct {
		line int64
		id   string // "" for null
		msg  string
	}{
		{3, "", "duplicate custom_id, first seen on line 1"},
		{4, "c", "body"},
		{5, "", "duplicate custom_id, first seen on line 4"},
		{6, "", "body"},
		{7, "d", "body"},
		{8, "", "body"},
	}
	if len(errs) != len(want) {
		t.Fatalf("errors file has %d lines, want %d: %+v", len(errs), len(want), errs)
	}
	for i, w := range want {
		e := errs[i]
		if e.Error.Line != w.line || e.CustomID != w.id || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, w.msg) {
			t.Errorf("errors line %d: custom_id %q %+v, want line %d custom_id %q and %q", i+1, e.CustomID, e.Error, w.line, w.id, w.msg)
		}
	}
	// The rejects file names each rejected line's custom_id and line.
	var rej []string
	for _, x := range readJSONL[struct {
		Line     int64  `json:"line"`
		CustomID string `json:"custom_id"`
	}](t, rejects) {
		rej = append(rej, fmt.Sprintf("%d:%s", x.Line, x.CustomID))
	}
	if g := strings.Join(rej, " "); g != "3:a 4:c 5:c 6:a 7:d 8:d" {
		t.Errorf("rejects file: %s, want 3:a 4:c 5:c 6:a 7:d 8:d", g)
	}
	if !strings.Contains(r.stdout, "9 input lines") || !strings.Contains(r.stdout, "3 succeeded") || !strings.Contains(r.stdout, "6 rejected") {
		t.Errorf("the summary does not count every line:\n%s", r.stdout)
	}
}

// readLines returns a file's lines.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// errorsLine is a line of an errors file (docs/contract.md).
type errorsLine struct {
	CustomID string `json:"custom_id"` // "" for null
	Error    struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Line    int64  `json:"line"`
	} `json:"error"`
}

// readJSONL decodes each line of a JSON Lines file into a T.
func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	var vs []T
	for _, l := range readLines(t, path) {
		var v T
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%s: line %q: %v", path, l, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// TestOutputFilesHonourUmask (issue 21, item 6): the output, errors and
// rejects files are made as every Unix tool makes a file, 0666 less the
// umask: 0644 under umask 022, 0600 under 077.
func TestOutputFilesHonourUmask(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		umask string
		want  os.FileMode
	}{{"022", 0o644}, {"077", 0o600}, {"002", 0o664}} {
		t.Run("umask"+c.umask, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.jsonl")
			writeFile(t, in, []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}}`+"\n"+
				`{"custom_id":"b","method":"POST","url":"/v1/chat/completions"}`+"\n"))
			out := filepath.Join(dir, "out.jsonl")
			rejects := filepath.Join(dir, "rejects.jsonl")
			// The umask is the process's: set it in a shell that then
			// becomes sluice.
			cmd := sluiceCmd(stateEnv(dir))
			cmd.Path = "/bin/sh"
			cmd.Args = []string{"sh", "-c", `umask ` + c.umask + ` && exec "$0" "$@"`, binary,
				"run", in, "--out", out, "--skip-invalid", "--rejects", rejects}
			b, err := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != exitFailures {
				t.Fatalf("exit %d (%v), want 4\n%s", code, err, tail(string(b), 2000))
			}
			for _, p := range []string{out, filepath.Join(dir, "out.errors.jsonl"), rejects} {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if got := st.Mode().Perm(); got != c.want {
					t.Errorf("%s: mode %04o under umask %s, want %04o", filepath.Base(p), got, c.umask, c.want)
				}
			}
		})
	}
}
